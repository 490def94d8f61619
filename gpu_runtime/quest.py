"""Quest page scoring kernel: an upper bound of each page's q.k from its per-page key min/max
(`selection.PageMeta`), one program per (request, KV head, block of pages)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from spsim.buckets import pow2  # host-side: triton.next_power_of_2 costs microseconds a call

from .interpret import INTERPRET  # noqa: F401  (applies the interpreter fix before decoration)


@triton.jit
def _quest_score(Q, KMIN, KMAX, PAGE_TABLE, NPAGES, OUT, sink, recent,
                 stride_qr, stride_qh, stride_mp, stride_mh, stride_pt, stride_out, max_pages,
                 HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, BLOCK_P: tl.constexpr):
    row = tl.program_id(0)
    r = row // HKV
    h = row % HKV
    offs_p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_d = tl.arange(0, D)
    n = tl.load(NPAGES + r)
    ok = offs_p < n
    # sum_g sum_d max(q_gd * lo_d, q_gd * hi_d) = (sum_g q_g^+) . hi + (sum_g q_g^-) . lo: the group's
    # heads fold into two vectors, so one pass over the page bounds serves the whole group.
    qp = tl.zeros([D], tl.float32)
    qn = tl.zeros([D], tl.float32)
    for j in tl.static_range(G):
        qj = tl.load(Q + r.to(tl.int64) * stride_qr + (h * G + j) * stride_qh + offs_d).to(tl.float32)
        qp += tl.maximum(qj, 0.0)
        qn += tl.minimum(qj, 0.0)
    phys = tl.load(PAGE_TABLE + r.to(tl.int64) * stride_pt + offs_p, mask=ok, other=0).to(tl.int64)
    moff = phys[:, None] * stride_mp + h * stride_mh + offs_d[None, :]
    lo = tl.load(KMIN + moff, mask=ok[:, None], other=0.0).to(tl.float32)
    hi = tl.load(KMAX + moff, mask=ok[:, None], other=0.0).to(tl.float32)
    score = tl.sum(hi * qp[None, :] + lo * qn[None, :], axis=1)
    keep = (offs_p < sink) | (offs_p >= n - recent)
    score = tl.where(keep, float("inf"), score)
    score = tl.where(ok, score, float("-inf"))
    tl.store(OUT + row.to(tl.int64) * stride_out + offs_p, score, mask=offs_p < max_pages)


def quest_scores(q: torch.Tensor, meta, page_table: torch.Tensor, num_pages: torch.Tensor,
                 sink: int, recent: int, block_p: int = 64) -> torch.Tensor:
    """Quest bound per (request, KV head, logical page) `[rows, max_pages]` fp32, summed over the
    group's query heads; sink and recent pages score +inf, pages past the end -inf.

    q `[requests, num_q_heads, d]`: each drafting request's newest query (after RoPE).
    """
    r_n, hq, d = q.shape
    hkv = meta.kmin.shape[1]
    maxp = page_table.shape[1]
    out = torch.empty((r_n * hkv, maxp), dtype=torch.float32, device=q.device)
    assert q.stride(2) == 1 and page_table.stride(1) == 1
    grid = (r_n * hkv, triton.cdiv(maxp, block_p))
    _quest_score[grid](q, meta.kmin, meta.kmax, page_table, num_pages, out, sink, recent,
                       q.stride(0), q.stride(1), meta.kmin.stride(0), meta.kmin.stride(1),
                       page_table.stride(0), out.stride(0), maxp,
                       HKV=hkv, G=hq // hkv, D=d, BLOCK_P=block_p, num_warps=4)
    return out




@triton.jit
def _topk_pages(SCORES, COUNTS, OUT, stride_s, stride_o, n_cols, k_cols,
                BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    """Row's `count` best columns, ascending, into OUT[row, :count]; OUT[row, count:k_cols] = -1.

    Radix-free select: bisect the threshold on order-preserving int32 keys of the fp32 scores
    (32 steps, each one reduction over the row held in registers), then take everything above it
    plus the lowest-index ties, and place each taken column at its prefix count (so ascending)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    s = tl.load(SCORES + row * stride_s + cols, mask=cols < n_cols, other=float("-inf"))
    bits = s.to(tl.int32, bitcast=True)
    key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # float order == signed int order
    key = tl.where(s == 0.0, 0, key)  # -0.0 ties with +0.0
    key = tl.where(cols < n_cols, key, -2147483648)  # padding below every real score
    k = tl.load(COUNTS + row)
    lo = tl.full([], -2147483648, tl.int64)
    hi = tl.full([], 2147483647, tl.int64)
    for _ in range(32):  # largest t with count(key >= t) >= k
        mid = lo + (hi - lo + 1) // 2
        c = tl.sum((key.to(tl.int64) >= mid).to(tl.int32), axis=0)
        lo = tl.where(c >= k, mid, lo)
        hi = tl.where(c >= k, hi, mid - 1)
    t = lo.to(tl.int32)
    above = key > t
    tie = key == t
    need = k - tl.sum(above.to(tl.int32), axis=0)
    take = above | (tie & (tl.cumsum(tie.to(tl.int32), axis=0) <= need))
    take = take & (cols < n_cols)
    pos = tl.cumsum(take.to(tl.int32), axis=0) - 1
    tl.store(OUT + row * stride_o + pos, cols.to(tl.int64), mask=take)
    ks = tl.arange(0, BLOCK_K)
    tl.store(OUT + row * stride_o + ks, tl.full([BLOCK_K], -1, tl.int64), mask=(ks >= k) & (ks < k_cols))


def topk_pages(scores: torch.Tensor, counts: torch.Tensor, k_cols: int) -> torch.Tensor:
    """`[rows, k_cols]` int64: each row's `counts[row]` (device int32) best columns, ascending, -1 after."""
    rows, n = scores.shape
    out = torch.empty((rows, k_cols), dtype=torch.int64, device=scores.device)
    block = pow2(n)
    _topk_pages[(rows,)](scores, counts, out, scores.stride(0), out.stride(0), n, k_cols,
                         BLOCK=block, BLOCK_K=pow2(k_cols), num_warps=4 if block <= 2048 else 8)
    return out
