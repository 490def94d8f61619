"""Fused small ops of a decoder layer: RMSNorm, residual add + RMSNorm, RoPE on q and k (one
launch for both), SiLU-gate.

In a decode pass these are hundreds of tiny kernels (an 8B model at 16 x 32K spent 2.8 ms of a
24 ms pass in them on an H200, `benchmarks/results/runtime_profile_h200_b16x32k.json`); one
Triton kernel each replaces 4-8 PyTorch ones. Same arithmetic as the PyTorch code in `model.py`
(fp32 inside, rounded to the activation dtype where PyTorch rounds), up to summation order.
Used for CUDA tensors where the Triton kernels run; everything else takes the PyTorch path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from spsim.buckets import pow2  # host-side: triton.next_power_of_2 costs microseconds a call

from .interpret import INTERPRET  # noqa: F401  (applies the interpreter fix before decoration)
from . import pdl


def enabled(x: torch.Tensor) -> bool:
    """The fused kernels for this activation: CUDA, 16-bit, where the Triton kernels run."""
    from . import dispatch

    return x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and dispatch.use_triton(x.device)


@triton.jit
def _rmsnorm(X, Y, RES, W, OUT, OUT_RES, n, eps, ADD: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    pdl.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < n
    x = tl.load(X + row * n + cols, mask=ok, other=0.0)
    if ADD:  # the residual sum, rounded to the activation dtype as `x + y` is
        x = (x.to(tl.float32) + tl.load(Y + row * n + cols, mask=ok, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(OUT_RES + row * n + cols, x, mask=ok)
    h = x.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / n + eps)
    hn = (h * inv).to(x.dtype).to(tl.float32)
    w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(OUT + row * n + cols, (w * hn).to(OUT.dtype.element_ty), mask=ok)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    n = x.shape[-1]
    out = torch.empty_like(x)
    rows = x.numel() // n
    _rmsnorm[(rows,)](x, x, x, weight, out, out, n, eps, ADD=False, BLOCK=pow2(n), num_warps=8,
                      **pdl.kw())
    return out


def add_rmsnorm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float):
    """`(x + y, rmsnorm(x + y))` in one pass over the rows."""
    x, y = x.contiguous(), y.contiguous()
    n = x.shape[-1]
    res, out = torch.empty_like(x), torch.empty_like(x)
    rows = x.numel() // n
    _rmsnorm[(rows,)](x, y, x, weight, out, res, n, eps, ADD=True, BLOCK=pow2(n), num_warps=8,
                      **pdl.kw())
    return res, out


@triton.jit
def rotate(x1, x2, c, s):
    """RoPE on a pair of fp32 halves, with the fused multiply-adds spelled out: left to the
    compiler, `x1 * c - x2 * s` contracts differently in different kernels, and the kernels that
    rotate k (here, and `kv_write._rope_kv_write` with its page bounds) must agree to the bit."""
    return tl.fma(x1, c, -(x2 * s)), tl.fma(x2, c, x1 * s)


@triton.jit
def _rope(X, COS, SIN, OUT, heads, stride_t, stride_h, HALF: tl.constexpr, PDL: tl.constexpr = False):
    pdl.enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    i = tl.arange(0, HALF)
    base = X + t * stride_t + h * stride_h
    x1 = tl.load(base + i).to(tl.float32)
    x2 = tl.load(base + HALF + i).to(tl.float32)
    c = tl.load(COS + t * HALF + i)
    s = tl.load(SIN + t * HALF + i)
    o = OUT + (t * heads + h) * (2 * HALF)
    r1, r2 = rotate(x1, x2, c, s)
    tl.store(o + i, r1.to(OUT.dtype.element_ty))
    tl.store(o + HALF + i, r2.to(OUT.dtype.element_ty))


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[T, H, D]` (rows may be strided views of the fused QKV output), cos/sin `[T, D/2]` fp32."""
    t, h, d = x.shape
    assert x.stride(2) == 1 and cos.dtype == torch.float32
    out = torch.empty((t, h, d), dtype=x.dtype, device=x.device)
    if t:
        _rope[(t, h)](x, cos.contiguous(), sin.contiguous(), out, h, x.stride(0), x.stride(1), HALF=d // 2,
                      num_warps=1, **pdl.kw())
    return out


@triton.jit
def _rope_qk(QKV, COS, SIN, Q, K, q_heads, kv_heads, stride_t, HALF: tl.constexpr, PDL: tl.constexpr = False):
    """One program per (token, head) of q and k: rotated q into Q, rotated k into K."""
    pdl.enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    i = tl.arange(0, HALF)
    x1 = tl.load(QKV + t * stride_t + h * 2 * HALF + i).to(tl.float32)  # q heads then k heads: adjacent
    x2 = tl.load(QKV + t * stride_t + h * 2 * HALF + HALF + i).to(tl.float32)
    c = tl.load(COS + t * HALF + i)
    s = tl.load(SIN + t * HALF + i)
    is_q = h < q_heads
    o = tl.where(is_q, t * q_heads + h, t * kv_heads + (h - q_heads)) * (2 * HALF)
    r1, r2 = rotate(x1, x2, c, s)
    if is_q:
        tl.store(Q + o + i, r1.to(Q.dtype.element_ty))
        tl.store(Q + o + HALF + i, r2.to(Q.dtype.element_ty))
    else:
        tl.store(K + o + i, r1.to(K.dtype.element_ty))
        tl.store(K + o + HALF + i, r2.to(K.dtype.element_ty))


def rope_qk(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, q_heads: int, kv_heads: int, d: int):
    """RoPE on the q and k heads of the fused QKV output `[T, (q_heads + 2 kv_heads) d]` in one
    launch (two `rope` calls are two): `(q [T, q_heads, d], k [T, kv_heads, d])`."""
    t = qkv.shape[0]
    assert qkv.stride(1) == 1 and cos.dtype == torch.float32
    q = torch.empty((t, q_heads, d), dtype=qkv.dtype, device=qkv.device)
    k = torch.empty((t, kv_heads, d), dtype=qkv.dtype, device=qkv.device)
    if t:
        _rope_qk[(t, q_heads + kv_heads)](qkv, cos.contiguous(), sin.contiguous(), q, k, q_heads, kv_heads,
                                          qkv.stride(0), HALF=d // 2, num_warps=1, **pdl.kw())
    return q, k


@triton.jit
def _silu_mul(GU, OUT, n, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    pdl.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < n
    g = tl.load(GU + row * 2 * n + cols, mask=ok, other=0.0)
    u = tl.load(GU + row * 2 * n + n + cols, mask=ok, other=0.0)
    gf = g.to(tl.float32)
    s = (gf / (1.0 + tl.exp(-gf))).to(g.dtype)  # F.silu rounds to the dtype, then the product
    tl.store(OUT + row * n + cols, (s.to(tl.float32) * u.to(tl.float32)).to(g.dtype), mask=ok)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up` where `gate_up` is `[T, 2n]` (gate | up)."""
    gate_up = gate_up.contiguous()
    t, n2 = gate_up.shape
    n = n2 // 2
    out = torch.empty((t, n), dtype=gate_up.dtype, device=gate_up.device)
    block = 1024
    if t:
        _silu_mul[(t, triton.cdiv(n, block))](gate_up, out, n, BLOCK=block, num_warps=4, **pdl.kw())
    return out
