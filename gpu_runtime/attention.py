"""One Triton attention launch for a mixed pass: decode, verify, sparse draft and prefill chunks.

Every request has `q_len` query tokens (1 for decode and draft, k+1 for verify, the chunk for
prefill) whose own K/V are already in the cache, at the tail of each of its rows' page lists; query
i sits at list position `kv_len - q_len + i` and sees list positions up to it (causal tail). A
sparse draft is just a request whose rows list the selected pages.

Work is cut on the host into items `(request, kv_head, first query, token range)`:
- the tile's BLOCK_M rows are (query, head-in-group) pairs, `row = query * G + head`, so the
  group's heads share each K/V tile: every page is read once per KV head, not once per query head;
- long rows are split into token ranges (split-KV) so a small batch still fills the GPU; splits
  write fp32 partials (acc, max, sum) and they are combined by the last split of each unit to
  finish (a per-unit arrival counter; FUSED_MERGE) or by a separate merge kernel. Verify gets the
  same treatment as decode: it is only a taller tile.
All lengths come from device arrays, so new lengths, batch sizes or page counts never recompile;
the constexprs are the model/cache shape and the tile height.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from spsim.buckets import pow2
from spsim.worklist import MIN_SPLIT_TOKENS, NUM_SMS, WAVES, split_blocks_for

from .interpret import INTERPRET as _INTERPRET  # under it, half-precision dots are unreliable: fp32
from . import pdl
from .pages import PageLists, upload

WORK_FIELDS = 7  # req, kv_head, first query, token lo, token hi, partial slot (-1: write output), merge row
MERGE_FIELDS = 5  # req, kv_head, first query, first slot, number of slots


@triton.jit
def _attn_fwd(Q, K, V, O, PO, PM, PL, PSCORE, WORK, ROW_START, ROW_COUNT, ROW_LAST, INDICES,
              Q_START, Q_LEN, MERGE, ARRIVED, scale_log2,
              stride_qt, stride_qh, stride_kp, stride_kh, stride_kt, stride_ot, stride_oh,
              stride_score,
              HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, PS: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, UPCAST: tl.constexpr,
              WRITE_SCORES: tl.constexpr, FUSED_MERGE: tl.constexpr = 0, PDL: tl.constexpr = False):
    pdl.enter(PDL)
    pid = tl.program_id(0).to(tl.int64)
    w = WORK + pid * 7
    req = tl.load(w + 0)
    if req < 0:  # padding (`pad_plan`: a CUDA graph's work list has room for more items)
        return
    hkv = tl.load(w + 1)
    qb = tl.load(w + 2)
    tok_lo = tl.load(w + 3)
    tok_hi = tl.load(w + 4)
    slot = tl.load(w + 5)
    row = req * HKV + hkv
    start = tl.load(ROW_START + row).to(tl.int64)
    count = tl.load(ROW_COUNT + row)
    last = tl.load(ROW_LAST + row)
    kv_len = tl.where(count > 0, (count - 1) * PS + last, 0)
    q0 = tl.load(Q_START + req)
    ql = tl.load(Q_LEN + req)

    QB: tl.constexpr = BLOCK_M // G  # queries per tile
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    qi = qb + offs_m // G
    hq = hkv * G + offs_m % G
    row_ok = (offs_m < QB * G) & (qi < ql)
    q_pos = kv_len - ql + qi  # list position of each row's query token
    q_ptr = Q + (q0 + qi).to(tl.int64)[:, None] * stride_qt + hq[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptr, mask=row_ok[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)

    # Finite initial max: a row that sees no key keeps m = -1e30, p = exp2(-inf) = 0, l = 0 (no NaN).
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    offs_n0 = tl.arange(0, BLOCK_N)
    kv_base = hkv.to(tl.int64) * stride_kh
    # Each block's page ids are loaded one block ahead and carried in registers, so the K/V loads
    # depend on no load of their own iteration. With the page-id load in the chain, Triton 3.6's
    # pipeliner gave K/V num_stages - 3 shared-memory buffers (one at 3 stages: the next block's
    # load was issued only after the current one was consumed); carried, num_stages - 1 (read off
    # the TTGIR for sm_90; see NOTES.md). Carrying them two blocks ahead stops it pipelining at all.
    pg_row = INDICES + start
    page_nx = tl.load(pg_row + (tok_lo + offs_n0) // PS, mask=tok_lo + offs_n0 < kv_len, other=0)
    for t in range(tok_lo, tok_hi, BLOCK_N):
        offs_n = t + offs_n0
        n_ok = offs_n < kv_len
        page = page_nx.to(tl.int64)
        offs_nx = offs_n + BLOCK_N
        page_nx = tl.load(pg_row + offs_nx // PS, mask=offs_nx < kv_len, other=0)
        kv_off = kv_base + page * stride_kp + (offs_n % PS).to(tl.int64) * stride_kt
        k = tl.load(K + kv_off[:, None] + offs_d[None, :], mask=n_ok[:, None], other=0.0)
        v = tl.load(V + kv_off[:, None] + offs_d[None, :], mask=n_ok[:, None], other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * scale_log2
        ok = n_ok[None, :] & (offs_n[None, :] <= q_pos[:, None]) & row_ok[:, None]
        s = tl.where(ok, s, float("-inf"))
        if WRITE_SCORES:
            # Largest logit on each page over the tile's rows: what the SparseSpec-L selector ranks.
            # Several query tiles (a long prefill chunk) score the same pages: atomic max, into a
            # buffer reset to -inf before the launch (a plain store raced: the last tile won)
            pmax = tl.max(tl.reshape(tl.max(s, axis=0), [BLOCK_N // PS, PS]), axis=1)
            pidx = t // PS + tl.arange(0, BLOCK_N // PS)
            tl.atomic_max(PSCORE + row * stride_score + pidx, pmax, mask=pidx < count)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    if slot < 0:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        o_ptr = O + (q0 + qi).to(tl.int64)[:, None] * stride_ot + hq[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptr, out.to(O.dtype.element_ty), mask=row_ok[:, None])
    else:
        ps = slot.to(tl.int64) * BLOCK_M + offs_m
        tl.store(PO + ps[:, None] * D + offs_d[None, :], acc, mask=row_ok[:, None])
        tl.store(PM + ps, m_i, mask=row_ok)
        tl.store(PL + ps, l_i, mask=row_ok)
        if FUSED_MERGE:
            mr = tl.load(w + 6)
            if mr >= 0:
                # The unit's last split to arrive merges (saves the merge launch, a large share of a small
                # pass). Barrier, then one acq_rel atomic: every thread's partial stores are visible to
                # whichever program sees the final count (the split-K semaphore pattern). That program
                # resets the counter, so a plan replays from a CUDA graph. Units whose work rows carry
                # no merge row (-1) are merged by the merge launch instead (`plan_attention`: per unit).
                mrow = MERGE + mr.to(tl.int64) * 5
                slot0 = tl.load(mrow + 3).to(tl.int64)
                nslot = tl.load(mrow + 4)
                tl.debug_barrier()
                arrived = tl.atomic_add(ARRIVED + mr, 1, sem="acq_rel", scope="gpu")
                if arrived == nslot - 1:
                    tl.debug_barrier()
                    m_t = tl.full([BLOCK_M], -1.0e30, tl.float32)
                    l_t = tl.zeros([BLOCK_M], tl.float32)
                    acc_t = tl.zeros([BLOCK_M, D], tl.float32)
                    for j in range(0, nslot):  # online rescaling, one partial at a time; L1 bypassed (.cg)
                        pj = (slot0 + j) * BLOCK_M + offs_m
                        m_j = tl.load(PM + pj, mask=row_ok, other=-1.0e30, cache_modifier=".cg")
                        l_j = tl.load(PL + pj, mask=row_ok, other=0.0, cache_modifier=".cg")
                        o_j = tl.load(PO + pj[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0,
                                      cache_modifier=".cg")
                        m_n = tl.maximum(m_t, m_j)
                        a_t = tl.exp2(m_t - m_n)
                        a_j = tl.exp2(m_j - m_n)
                        l_t = l_t * a_t + l_j * a_j
                        acc_t = acc_t * a_t[:, None] + o_j * a_j[:, None]
                        m_t = m_n
                    out = acc_t / tl.where(l_t > 0, l_t, 1.0)[:, None]
                    o_ptr = O + (q0 + qi).to(tl.int64)[:, None] * stride_ot + hq[:, None] * stride_oh + offs_d[None, :]
                    tl.store(o_ptr, out.to(O.dtype.element_ty), mask=row_ok[:, None])
                    tl.store(ARRIVED + mr, 0)


@triton.jit
def _attn_merge(O, PO, PM, PL, MERGE, Q_START, Q_LEN, stride_ot, stride_oh,
                G: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, MB: tl.constexpr, DB: tl.constexpr,
                CS: tl.constexpr, PDL: tl.constexpr = False):
    """One program per (split unit, MB tile rows, DB head dims); CS partials per step.

    The global max is found first, so a step only adds weighted partials and its loads do not
    wait on the previous step's arithmetic: one load latency per CS partials. (v3 merged one
    partial per step in one program per unit; many short splits were then far slower: NOTES.md.)"""
    pdl.enter(PDL)
    pid = tl.program_id(0).to(tl.int64)
    w = MERGE + pid * 5
    req = tl.load(w + 0)
    if req < 0:  # padding
        return
    hkv = tl.load(w + 1)
    qb = tl.load(w + 2)
    slot0 = tl.load(w + 3).to(tl.int64)
    nslot = tl.load(w + 4)
    q0 = tl.load(Q_START + req)
    ql = tl.load(Q_LEN + req)
    QB: tl.constexpr = BLOCK_M // G
    offs_m = tl.program_id(1) * MB + tl.arange(0, MB)
    offs_d = tl.program_id(2) * DB + tl.arange(0, DB)
    offs_s = tl.arange(0, CS)
    qi = qb + offs_m // G
    hq = hkv * G + offs_m % G
    row_ok = (offs_m < QB * G) & (qi < ql)
    m_tot = tl.full([MB], -1.0e30, tl.float32)
    for s0 in range(0, nslot, CS):
        ps = (slot0 + s0 + offs_s)[:, None] * BLOCK_M + offs_m[None, :]
        ok = ((s0 + offs_s) < nslot)[:, None] & row_ok[None, :]
        m_tot = tl.maximum(m_tot, tl.max(tl.load(PM + ps, mask=ok, other=-1.0e30), axis=0))
    l_tot = tl.zeros([MB], tl.float32)
    acc = tl.zeros([MB, DB], tl.float32)
    for s0 in range(0, nslot, CS):
        ps = (slot0 + s0 + offs_s)[:, None] * BLOCK_M + offs_m[None, :]
        ok = ((s0 + offs_s) < nslot)[:, None] & row_ok[None, :]
        m = tl.load(PM + ps, mask=ok, other=-1.0e30)
        l = tl.load(PL + ps, mask=ok, other=0.0)
        o = tl.load(PO + ps[:, :, None] * D + offs_d[None, None, :], mask=ok[:, :, None], other=0.0)
        wt = tl.exp2(m - m_tot[None, :])
        l_tot += tl.sum(l * wt, axis=0)
        acc += tl.sum(o * wt[:, :, None], axis=0)
    out = acc / tl.where(l_tot > 0, l_tot, 1.0)[:, None]
    o_ptr = O + (q0 + qi).to(tl.int64)[:, None] * stride_ot + hq[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptr, out.to(O.dtype.element_ty), mask=row_ok[:, None])


@dataclass
class AttentionPlan:
    """Host-built work list for one launch; reusable while lengths stay the same (CUDA graphs)."""

    work: torch.Tensor  # (items, 6) int32
    merge: torch.Tensor  # (merges, 5) int32
    q_start: torch.Tensor  # (requests,) int32
    q_len: torch.Tensor  # (requests,) int32
    lists: PageLists
    num_q_heads: int
    num_slots: int
    block_m: int
    block_n: int
    tokens_per_split: int
    num_warps: int
    num_stages: int
    merge_rows: int = 8  # tile rows per merge program
    merge_dims: int = 32  # head dims per merge program
    merge_slots: int = 32  # partials per merge step
    fused_merge: bool = True  # the kernel may merge in place: units whose work rows name a merge row
    merge_launch: bool = False  # a merge launch follows (for the units the kernel does not merge)
    arrived: torch.Tensor | None = None  # (merges,) int32 arrival counters, zero between launches
    # the pass's tall requests (prefill chunks, long verifications) in a launch of their own, with
    # prefill tiles (`plan_attention`, SPLIT_TALL); None: this plan covers every request
    tall: "AttentionPlan | None" = None

    @property
    def group(self) -> int:
        return self.num_q_heads // self.lists.num_kv_heads

    def parts(self) -> list["AttentionPlan"]:
        """The launches of this plan: itself, then the tall requests' plan if split off."""
        return [self] if self.tall is None else [self, self.tall]


# Units of at most this many splits merge in the main kernel (the last split to finish merges);
# more go to the merge launch, which reads 32 partials per step. H200, v6 (NOTES.md): draft b=4
# (4 splits) 24.0 vs 26.3 us fused; b=1 (16 splits) 20.8 vs 17.3 us. Tried 2026-12-02: a fused merge
# reading 64/BLOCK_M partials per step after a global max made the main loop itself slower at every
# size (its registers): decode b=1 32K 43.2 -> 62.6 us, b=16 32K 504 -> 610 (fused_merge_ab_h200.json).
FUSED_MAX_SPLITS = 4

# (BLOCK_N, num_warps, num_stages) by tile height: short tiles (decode, draft: <= 32 rows),
# tall (verify, 64 rows), prefill (128 rows). See NOTES.md for the sweeps behind them.
SHORT_TILE = (128, 8, 3)
TALL_TILE = (64, 4, 3)
PREFILL_TILE = (64, 8, 3)
# Short tiles over many work items (full decode of long rows): more CTAs resident per SM beat deeper
# pipelining. H200, decode_tiles.json (us per layer, 128/8/3 vs 64/4/2): b=16 32K 539.9 vs 503.8,
# b=8 64K 534.7 vs 499.3, b=4 120K 526.6 vs 463.8; but b=1 32K (128 items) 43.6 vs 70.1 and sparse
# drafts b=16 at 2K 40.3 vs 66.0: below LONG_TILE_WAVES waves of items the short tile stays.
LONG_TILE = (64, 4, 2)
LONG_TILE_WAVES = 4


def choose_block_m(q_len: np.ndarray, group: int) -> int:
    """Tile height: fits the tallest short request (decode/draft/verify) whole, 16..128 rows."""
    short = np.minimum(np.asarray(q_len, dtype=np.int64), max(1, 128 // group))
    need = int(short.max(initial=1)) * group
    # spsim.buckets.pow2, not triton.next_power_of_2: triton's is a constexpr function costing
    # microseconds a call on the host, and plans call this per pass
    return min(max(16, pow2(need)), max(128, pow2(group)))


def _units(nqb: np.ndarray, hkv: int, qb_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(request, KV head, first query) of every unit: request-major, then head, then query block
    (`nqb[r]` blocks of `qb_size` queries for each of request r's heads). One pass of numpy instead
    of a repeat and a tile per request (host time of every pass)."""
    nqb = np.asarray(nqb, np.int64)
    per_req = nqb * hkv
    u_req = np.repeat(np.arange(len(nqb)), per_req)
    j = np.arange(len(u_req)) - np.repeat(np.cumsum(per_req) - per_req, per_req)  # unit within its request
    k = nqb[u_req]
    return u_req, j // np.maximum(k, 1), (j % np.maximum(k, 1)) * qb_size


def plan_attention(q_len, lists: PageLists, num_q_heads: int, *, num_sms: int = NUM_SMS,
                   waves: float = WAVES, min_split_tokens: int = MIN_SPLIT_TOKENS, block_m: int | None = None,
                   block_n: int | None = None, tokens_per_split: int | None = None,
                   num_warps: int | None = None, num_stages: int | None = None,
                   fused_merge: bool | None = None, split=None, requests=None, skip=None,
                   max_items: int | None = None, max_items_split: int | None = None,
                   block_m_split: int | None = None) -> AttentionPlan:
    """Cut the pass into work items.

    Split size: the KV blocks of all (row, query block) units over `num_sms * waves` items, but
    at least `min_split_tokens` per split (shorter splits cost more in prologue, partials and
    merge than the parallelism gains) unless that leaves fewer items than SMs; then the shortest
    splits that still fit one wave. (H200, bf16, v4: batch 1 at 32K is fastest with 128 splits of
    2048 tokens, at 128K with 256 of 4096; see NOTES.md.) Prefill query blocks stop at their last
    query's causal bound. Tile widths, warps and stages: SHORT_TILE (LONG_TILE over many items), TALL_TILE, PREFILL_TILE.
    `split`: requests (indices) planned apart, in a launch of their own with its own tile
    (`AttentionPlan.tall`: prefill chunks beside decode-like requests, see `PassAttention`);
    `block_m`/`block_n` then apply to the other requests only.
    `requests`: plan only these requests (the others get no work).
    `skip`: requests that get no work at all (the padding's filler, whose output nothing reads).
    `max_items` (`max_items_split` for the `split` requests' plan): at most this many work items,
    splits lengthened until they fit (a padded plan's room: `work_cap`).
    """
    device = lists.count.device
    q_len = np.asarray(q_len, dtype=np.int64)
    n_req = len(q_len)
    hkv, ps = lists.num_kv_heads, lists.page_size
    g = num_q_heads // hkv
    assert g * hkv == num_q_heads and lists.num_rows == n_req * hkv
    kw = dict(num_sms=num_sms, waves=waves, min_split_tokens=min_split_tokens, tokens_per_split=tokens_per_split,
              num_warps=num_warps, num_stages=num_stages, fused_merge=fused_merge)
    if skip is not None and len(skip):
        keep = np.setdiff1d(np.arange(n_req), skip)
        requests = keep if requests is None else np.intersect1d(requests, keep)
    if split is not None and 0 < len(split) < n_req:  # a forced tile is the rest's; the split's is its own
        rest = np.setdiff1d(np.arange(n_req) if requests is None else requests, split)
        plan = plan_attention(q_len, lists, num_q_heads, requests=rest, block_m=block_m, block_n=block_n,
                              max_items=max_items, **kw)
        plan.tall = plan_attention(q_len, lists, num_q_heads, requests=split, max_items=max_items_split,
                                   block_m=block_m_split, **kw)
        return plan
    sub = None if requests is None else np.asarray(requests, np.int64)
    bm = block_m or choose_block_m(q_len if sub is None else q_len[sub], g)
    cfg_bn, cfg_nw, cfg_st = SHORT_TILE if bm <= 32 else TALL_TILE if bm < 128 else PREFILL_TILE
    bn = block_n or max(ps, cfg_bn)
    assert bn % ps == 0 and bm >= g
    qb_size = bm // g
    kv_len = lists.kv_len_np.reshape(n_req, hkv)
    assert (q_len.reshape(-1, 1) <= kv_len).all(), "a request's query tokens must already be in its KV rows"

    # units: (request, head, query block)
    nqb = np.maximum(1, -(-q_len // qb_size))
    if sub is not None:
        nqb = np.where(np.isin(np.arange(n_req), sub), nqb, 0)
    u_req, u_head, u_qb = _units(nqb, hkv, qb_size)
    u_kv = kv_len[u_req, u_head]
    q_last = np.minimum(u_qb + qb_size, q_len[u_req])  # one past the block's last query
    u_end = np.clip(u_kv - q_len[u_req] + q_last, 0, u_kv)  # causal bound of the block
    u_blocks = -(-u_end // bn)
    if tokens_per_split is None:
        tokens_per_split = split_blocks_for(u_blocks, num_sms, waves, min_split_tokens, bn) * bn
    if max_items is not None:  # a padded plan's room: longer splits until the items fit it
        longest = max(1, int(u_blocks.max(initial=1))) * bn
        while int(np.maximum(1, -(-u_blocks // (tokens_per_split // bn))).sum()) > max_items \
                and tokens_per_split < longest:  # one item per unit at most: more units than room stay over
            tokens_per_split *= 2
    assert tokens_per_split % bn == 0
    split_blocks = tokens_per_split // bn
    u_splits = np.maximum(1, -(-u_blocks // split_blocks))
    if bm <= 32 and block_n is None and int(u_splits.sum()) >= LONG_TILE_WAVES * num_sms \
            and tokens_per_split % LONG_TILE[0] == 0:
        # same items, narrower tile: re-cut the blocks at the long tile's width
        (bn, cfg_nw, cfg_st) = (max(ps, LONG_TILE[0]),) + LONG_TILE[1:]
        u_blocks = -(-u_end // bn)
        split_blocks = tokens_per_split // bn
        u_splits = np.maximum(1, -(-u_blocks // split_blocks))

    # items: one per (unit, split); single-split units write the output directly
    w_unit = np.repeat(np.arange(len(u_splits)), u_splits)
    w_split = np.arange(len(w_unit)) - np.repeat(np.cumsum(u_splits) - u_splits, u_splits)
    lo = w_split * tokens_per_split
    hi = np.minimum(lo + tokens_per_split, u_blocks[w_unit] * bn)
    multi = u_splits[w_unit] > 1
    slot = np.where(multi, np.cumsum(multi) - 1, -1)
    merge_row = np.cumsum(u_splits > 1) - 1  # per unit: its row in `merge` (if split)
    # which split units the kernel merges in place: per unit, the fused merge reads partials one
    # at a time, so a launch wins past a few (None); or all (True), or none (False)
    if fused_merge is None:
        fuse_unit = u_splits <= FUSED_MAX_SPLITS
    else:
        fuse_unit = np.full(len(u_splits), bool(fused_merge))
    work = np.stack([u_req[w_unit], u_head[w_unit], u_qb[w_unit], lo, hi, slot,
                     np.where(multi & fuse_unit[w_unit], merge_row[w_unit], -1)], 1)
    mu = np.nonzero(u_splits > 1)[0]
    first_slot = np.cumsum(np.where(u_splits > 1, u_splits, 0)) - u_splits
    # the merge launch skips the units merged in place (request -1; their slots stay for the kernel)
    merge = np.stack([np.where(fuse_unit[mu], -1, u_req[mu]), u_head[mu], u_qb[mu], first_slot[mu], u_splits[mu]], 1)
    merge_launch = bool((~fuse_unit[mu]).any())
    # the kernel's in-place merge stays compiled in unless asked off: a unit whose work rows name
    # no merge row costs it a branch, and eager plans then launch the variant the captured (padded)
    # ones do, not one more to compile mid-run (a lone row of a few thousand tokens beside a long
    # chunk split more than FUSED_MAX_SPLITS ways; an `ar` run on an H100 compiled it while measured)
    fused_merge = fused_merge is not False
    q_start = np.concatenate([[0], np.cumsum(q_len)[:-1]]) if n_req else np.zeros(0, np.int64)
    work_t, merge_t, q_start_t, q_len_t = upload([work, merge, q_start, q_len], [np.int32] * 4, device)
    return AttentionPlan(work_t.reshape(-1, WORK_FIELDS), merge_t.reshape(-1, MERGE_FIELDS),
                         q_start_t, q_len_t, lists, num_q_heads, int(multi.sum()), bm, bn,
                         tokens_per_split, num_warps or cfg_nw, num_stages or cfg_st,
                         fused_merge=fused_merge, merge_launch=merge_launch,
                         arrived=torch.zeros(max(len(mu), 1), dtype=torch.int32, device=device))


# Padded plans' smallest sizes (then powers of two): a padding row costs a program that exits at
# once, and the sizes are part of a CUDA graph's shape. With 25 % steps and no floor, the Azure
# conversation trace's first 45 s under fixed-k:k=4 met 185 distinct plan sizes in 4,053 passes
# (benchmarks/graph_shapes.py); with these, 2.
PAD_WORK, PAD_MERGE, PAD_SLOTS = 128, 64, 128


def pad_plan(plan: AttentionPlan, caps=None) -> AttentionPlan:
    """The plan with its work and merge lists and partial slots rounded up to powers of two, the
    extra rows marked as padding (request -1, which both kernels skip): passes whose lists differ
    only in length then share one CUDA graph (graphs.py). The same plan object, changed in place."""
    def grow(t: torch.Tensor, n: int) -> torch.Tensor:
        if t.shape[0] >= n:
            return t
        pad = torch.full((n - t.shape[0], t.shape[1]), -1, dtype=t.dtype, device=t.device)
        return torch.cat([t, pad])

    caps = list(caps) if caps is not None else [None, None]
    if plan.tall is not None:
        pad_plan(plan.tall, [caps[1]])
    if caps[0] is not None:  # the shape rule's room (`work_cap`): (work items, merge rows)
        n_work, n_merge = caps[0]
        assert plan.work.shape[0] <= n_work and plan.merge.shape[0] <= n_merge, "a plan past its room"
        plan.work, plan.merge, plan.num_slots = grow(plan.work, n_work), grow(plan.merge, n_merge), n_work
    else:
        n_merge = pow2(plan.merge.shape[0], PAD_MERGE)
        plan.work = grow(plan.work, pow2(plan.work.shape[0], PAD_WORK))
        plan.merge = grow(plan.merge, n_merge)
        plan.num_slots = pow2(plan.num_slots, PAD_SLOTS)
    plan.arrived = torch.zeros(n_merge, dtype=torch.int32, device=plan.work.device)
    # one kernel shape whatever the contexts: the in-place merge compiled in, the merge launch
    # always there (its rows of units merged in place, or of padding, exit at once)
    plan.fused_merge = plan.merge_launch = True
    return plan


def mixed_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: AttentionPlan,
                    out: torch.Tensor | None = None, sm_scale: float | None = None,
                    page_scores: torch.Tensor | None = None, num_warps: int | None = None,
                    num_stages: int | None = None) -> torch.Tensor:
    """Attention for every request of a pass in one launch per tile height (`AttentionPlan.parts`;
    plus a merge launch if any request is
    split and the plan does not fuse the merge; a fused plan must not run in two streams at once:
    its arrival counters are shared).

    q, out: `[total query tokens, num_q_heads, head_dim]` (requests' tokens back to back).
    k_cache, v_cache: `[num_pages, num_kv_heads, page_size, head_dim]`.
    page_scores (optional, fp32 `[rows, >= max pages]`): filled with each listed page's largest
    scaled logit over the row's query heads and tokens (for `selection.select_from_scores`), -inf
    elsewhere (reset here: the kernel takes an atomic max over query tiles).
    """
    n_tok, hq, d = q.shape
    _, hkv, ps, d2 = k_cache.shape
    assert d == d2 and hq == plan.num_q_heads and hkv == plan.lists.num_kv_heads and ps == plan.lists.page_size
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1 and q.stride(2) == 1
    out = torch.empty_like(q) if out is None else out
    sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    if page_scores is not None:
        page_scores.fill_(float("-inf"))
    for part in plan.parts():  # the parts' requests are disjoint: each writes its own rows
        _launch(q, k_cache, v_cache, part, out, sm_scale, page_scores, num_warps, num_stages)
    return out


def _launch(q, k_cache, v_cache, plan: AttentionPlan, out, sm_scale, page_scores, num_warps, num_stages) -> None:
    d = q.shape[2]
    hkv, ps = k_cache.shape[1], k_cache.shape[2]
    bm, bn = plan.block_m, plan.block_n
    po = q.new_empty((max(plan.num_slots, 1) * bm, d), dtype=torch.float32)
    pm = q.new_empty((max(plan.num_slots, 1) * bm,), dtype=torch.float32)
    pl = torch.empty_like(pm)
    scores = page_scores if page_scores is not None else pm
    n_items = plan.work.shape[0]
    nw = num_warps or plan.num_warps
    num_stages = num_stages or plan.num_stages
    if n_items:
        _attn_fwd[(n_items,)](
            q, k_cache, v_cache, out, po, pm, pl, scores, plan.work, plan.lists.start, plan.lists.count,
            plan.lists.last_len, plan.lists.indices, plan.q_start, plan.q_len, plan.merge, plan.arrived,
            sm_scale * 1.4426950408889634,
            q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            out.stride(0), out.stride(1), scores.stride(0) if page_scores is not None else 0,
            HKV=hkv, G=plan.group, D=d, PS=ps, BLOCK_M=bm, BLOCK_N=bn, UPCAST=_INTERPRET,
            WRITE_SCORES=page_scores is not None, FUSED_MERGE=int(plan.fused_merge), num_warps=nw,
            num_stages=num_stages, **pdl.kw())
    if plan.merge.shape[0] and plan.merge_launch:
        mb, db = min(plan.merge_rows, bm), min(plan.merge_dims, d)
        _attn_merge[(plan.merge.shape[0], bm // mb, d // db)](
            out, po, pm, pl, plan.merge, plan.q_start, plan.q_len, out.stride(0), out.stride(1),
            G=plan.group, D=d, BLOCK_M=bm, MB=mb, DB=db, CS=plan.merge_slots, num_warps=4, **pdl.kw())
