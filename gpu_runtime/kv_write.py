"""A layer's new K/V written into the paged cache, and Quest's page bounds kept current, in one
kernel.

PyTorch does this as two indexed stores (`kc[page, :, off] = k`, the same for v) plus four ops for
the page bounds (two resets, two `scatter_reduce` min/max on 16-bit floats, which compare-and-swap
element by element: the 9 tokens of a verification land in one or two pages and queue on the same
addresses). On the H200 a pass of 16 drafts + 16 verifications of 9 tokens spent 3.1 ms of 32 in the
two scatters (`benchmarks/results/runtime_profile_h200_mixed.json`).

Here one program per (token, KV head) stores the token's K and V rows; the first new token of each
page in the pass (a *run head*: a request's new tokens are contiguous in the batch and a page
belongs to one request, so a page's new tokens form one run of at most page_size tokens) also
reduces its run's keys to min/max and combines them with the page's bounds (not when the run
starts the page: a fresh page's bounds are the run's own). No atomics, so the result is exactly
the PyTorch path's (min/max of 16-bit values are exact in fp32).
"""

from __future__ import annotations

import os

import numpy as np
import torch
import triton
import triton.language as tl

from .interpret import INTERPRET  # noqa: F401  (applies the interpreter fix before decoration)
from . import pdl
from .fused import rotate


def run_lengths(page: np.ndarray) -> np.ndarray:
    """Per token of the pass: the length of its page's run if it is the run's first token, else 0."""
    page = np.asarray(page, np.int64)
    n = len(page)
    if n == 0:
        return np.zeros(0, np.int32)
    head = np.ones(n, bool)
    head[1:] = page[1:] != page[:-1]
    at = np.flatnonzero(head)
    out = np.zeros(n, np.int32)
    out[at] = np.diff(np.append(at, n))
    return out


@triton.jit
def _kv_write(K, V, KC, VC, PAGE, OFF, RUN, KMIN, KMAX,
              stride_kt, stride_kh, stride_vt, stride_vh,
              stride_cp, stride_ch, stride_co, stride_mp, stride_mh,
              PS: tl.constexpr, D: tl.constexpr, META: tl.constexpr, PDL: tl.constexpr = False):
    pdl.enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    d = tl.arange(0, D)
    page = tl.load(PAGE + t).to(tl.int64)
    off = tl.load(OFF + t).to(tl.int64)
    k = tl.load(K + t * stride_kt + h * stride_kh + d)
    v = tl.load(V + t * stride_vt + h * stride_vh + d)
    dst = page * stride_cp + h * stride_ch + off * stride_co + d
    tl.store(KC + dst, k.to(KC.dtype.element_ty))
    tl.store(VC + dst, v.to(VC.dtype.element_ty))
    if META:
        n = tl.load(RUN + t)
        if n > 0:
            r = tl.arange(0, PS)
            ok = r < n
            kr = tl.load(K + (t + r)[:, None] * stride_kt + h * stride_kh + d[None, :], mask=ok[:, None],
                         other=0.0).to(KC.dtype.element_ty).to(tl.float32)
            lo = tl.min(tl.where(ok[:, None], kr, float("inf")), axis=0)
            hi = tl.max(tl.where(ok[:, None], kr, float("-inf")), axis=0)
            m = page * stride_mp + h * stride_mh + d
            if off != 0:  # the page already holds tokens: combine with its bounds
                lo = tl.minimum(lo, tl.load(KMIN + m).to(tl.float32))
                hi = tl.maximum(hi, tl.load(KMAX + m).to(tl.float32))
            tl.store(KMIN + m, lo.to(KMIN.dtype.element_ty))
            tl.store(KMAX + m, hi.to(KMAX.dtype.element_ty))


def write_kv(kc: torch.Tensor, vc: torch.Tensor, k: torch.Tensor, v: torch.Tensor, page: torch.Tensor,
             off: torch.Tensor, run: torch.Tensor | None = None, meta=None) -> None:
    """Store `k`, `v` `[T, kv_heads, head_dim]` at (page, off) of one layer's cache `[pages, kv_heads,
    page_size, head_dim]`; with `meta` (a layer's `selection.PageMeta`) and `run` (`run_lengths` of
    the pass's pages, int32 on the device) also update its page bounds."""
    t, hkv, d = k.shape
    if t == 0:
        return
    assert k.stride(2) == 1 and v.stride(2) == 1 and kc.is_contiguous() and vc.is_contiguous()
    use_meta = meta is not None
    kmin = meta.kmin if use_meta else kc
    kmax = meta.kmax if use_meta else kc
    _kv_write[(t, hkv)](k, v, kc, vc, page, off, run if use_meta else off, kmin, kmax,
                        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                        kc.stride(0), kc.stride(1), kc.stride(2), kmin.stride(0), kmin.stride(1),
                        PS=kc.shape[2], D=d, META=use_meta, num_warps=1, **pdl.kw())


# RoPE and the K/V write in one kernel (`SPSIM_ROPE_WRITE=0`: two launches, for A/B timing). Why:
# at batch 1 a decode layer is ~12 kernels of a few microseconds; RoPE (`fused.rope_qk`) and this
# write are two of them, and each costs a launch gap and a drain however small its work. On the
# H200 the 8B's 1 x 32K decode step went from 5.829 to 5.645 ms (A/B with `benchmarks/decode_launch.py`).
ROPE_WRITE = os.environ.get("SPSIM_ROPE_WRITE", "1") != "0"


@triton.jit
def _rope_kv_write(QKV, COS, SIN, Q, KC, VC, PAGE, OFF, RUN, KMIN, KMAX, q_heads, stride_t,
                   stride_cp, stride_ch, stride_co, stride_mp, stride_mh,
                   HKV: tl.constexpr, PS: tl.constexpr, HALF: tl.constexpr, META: tl.constexpr,
                   PDL: tl.constexpr = False):
    """One program per (token, q head) rotates q into Q; one per (token, KV head) rotates k and
    stores it with v at the token's (page, offset), and a run head also updates the page's
    bounds from its run's keys, rotated again here. The same arithmetic and roundings as
    `fused._rope_qk` then `_kv_write` (k rounded to the activations' dtype first): the same bits."""
    pdl.enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    i = tl.arange(0, HALF)
    c = tl.load(COS + t * HALF + i)
    s = tl.load(SIN + t * HALF + i)
    if h < q_heads:
        x1 = tl.load(QKV + t * stride_t + h * 2 * HALF + i).to(tl.float32)
        x2 = tl.load(QKV + t * stride_t + h * 2 * HALF + HALF + i).to(tl.float32)
        o = (t * q_heads + h) * (2 * HALF)
        q1, q2 = rotate(x1, x2, c, s)
        tl.store(Q + o + i, q1.to(Q.dtype.element_ty))
        tl.store(Q + o + HALF + i, q2.to(Q.dtype.element_ty))
    else:
        kh = (h - q_heads).to(tl.int64)
        ko = (q_heads + kh) * 2 * HALF
        vo = (q_heads + HKV + kh) * 2 * HALF
        x1 = tl.load(QKV + t * stride_t + ko + i).to(tl.float32)
        x2 = tl.load(QKV + t * stride_t + ko + HALF + i).to(tl.float32)
        k1, k2 = rotate(x1, x2, c, s)
        k1 = k1.to(Q.dtype.element_ty).to(KC.dtype.element_ty)
        k2 = k2.to(Q.dtype.element_ty).to(KC.dtype.element_ty)
        page = tl.load(PAGE + t).to(tl.int64)
        off = tl.load(OFF + t).to(tl.int64)
        dst = page * stride_cp + kh * stride_ch + off * stride_co
        tl.store(KC + dst + i, k1)
        tl.store(KC + dst + HALF + i, k2)
        tl.store(VC + dst + i, tl.load(QKV + t * stride_t + vo + i).to(VC.dtype.element_ty))
        tl.store(VC + dst + HALF + i, tl.load(QKV + t * stride_t + vo + HALF + i).to(VC.dtype.element_ty))
        if META:
            n = tl.load(RUN + t)
            if n > 0:
                r = tl.arange(0, PS)
                ok = r < n
                rows = t + r
                a1 = tl.load(QKV + rows[:, None] * stride_t + ko + i[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
                a2 = tl.load(QKV + rows[:, None] * stride_t + ko + HALF + i[None, :], mask=ok[:, None],
                             other=0.0).to(tl.float32)
                cr = tl.load(COS + rows[:, None] * HALF + i[None, :], mask=ok[:, None], other=0.0)
                sr = tl.load(SIN + rows[:, None] * HALF + i[None, :], mask=ok[:, None], other=0.0)
                r1, r2 = rotate(a1, a2, cr, sr)
                r1 = r1.to(Q.dtype.element_ty).to(KC.dtype.element_ty).to(tl.float32)
                r2 = r2.to(Q.dtype.element_ty).to(KC.dtype.element_ty).to(tl.float32)
                lo1 = tl.min(tl.where(ok[:, None], r1, float("inf")), axis=0)
                lo2 = tl.min(tl.where(ok[:, None], r2, float("inf")), axis=0)
                hi1 = tl.max(tl.where(ok[:, None], r1, float("-inf")), axis=0)
                hi2 = tl.max(tl.where(ok[:, None], r2, float("-inf")), axis=0)
                m = page * stride_mp + kh * stride_mh
                if off != 0:  # the page already holds tokens: combine with its bounds
                    lo1 = tl.minimum(lo1, tl.load(KMIN + m + i).to(tl.float32))
                    lo2 = tl.minimum(lo2, tl.load(KMIN + m + HALF + i).to(tl.float32))
                    hi1 = tl.maximum(hi1, tl.load(KMAX + m + i).to(tl.float32))
                    hi2 = tl.maximum(hi2, tl.load(KMAX + m + HALF + i).to(tl.float32))
                tl.store(KMIN + m + i, lo1.to(KMIN.dtype.element_ty))
                tl.store(KMIN + m + HALF + i, lo2.to(KMIN.dtype.element_ty))
                tl.store(KMAX + m + i, hi1.to(KMAX.dtype.element_ty))
                tl.store(KMAX + m + HALF + i, hi2.to(KMAX.dtype.element_ty))


def rope_write_kv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, q_heads: int, kc: torch.Tensor,
                  vc: torch.Tensor, page: torch.Tensor, off: torch.Tensor, run: torch.Tensor | None = None,
                  meta=None) -> torch.Tensor:
    """`fused.rope_qk` and `write_kv` in one launch: from the fused QKV output `[T, (q_heads + 2
    kv_heads) d]`, store the rotated k and v at (page, off) of one layer's cache (and with `meta`,
    `run`: the pages' bounds) and return the rotated q `[T, q_heads, d]`."""
    t = qkv.shape[0]
    _, hkv, ps, d = kc.shape
    assert qkv.stride(1) == 1 and qkv.shape[1] == (q_heads + 2 * hkv) * d and cos.dtype == torch.float32
    assert kc.is_contiguous() and vc.is_contiguous()
    q = torch.empty((t, q_heads, d), dtype=qkv.dtype, device=qkv.device)
    if t == 0:
        return q
    use_meta = meta is not None
    kmin = meta.kmin if use_meta else kc
    kmax = meta.kmax if use_meta else kc
    _rope_kv_write[(t, q_heads + hkv)](qkv, cos.contiguous(), sin.contiguous(), q, kc, vc, page, off,
                                       run if use_meta else off, kmin, kmax, q_heads, qkv.stride(0),
                                       kc.stride(0), kc.stride(1), kc.stride(2), kmin.stride(0), kmin.stride(1),
                                       HKV=hkv, PS=ps, HALF=d // 2, META=use_meta, num_warps=1, **pdl.kw())
    return q
