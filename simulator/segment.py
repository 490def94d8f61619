"""The simulator's fast path: many decode passes planned, priced and applied as one segment.

When every running request is decoding under a policy that plans ahead, the next passes are known
until the first verification whose outcome is random, a completion or a page shortage (an arrival
routed to the replica cuts the segment short there). `FastPath.plan` returns them as one
`SegmentPlan`; the replica prices them in one call (`segment_cost`), and `FastPath.apply` leaves
exactly the state that as many single passes through `Batcher.plan`/`apply` would. It works on the
batcher's request table and its extension point (`ask_policy`, `decode_order`,
`record_verifications`, `finish`, and the public `running`, `pool`, `itl`, `passes`); the batcher
knows nothing of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spsim.plan import PassPlan
from spsim.policies.batcher import Batcher

I64 = np.int64
NO_IDS = np.zeros(0, I64)


@dataclass
class DecodeSegment:
    """`n` consecutive pure-decode passes over the same `r` requests (no prefill, no admissions).

    Per pass i and request j: `kind[i, j]` is 1 (draft) or 2 (verify), `query[i, j]` the query
    tokens (1 for a draft), `context[i, j]` the KV tokens before that pass, `draft_pos[i, j]` the
    provisional drafted tokens held before that pass (PassPlan.draft_pos for drafts; for a verify,
    query - 1). `budget`, `method` are per request. A segment cost returns the n pass times from
    this in one call; entry i must equal what the step path pays for the same pass.
    """

    kind: np.ndarray  # (n, r) int8
    query: np.ndarray  # (n, r) int64
    context: np.ndarray  # (n, r) int64
    draft_pos: np.ndarray  # (n, r) int64
    budget: np.ndarray  # (r,) int64
    method: np.ndarray  # (r,) int64

    DRAFT = 1
    VERIFY = 2

    @classmethod
    def plain(cls, context: list[int], n: int) -> "DecodeSegment":
        """n plain decode passes (every request verifies one token) from `context`."""
        r = len(context)
        ctx = np.asarray(context, I64) + np.arange(n, dtype=I64)[:, None]
        one, zero = np.ones((n, r), I64), np.zeros(r, I64)
        return cls(np.full((n, r), cls.VERIFY, np.int8), one, ctx, one - 1, zero, zero)

    @classmethod
    def from_plan(cls, plan: PassPlan) -> "DecodeSegment":
        """A one-pass segment from a plan without prefill, drafts first (tests use it)."""
        assert not len(plan.prefill_ids)
        nd, nv = len(plan.draft_ids), len(plan.verify_ids)
        kind = np.concatenate([np.full(nd, 1, np.int8), np.full(nv, 2, np.int8)])[None, :]
        query = np.concatenate([np.ones(nd, I64), plan.verify_query])[None, :]
        ctx = np.concatenate([plan.draft_context, plan.verify_context])[None, :]
        dpos = np.concatenate([plan.draft_pos, plan.verify_query - 1])[None, :]
        budget = np.concatenate([plan.draft_budget, np.zeros(nv, I64)])
        method = np.concatenate([plan.draft_method, np.zeros(nv, I64)])
        return cls(kind, query, ctx, dpos, budget, method)


@dataclass(slots=True)
class SegmentPlan:
    rids: np.ndarray | list[int]  # running order (a list when every request decodes plainly)
    n: int  # passes
    seg: DecodeSegment | None  # None: every request decodes plainly, priced by `decode_times`
    context: list[int] | None = None  # plain decode: each request's context before the first pass
    ar_like: np.ndarray | None = None  # bool per request: verifies every pass with no drafts
    verify_at: np.ndarray | None = None  # pass index of each speculative request's verification (or n)


class FastPath:
    # Plain-decode segments (every request verifies one token per pass, no drafts) of up to this
    # many requests are planned and applied on Python scalars: at ~1.5 requests per pass, numpy's
    # ~1 us per call on tiny arrays was most of a segment's cost.
    SCALAR_MAX = 8

    def __init__(self, batcher: Batcher):
        self.b = batcher
        # the batcher's state objects (never rebound by it), held directly: attribute hops add up
        # at tens of thousands of segments
        self.t, self.cfg, self.pool, self.running = batcher.t, batcher.cfg, batcher.pool, batcher.running
        self.itl = batcher.itl  # emission gaps, one array per pass or segment
        cfg = batcher.cfg
        # read-only per-request constants, sliced instead of made per segment
        self._budget = np.full(cfg.max_batch, cfg.draft_budget, I64)
        self._method = np.full(cfg.max_batch, cfg.draft_method, I64)
        self._budget.flags.writeable = self._method.flags.writeable = False

    def one_pass(self, plan: PassPlan) -> DecodeSegment:
        """A decode-only plan as a one-pass segment with its requests in running order, the same
        column order `plan()` uses, so both paths price passes identically."""
        dec, verify = self.b.decode_order
        t = self.t
        d = t.drafted[dec]
        return DecodeSegment(np.where(verify, 2, 1).astype(np.int8)[None, :],
                             np.where(verify, d + 1, 1)[None, :], t.ctx[dec][None, :], d[None, :],
                             self._budget[:len(dec)], self._method[:len(dec)])

    def plan(self, max_passes: int) -> SegmentPlan | None:
        """The next passes as one segment, or None when the step path must plan: a prefill is in
        progress, the policy is asked every pass, nothing runs, or fewer than two passes are
        known (the first already needs a random outcome, a finish or a page decision)."""
        b, running = self.b, self.running
        if b.prefilling or not running or not b.policy.plans_ahead:
            return None
        t, cfg = self.t, self.cfg
        b.ask_policy(np.array(running, dtype=I64))
        if len(running) <= self.SCALAR_MAX and (n := self._plain_passes(max_passes)) >= 0:
            if n < 2:
                return None
            rids = list(running)
            ctx, sh, pg = t.ctx, t.shared_tokens, t.pages
            context = [ctx.item(rid) for rid in rids]
            base = [c - sh.item(rid) + 1 for c, rid in zip(context, rids)]
            n = self._fit_pages(base, sum(pg.item(rid) for rid in rids), n)
            return SegmentPlan(rids, n, None, context) if n >= 2 else None
        run = np.array(running, dtype=I64)
        rem = t.output[run] - t.committed[run]
        eff = np.minimum(np.minimum(t.target[run], rem - 1), cfg.max_draft)
        d = t.drafted[run]
        ar_like = (eff <= 0) & (d == 0)
        n_ar = sum(ar_like.tolist())
        plain = n_ar == len(run)
        wait = None if plain else np.maximum(eff - d, 0)  # passes of drafting before the verify
        if plain:
            n = min(max_passes, min(rem.tolist()))
        elif n_ar == 0:
            n = min(max_passes, min(wait.tolist()) + 1)
        else:
            n = min(max_passes, min(wait[~ar_like].tolist()) + 1, min(rem[ar_like].tolist()))
        if n_ar and cfg.max_draft:  # zero targets expire (Policy.plain_hold): the policy is asked then
            hold = ar_like & (t.target[run] == 0)
            if any(hold.tolist()):
                n = min(n, min((t.recheck[run] - t.committed[run])[hold].tolist()))
        if n < 2:
            return None
        ctx0 = t.ctx[run]
        base = ctx0 + d - t.shared_tokens[run] + 1
        n = self._fit_pages(base.tolist(), sum(t.pages[run].tolist()), n)
        if n < 2:
            return None
        if plain:
            return SegmentPlan(run.tolist(), n, None, ctx0.tolist())
        i = np.arange(n, dtype=I64)[:, None]
        is_verify = ar_like | (i == wait)
        kind = np.where(is_verify, DecodeSegment.VERIFY, DecodeSegment.DRAFT).astype(np.int8)
        dpos = np.where(ar_like, 0, d + i)
        query = np.where(is_verify, dpos + 1, 1)
        ctx = ctx0 + np.where(ar_like, i, 0)
        verify_at = np.where(ar_like, n, wait)
        seg = DecodeSegment(kind, query, ctx, dpos, self._budget[:len(run)], self._method[:len(run)])
        return SegmentPlan(run, n, seg, None, ar_like, verify_at)

    def _plain_passes(self, max_passes: int) -> int:
        """Passes until the first finish (at most max_passes) if every running request decodes
        plainly (its effective target is 0 and it holds no drafts), else -1. Scalar code."""
        t = self.t
        out, com, dr, tg, rc = t.output, t.committed, t.drafted, t.target, t.recheck
        spec = self.cfg.max_draft > 0
        n = max_passes
        for rid in self.running:
            rem = out.item(rid) - com.item(rid)
            if spec:
                if dr.item(rid) or (rem > 1 and tg.item(rid) > 0):
                    return -1
                if tg.item(rid) == 0 and rc.item(rid) - com.item(rid) < n:  # the zero target expires
                    n = rc.item(rid) - com.item(rid)
            if rem < n:
                n = rem
        return n

    def _fit_pages(self, base: list[int], held: int, n: int) -> int:
        """Passes (at most n) whose pages fit: before pass i a request holds base - 1 + i tokens
        and needs room for one more. A cheap upper bound first, the exact count only when it
        does not fit."""
        ps, free, r = self.cfg.page_size, self.pool.free(), len(base)
        if (sum(base) + r * (n - 1)) // ps + r - held <= free:
            return n
        i = np.arange(n, dtype=I64)[:, None]
        extra = (-(-(np.asarray(base, I64)[None, :] + i) // ps)).sum(axis=1) - held
        fits = extra <= free
        return n if fits.all() else int(np.argmin(fits))

    def apply(self, sp: SegmentPlan, n: int, ends: np.ndarray, accepted: np.ndarray) -> None:
        """Apply the first `n` passes of a segment. `ends[i]` is when pass i ended; `accepted` the
        outcome of the speculative verifications in pass n-1 (aligned with `last_verify_ids`)."""
        b = self.b
        b.passes += n
        if sp.seg is None and len(sp.rids) <= self.SCALAR_MAX:
            return self._apply_plain(sp.rids, n, ends)
        t, ps, pool = self.t, self.cfg.page_size, self.pool
        run = np.asarray(sp.rids, I64)
        ar = np.ones(len(run), bool) if sp.seg is None else sp.ar_like
        a, sr = run[ar], run[~ar]
        m = n - 1  # passes before the last, whose verifications are applied together below
        if len(a) and m:  # AR-like requests: one token per pass, each pass an emission
            t.committed[a] += m
            t.ctx[a] += m
            t.verifies[a] += m
            gaps = np.empty((m, len(a)))
            gaps[0] = ends[0] - t.t_last_emit[a]
            gaps[1:] = (ends[1:m] - ends[:m - 1])[:, None]  # np.diff, without its wrapper
            self.itl.append(gaps.ravel())
            t.t_last_emit[a] = ends[m - 1]
        ver = np.zeros(0, bool)
        if len(sr):  # speculative requests: drafts through pass n-1, verifying there if due
            ver = sp.verify_at[~ar] == m
            drafted_passes = np.where(ver, m, n)
            t.drafted[sr] += drafted_passes
            t.drafts[sr] += drafted_passes
        # pages as the step path leaves them: room reserved before pass n-1 for one more token
        # (AR-like: ctx + 1; drafting: ctx + drafted - 1 + 1; verifying: ctx + drafted + 1)
        held = t.ctx[run] - t.shared_tokens[run] + np.where(ar, 1, t.drafted[run])
        held[~ar] += ver
        need = -(-held // ps)
        pool.adjust(sum((need - t.pages[run]).tolist()))
        pool.track_peak()
        t.pages[run] = need
        # pass n-1's verifications, AR-like and speculative together in running order, as the
        # step path applies them (the order of emission gaps and finishes)
        last = ar.copy()
        last[~ar] = ver
        v = run[last]
        if len(v):
            acc = np.zeros(len(v), I64)
            if accepted is not None:
                acc[~ar[last]] = accepted
            b.record_verifications(v, t.drafted[v].copy(), acc, ends[m])

    def _apply_plain(self, rids: list[int], n: int, ends: np.ndarray) -> None:
        """apply_segment of a small plain-decode segment, one request at a time on scalars."""
        b = self.b
        t, ps, pool = self.t, self.cfg.page_size, self.pool
        com, ctx, ver, last, sh, pg = t.committed, t.ctx, t.verifies, t.t_last_emit, t.shared_tokens, t.pages
        end = ends[n - 1]
        e0 = ends.item(0)
        gaps = np.empty((n, len(rids)))
        gaps[1:] = (ends[1:n] - ends[:n - 1])[:, None]
        first, grown, done = [], 0, []
        for rid in rids:
            com[rid] = c = com.item(rid) + n
            ctx[rid] = k = ctx.item(rid) + n
            ver[rid] += n
            first.append(e0 - last.item(rid))
            last[rid] = end
            need = -(-(k - sh.item(rid)) // ps)  # room for one more token before pass n-1
            grown += need - pg.item(rid)
            pg[rid] = need
            if c >= t.output.item(rid):
                done.append(rid)
        gaps[0] = first
        self.itl.append(gaps.ravel())
        pool.adjust(grown)
        if pool.used > pool.peak:
            pool.peak = pool.used
        for rid in done:
            b.finish(rid, end)

    def last_verify_ids(self, sp: SegmentPlan, n: int) -> np.ndarray:
        """Speculative requests verifying in pass n-1 (whose outcomes `apply` needs)."""
        if sp.seg is None:
            return NO_IDS
        s = ~sp.ar_like
        return sp.rids[s][sp.verify_at[s] == n - 1]
