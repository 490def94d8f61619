"""One-token linear layers, `y = x W^T (+ b)` for x `[1, K]`, as a Triton kernel that starts
reading its weights before the previous kernel has finished.

Why: a batch-1 decode step of an 8B model is mostly reading weights, four matrices a layer. cuBLAS
runs the two small ones (QKV 50 MB, output 34 MB) at ~3.1-3.2 TB/s of a 4.2 TB/s copy bandwidth,
follows the output and down projections with a split-K reduce kernel each, and launches none of
them with programmatic dependent launch (`pdl.py`), so each waits for its predecessor to drain
(`benchmarks/results/runtime_profile_h200_b1x32k.json`). Weights never change within a pass, so
here each program loads its first tile of W, then waits on the previous kernel, then reads x:
the weight reads overlap the predecessor's tail and the launch.

Each program owns BLOCK_N output rows and walks K in BLOCK_K-wide tiles (the next tile's load
issued before the current one is reduced), accumulating in fp32. Used for one-token passes on
GPUs where the Triton kernels run (`SPSIM_GEMV=0` turns it off). On the H200 it took the 8B's
batch-1 x 32K decode step from 5.570 to 5.262 ms (1.131x to 1.079x its floor, A/B on one machine;
5.223 ms, 1.064x, on another: `benchmarks/results/decode_launch_h200.json`); passes of more tokens
keep cuBLAS (its 8-16-token GEMMs timed 9-10 % faster than its 1-token ones in a run that let
weights sit in L2; not re-timed from HBM).
"""

from __future__ import annotations

import json
import os

import torch
import triton
import triton.language as tl

from .interpret import INTERPRET  # noqa: F401  (applies the interpreter fix before decoration)
from . import pdl

ENABLED = os.environ.get("SPSIM_GEMV", "1") != "0"  # SPSIM_GEMV=0: cuBLAS (A/B timing)


@triton.jit
def _gemv(X, W, B, Y, N, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          HAS_BIAS: tl.constexpr, PDL: tl.constexpr = False):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    okn = rn < N
    rows = W + rn.to(tl.int64)[:, None] * K
    rk = tl.arange(0, BLOCK_K)
    w = tl.load(rows + rk[None, :], mask=okn[:, None], other=0.0)
    pdl.enter(PDL)  # the weights are read-only for the pass: only x must wait
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in tl.static_range(0, K, BLOCK_K):
        if k0 + BLOCK_K < K:  # the next tile in flight while this one is reduced
            nxt = tl.load(rows + (k0 + BLOCK_K + rk)[None, :], mask=okn[:, None], other=0.0)
        x = tl.load(X + k0 + rk).to(tl.float32)
        acc += tl.sum(w.to(tl.float32) * x[None, :], axis=1)
        if k0 + BLOCK_K < K:
            w = nxt
    if HAS_BIAS:
        acc += tl.load(B + rn, mask=okn, other=0.0).to(tl.float32)
    tl.store(Y + rn, acc.to(Y.dtype.element_ty), mask=okn)


def default_config(n: int, k: int) -> tuple[int, int, int]:
    """`(BLOCK_N, BLOCK_K, num_warps)`: K tiles of up to 2048 (a power of two dividing K), rows
    enough for 4K weights a tile, 4 warps. On the H200 (`benchmarks/results/gemv_h200.json`,
    the 8B's five one-token shapes, 20 tiles each) this tile, 2 x 2048, was within 2 % of each
    shape's best (e.g. down 27.7 us, best 27.7, cuBLAS 31.7; QKV 13.4, best 13.1, cuBLAS 16.9)."""
    bk = 1
    while bk < 2048 and k % (2 * bk) == 0:
        bk *= 2
    bn = max(1, min(16, 4096 // bk))
    return bn, bk, 4


_TABLE: dict[tuple[int, int], tuple[int, int, int]] | None = None


def config(n: int, k: int) -> tuple[int, int, int]:
    """The tile for an `[n, k]` weight: `SPSIM_GEMV_TABLE` (a JSON list of `{"N", "K", "block_n",
    "block_k", "warps"}`, what `benchmarks/gemv.py` writes as its best) where it names the shape,
    else `default_config`."""
    global _TABLE
    if _TABLE is None:
        _TABLE = {}
        path = os.environ.get("SPSIM_GEMV_TABLE")
        if path:
            with open(path) as f:
                for e in json.load(f):
                    _TABLE[(int(e["N"]), int(e["K"]))] = (int(e["block_n"]), int(e["block_k"]), int(e["warps"]))
    return _TABLE.get((n, k)) or default_config(n, k)


def usable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """One token, contiguous 16-bit operands of one dtype, K a multiple of 16."""
    return (x.dim() == 2 and x.shape[0] == 1 and x.dtype == weight.dtype and x.dtype in (torch.bfloat16, torch.float16)
            and weight.is_contiguous() and x.stride(-1) == 1 and weight.shape[1] % 16 == 0)


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         cfg: tuple[int, int, int] | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` for x `[1, K]` (see `usable`); `cfg` overrides `config`."""
    n, k = weight.shape
    bn, bk, warps = cfg or config(n, k)
    assert k % bk == 0, (k, bk)
    y = torch.empty((1, n), dtype=x.dtype, device=x.device)
    _gemv[(triton.cdiv(n, bn),)](x.contiguous(), weight, bias if bias is not None else weight, y, n, K=k,
                                 BLOCK_N=bn, BLOCK_K=bk, HAS_BIAS=bias is not None, num_warps=warps, **pdl.kw())
    return y
