"""The batcher: one per replica. Builds each pass (a PassPlan) and applies its outcome.

A pass is built in this order (DESIGN.md): admit waiting requests FCFS while KV pages and the
batch size allow; ask the policy, for every decode request, verify now or draft one more; fill the
rest of the token budget with prefill chunks. The batcher, not the policy, forces a verify when a
draft would pass the request's remaining output tokens, reaches `max_draft`, or (for synchronous
policies) when any other request verifies.

Memory: a request holds pages for its tokens in the KV cache plus provisional drafted tokens, less
prompt blocks shared through the prefix cache. When a decode step cannot get a page, the most
recently admitted request is preempted and later recomputed (vLLM's recompute policy). Requests
that can never fit, or exceed the model's context window, are rejected at arrival with a reason.

Reductions of per-batch arrays (counts, sums of ints, any) go through `.tolist()` and Python's
builtins: batches are small and numpy's reductions cost ~2 us per call, which adds up to much of
a pass's bookkeeping.

`segment()` is the fast path: when every request is decoding under a policy that plans ahead, the
next passes are known until the first verification whose outcome is random, a completion or a
page shortage (an arrival routed here cuts the segment short in the replica): it returns them as
one DecodeSegment, and `apply_segment()` gives exactly the state that many single passes would.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from spsim.plan import DecodeSegment, Outcome, PassPlan

from .base import DecodeView, Policy
from .kv import KVPool
from .request import Phase, RequestTable

I64 = np.int64
NO_IDS = np.zeros(0, I64)
NO_IDS.flags.writeable = False
NO_DECODE = dict.fromkeys(("draft_ids", "draft_context", "draft_budget", "draft_method", "draft_pos",
                           "verify_ids", "verify_query", "verify_context"), NO_IDS)  # PassPlan groups
# plain ints: IntEnum attribute access is slow in per-pass code
WAITING, PREFILL, DECODE, DONE, REJECTED = (int(p) for p in (Phase.WAITING, Phase.PREFILL, Phase.DECODE,
                                                             Phase.DONE, Phase.REJECTED))


@dataclass
class BatcherConfig:
    capacity_pages: int
    max_context: int
    max_batch: int = 256
    token_budget: int = 8192
    page_size: int = 16
    draft_method: int = 1
    draft_budget: int = 2048
    max_draft: int = 16
    prefix_cache: bool = True
    block_size: int | None = None


@dataclass(slots=True)
class SegmentPlan:
    rids: np.ndarray | list[int]  # running order (a list when every request decodes plainly)
    n: int  # passes
    seg: DecodeSegment | None  # None: every request decodes plainly, priced by `decode_times`
    context: list[int] | None = None  # plain decode: each request's context before the first pass
    ar_like: np.ndarray | None = None  # bool per request: verifies every pass with no drafts
    verify_at: np.ndarray | None = None  # pass index of each speculative request's verification (or n)


class Batcher:
    def __init__(self, cfg: BatcherConfig, table: RequestTable, policy: Policy,
                 prefix_indptr: np.ndarray | None = None, prefix_ids: np.ndarray | None = None):
        self.cfg = cfg
        self.t = table
        self.policy = policy
        self.pool = KVPool(cfg.capacity_pages, cfg.page_size, cfg.block_size,
                           cfg.prefix_cache and prefix_indptr is not None)
        self.prefix_indptr, self.prefix_ids = prefix_indptr, prefix_ids
        self.waiting: deque[int] = deque()
        self.running: list[int] = []  # admission order
        self.prefilling: list[int] = []  # running requests still in prefill, admission order
        self.itl: list[np.ndarray] = []  # emission gaps, one array per pass or segment
        self.dirty = True  # batch composition changed: plans-ahead targets must be re-asked
        self.passes = 0
        self.finished = 0
        self.on_done = None  # callable(rid, now) when a request finishes or is rejected
        # per-request constants, sliced (views) instead of made for every plan and view;
        # read-only: a batch never holds more than max_batch requests
        self._budget = np.full(cfg.max_batch, cfg.draft_budget, I64)
        self._method = np.full(cfg.max_batch, cfg.draft_method, I64)
        self._budget.flags.writeable = self._method.flags.writeable = False

    # ---------------------------------------------------------------- arrivals and admission
    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def enqueue(self, rid: int, now: float) -> None:
        t, cfg = self.t, self.cfg
        t.replica[rid] = 0
        if t.prompt[rid] + t.output[rid] > cfg.max_context:
            return self._reject(rid, 1, now)
        worst = self.pool.pages_for(t.prompt[rid] + t.output[rid] + cfg.max_draft)
        if worst > cfg.capacity_pages:
            return self._reject(rid, 2, now)
        t.phase[rid] = WAITING
        t.prefill_target[rid] = t.prompt[rid]
        self.waiting.append(rid)

    def _reject(self, rid: int, reason: int, now: float = 0.0) -> None:
        self.t.phase[rid] = REJECTED
        self.t.reject[rid] = reason
        if self.on_done:
            self.on_done(rid, now)

    def _blocks(self, rid: int) -> np.ndarray:
        return self.prefix_ids[self.prefix_indptr[rid]:self.prefix_indptr[rid + 1]]

    def admit(self, now: float) -> None:
        t, cfg, pool = self.t, self.cfg, self.pool
        cache = pool.cache
        while self.waiting and len(self.running) < cfg.max_batch:
            rid = self.waiting[0]
            target = int(t.prefill_target[rid])
            hits = 0
            if cache is not None:
                blocks = self._blocks(rid)[: int(t.prompt[rid]) // cfg.block_size]
                hits = cache.match(blocks)
                if hits * cfg.block_size >= target:  # keep one token to compute logits from
                    hits -= 1
                blocks = blocks[:hits]
                cache.acquire(blocks, count_stats=False)
            shared = hits * (cfg.block_size or 0)
            need = pool.pages_for(target - shared)
            if not pool.reserve(need):
                if cache is not None:
                    cache.release(blocks)
                break
            if cache is not None:
                cache.lookups += 1
                cache.hit_blocks += hits
                cache.queried_blocks += int(t.prompt[rid]) // cfg.block_size
            self.waiting.popleft()
            self.running.append(rid)
            self.prefilling.append(rid)
            t.phase[rid] = PREFILL
            t.pages[rid] = need
            t.shared_tokens[rid] = shared
            t.cached_blocks[rid] = hits
            t.prefilled[rid] = shared
            t.ctx[rid] = shared
            if np.isnan(t.t_admit[rid]):
                t.t_admit[rid] = now
                t.hit_tokens[rid] = shared
            self.policy.on_admit(rid)

    def _release(self, rid: int) -> None:
        t = self.t
        self.pool.private -= int(t.pages[rid])
        t.pages[rid] = 0
        if self.pool.cache is not None and t.cached_blocks[rid]:
            self.pool.cache.release(self._blocks(rid)[: int(t.cached_blocks[rid])])
        t.cached_blocks[rid] = 0
        t.shared_tokens[rid] = 0

    def _preempt(self, rid: int) -> None:
        t = self.t
        self._release(rid)
        self.running.remove(rid)
        if t.phase[rid] == PREFILL:
            self.prefilling.remove(rid)
        self.waiting.appendleft(rid)
        t.phase[rid] = WAITING
        t.prefill_target[rid] = t.prompt[rid] + t.committed[rid]  # recompute what it had
        t.prefilled[rid] = t.ctx[rid] = t.drafted[rid] = 0
        t.sum_entropy[rid] = 0.0  # its drafts are gone: so are their signals
        t.last_entropy[rid] = np.nan
        t.target[rid] = -1
        t.preemptions[rid] += 1
        self.dirty = True

    def _finish(self, rid: int, now: float) -> None:
        t = self.t
        self._release(rid)
        self.running.remove(rid)
        t.phase[rid] = DONE
        t.t_finish[rid] = now
        self.policy.on_finish(rid)
        self.finished += 1
        self.dirty = True
        if self.on_done:
            self.on_done(rid, now)

    # ---------------------------------------------------------------- planning
    def _decoding(self) -> np.ndarray:
        run = np.fromiter(self.running, I64, len(self.running))
        return run[self.t.phase[run] == DECODE]

    def _ask_policy(self, dec: np.ndarray) -> None:
        if not self.cfg.max_draft:  # no drafting (ar): every request verifies each pass anyway
            return
        t, pol = self.t, self.policy
        if pol.plans_ahead and not self.dirty:
            tg = t.target[dec]
            ask = dec[(tg < 0) | ((tg == 0) & (t.committed[dec] >= t.recheck[dec]))]
        else:
            ask = dec
        self.dirty = False
        if len(ask) == 0:
            return
        cfg = self.cfg
        n = len(ask)
        committed = t.committed[ask]
        view = DecodeView(
            ids=ask, context=t.ctx[ask], drafted=t.drafted[ask], remaining=t.output[ask] - committed,
            budget=self._budget[:n], method=self._method[:n],
            last_entropy=t.last_entropy[ask], sum_entropy=t.sum_entropy[ask], num_decode=len(dec),
            prefill_tokens=self._prefill_load(len(dec)), max_draft=cfg.max_draft, committed=committed)
        tg = np.asarray(pol.targets(view), I64)
        t.target[ask] = tg
        if pol.plans_ahead:  # the others are asked every pass anyway
            t.recheck[ask] = committed + pol.hold(view, tg)

    def _prefill_load(self, num_decode: int) -> int:
        """Prefill tokens the next pass carries: chunks fill the token budget left after the decode
        requests (one token each here; a verification's extra query tokens are not known yet)."""
        if not self.prefilling:
            return 0
        t = self.t
        pending = sum(int(t.prefill_target[rid] - t.prefilled[rid]) for rid in self.prefilling)
        return max(0, min(pending, self.cfg.token_budget - num_decode))

    def _effective_target(self, dec: np.ndarray) -> np.ndarray:
        t = self.t
        return np.minimum(np.minimum(t.target[dec], t.output[dec] - t.committed[dec] - 1), self.cfg.max_draft)

    def _grow_pages(self, dec: np.ndarray) -> np.ndarray:
        """Reserve one more token's page for each decode request, preempting if short."""
        t, pool = self.t, self.pool
        while len(dec):
            need = -(-(t.ctx[dec] + t.drafted[dec] + 1 - t.shared_tokens[dec]) // self.cfg.page_size)
            delta = need - t.pages[dec]
            if pool.reserve(sum(delta.tolist())):
                t.pages[dec] = need
                return dec
            victim = self.running[-1]
            self._preempt(victim)
            dec = dec[dec != victim]
        return dec

    def plan(self, now: float) -> PassPlan:
        t, cfg = self.t, self.cfg
        self.admit(now)
        dec = self._decoding()
        dec = self._grow_pages(dec)
        used = 0
        decode = NO_DECODE
        if len(dec):
            self._ask_policy(dec)
            verify = t.drafted[dec] >= self._effective_target(dec)
            if self.policy.synchronous and any(verify.tolist()):
                verify[:] = True
            d, v = dec[~verify], dec[verify]
            q = t.drafted[v] + 1
            decode = dict(draft_ids=d, draft_context=t.ctx[d], draft_budget=self._budget[:len(d)],
                          draft_method=self._method[:len(d)], draft_pos=t.drafted[d],
                          verify_ids=v, verify_query=q, verify_context=t.ctx[v])
            self._last_decode = (dec, verify)
            used = len(d) + sum(q.tolist())
        else:
            self._last_decode = None
        left = cfg.token_budget - used
        ids, toks, ctxs = [], [], []
        for rid in self.prefilling:
            if left <= 0:
                break
            chunk = min(int(t.prefill_target[rid] - t.prefilled[rid]), left)
            ids.append(rid)
            toks.append(chunk)
            ctxs.append(int(t.prefilled[rid]))
            left -= chunk
        if not ids:
            return PassPlan(NO_IDS, NO_IDS, NO_IDS, **decode)
        return PassPlan(np.asarray(ids, I64), np.asarray(toks, I64), np.asarray(ctxs, I64), **decode)

    def decode_segment(self, plan: PassPlan) -> DecodeSegment:
        """A decode-only plan as a one-pass segment with its requests in running order, the same
        column order `segment()` uses, so both paths price passes identically."""
        dec, verify = self._last_decode
        t, cfg = self.t, self.cfg
        d = t.drafted[dec]
        return DecodeSegment(np.where(verify, 2, 1).astype(np.int8)[None, :],
                             np.where(verify, d + 1, 1)[None, :], t.ctx[dec][None, :], d[None, :],
                             self._budget[:len(dec)], self._method[:len(dec)])

    # ---------------------------------------------------------------- outcomes
    def apply(self, plan: PassPlan, out: Outcome, t_end: float) -> None:
        t = self.t
        self.passes += 1
        for rid, tok in zip(plan.prefill_ids.tolist(), plan.prefill_tokens.tolist()):
            t.prefilled[rid] += tok
            t.ctx[rid] = t.prefilled[rid]
            if t.prefilled[rid] == t.prefill_target[rid]:
                self._prefill_done(rid, t_end)
        d = plan.draft_ids
        if len(d):
            t.drafted[d] += 1
            t.drafts[d] += 1
            ent = out.draft_entropy
            t.last_entropy[d] = ent
            if not np.isnan(ent).all():  # all NaN when no entropy is wanted: adds nothing
                t.sum_entropy[d] += np.nan_to_num(ent)
        v = plan.verify_ids
        if len(v):
            self._verified(v, plan.verify_query - 1, np.asarray(out.accepted, I64), t_end)

    def _prefill_done(self, rid: int, now: float) -> None:
        t, cfg, cache = self.t, self.cfg, self.pool.cache
        t.phase[rid] = DECODE
        self.prefilling.remove(rid)
        t.committed[rid] += 1  # the prefill pass samples the next token
        t.target[rid] = -1
        if np.isnan(t.t_first[rid]):
            t.t_first[rid] = now
        else:  # a recomputed request resumes: the gap counts as one inter-token latency
            t.recomputes[rid] += 1
            self.itl.append(np.array([now - t.t_last_emit[rid]]))
        t.t_last_emit[rid] = now
        if cache is not None:  # publish this prompt's full blocks for later requests
            full = self._blocks(rid)[: int(t.prompt[rid]) // cfg.block_size]
            have = int(t.cached_blocks[rid])
            for b in full[have:].tolist():
                if b in cache.refs:
                    if cache.refs[b] == 0:
                        cache.lru.pop(b, None)
                    cache.refs[b] += 1
                else:
                    cache.refs[b] = 1
            t.cached_blocks[rid] = len(full)
            t.shared_tokens[rid] = len(full) * cfg.block_size
            need = self.pool.pages_for(t.ctx[rid] - t.shared_tokens[rid])
            self.pool.private += need - int(t.pages[rid])
            t.pages[rid] = need
        self.dirty = True
        if t.committed[rid] >= t.output[rid]:
            self._finish(rid, now)

    def _verified(self, v: np.ndarray, drafted: np.ndarray, accepted: np.ndarray, now: float) -> None:
        t = self.t
        emitted = accepted + 1
        t.committed[v] += emitted
        t.ctx[v] += emitted
        t.drafted[v] = 0
        t.sum_entropy[v] = 0.0
        t.last_entropy[v] = np.nan
        t.verifies[v] += 1
        t.accepted[v] += accepted
        need = -(-(t.ctx[v] - t.shared_tokens[v]) // self.cfg.page_size)
        self.pool.private += sum((need - t.pages[v]).tolist())
        t.pages[v] = need
        self.itl.append(now - t.t_last_emit[v])
        t.t_last_emit[v] = now
        spec = drafted > 0
        if any(spec.tolist()):
            sv = v[spec]
            t.spec_verifies[sv] += 1
            t.target[sv] = -1
            self.policy.on_verify(sv, drafted[spec], accepted[spec])
        done = t.committed[v] >= t.output[v]
        if any(done.tolist()):
            for rid in v[done].tolist():
                self._finish(rid, now)

    # ---------------------------------------------------------------- fast path
    # Plain-decode segments (every request verifies one token per pass, no drafts) of up to this
    # many requests are planned and applied on Python scalars: at ~1.5 requests per pass, numpy's
    # ~1 us per call on tiny arrays was most of a segment's cost.
    SCALAR_MAX = 8

    def segment(self, max_passes: int) -> SegmentPlan | None:
        """The next passes as one segment, or None when the step path must plan: a prefill is in
        progress, the policy is asked every pass, nothing runs, or fewer than two passes are
        known (the first already needs a random outcome, a finish or a page decision)."""
        if self.prefilling or not self.running or not self.policy.plans_ahead:
            return None
        t, cfg = self.t, self.cfg
        self._ask_policy(np.array(self.running, dtype=I64))
        if len(self.running) <= self.SCALAR_MAX and (n := self._plain_passes(max_passes)) >= 0:
            if n < 2:
                return None
            rids = list(self.running)
            ctx, sh, pg = t.ctx, t.shared_tokens, t.pages
            context = [ctx.item(rid) for rid in rids]
            base = [c - sh.item(rid) + 1 for c, rid in zip(context, rids)]
            n = self._fit_pages(base, sum(pg.item(rid) for rid in rids), n)
            return SegmentPlan(rids, n, None, context) if n >= 2 else None
        run = np.array(self.running, dtype=I64)
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

    def apply_segment(self, sp: SegmentPlan, n: int, ends: np.ndarray, accepted: np.ndarray) -> None:
        """Apply the first `n` passes of a segment. `ends[i]` is when pass i ended; `accepted` the
        outcome of the speculative verifications in pass n-1 (aligned with `last_verify_ids`)."""
        self.passes += n
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
        pool.private += sum((need - t.pages[run]).tolist())
        if pool.used > pool.peak:
            pool.peak = pool.used
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
            self._verified(v, t.drafted[v].copy(), acc, ends[m])

    def _apply_plain(self, rids: list[int], n: int, ends: np.ndarray) -> None:
        """apply_segment of a small plain-decode segment, one request at a time on scalars."""
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
        pool.private += grown
        if pool.used > pool.peak:
            pool.peak = pool.used
        for rid in done:
            self._finish(rid, end)

    def last_verify_ids(self, sp: SegmentPlan, n: int) -> np.ndarray:
        if sp.seg is None:
            return NO_IDS
        s = ~sp.ar_like
        return sp.rids[s][sp.verify_at[s] == n - 1]
