"""The batcher: one per replica. Builds each pass (a PassPlan) and applies its outcome.

A pass is built in this order: admit waiting requests FCFS while KV pages and the
batch size allow; ask the policy, for every decode request, verify now or draft one more; fill the
rest of the token budget with prefill chunks. The batcher, not the policy, forces a verify when a
draft would pass the request's remaining output tokens or reaches `max_draft`, or (for synchronous
policies) when any other request verifies. A synchronous batch's request that has drafted all its
remaining output can use does not force the batch: it sits out the cycle's remaining draft passes
and verifies with the batch (`_sync_verify`).

Memory: a request holds pages for its tokens in the KV cache plus provisional drafted tokens, less
prompt blocks shared through the prefix cache. When a decode step cannot get a page, the most
recently admitted request is preempted and later recomputed (vLLM's recompute policy). Requests
that can never fit, or exceed the model's context window, are rejected at arrival with a reason.

Reductions of per-batch arrays (counts, sums of ints, any) go through `.tolist()` and Python's
builtins: batches are small and numpy's reductions cost ~2 us per call, which adds up to much of
a pass's bookkeeping.

What an executor calls: `enqueue`, `admit`, `plan`, `apply` (one pass at a time). A simulator
that advances many decode passes at once (`spsim.simulator.segment`) uses the small extension
point at the end of this class (`ask_policy`, `decode_order`, `record_verifications`, `finish`)
and the public state (`t`, `running`, `pool`, `itl`, `passes`), never private fields.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from spsim.config import ServingConfig
from spsim.plan import DRAFT_METHOD, DraftMethod, Outcome, PassPlan

from .base import DecodeView, Policy
from .kv import KVPool, private_pages
from .request import Phase, RequestTable

I64 = np.int64
NO_IDS = np.zeros(0, I64)
NO_IDS.flags.writeable = False
NO_BOOL = np.zeros(0, bool)
NO_BOOL.flags.writeable = False
NO_DECODE = dict.fromkeys(("draft_ids", "draft_context", "draft_pos", "verify_ids", "verify_query",
                           "verify_context"), NO_IDS)  # PassPlan groups
# plain ints: IntEnum attribute access is slow in per-pass code
WAITING, PREFILL, DECODE, DONE, REJECTED = (int(p) for p in (Phase.WAITING, Phase.PREFILL, Phase.DECODE,
                                                             Phase.DONE, Phase.REJECTED))


@dataclass
class BatcherConfig:
    """What one replica's batcher needs of a run (`spsim.build` wires it from a ServingConfig,
    whose defaults these are)."""

    capacity_pages: int
    max_context: int
    max_batch: int = ServingConfig.max_batch
    token_budget: int = ServingConfig.token_budget
    page_size: int = ServingConfig.page_size
    draft_method: int = int(DRAFT_METHOD)  # a policy's own where --draft-kv is auto (spsim.build.draft_method)
    draft_budget: int = ServingConfig.draft_budget
    max_draft: int = ServingConfig.max_draft
    prefix_cache: bool = ServingConfig.prefix_cache
    block_size: int | None = None


class Batcher:
    def __init__(self, cfg: BatcherConfig, table: RequestTable, policy: Policy,
                 prefix_indptr: np.ndarray | None = None, prefix_ids: np.ndarray | None = None,
                 pool_cls: type[KVPool] = KVPool):
        self.cfg = cfg
        self.t = table
        self.policy = policy
        # KVPool counts pages (simulator); PagedKVPool gives them identities (runtime)
        self.pool = pool_cls(cfg.capacity_pages, cfg.page_size, cfg.block_size,
                             cfg.prefix_cache and prefix_indptr is not None)
        self.prefix_indptr, self.prefix_ids = prefix_indptr, prefix_ids
        self.waiting: deque[int] = deque()
        self.running: list[int] = []  # admission order
        self.prefilling: list[int] = []  # running requests still in prefill, admission order
        self.itl: list[np.ndarray] = []  # emission gaps, one array per pass or segment
        self.dirty = True  # batch composition changed: plans-ahead targets must be re-asked
        self.decode_order: tuple | None = None  # last plan's decode requests in running order, which of
        # them verify, and which sit the pass out (None: none; synchronous policies only): how a
        # one-pass segment orders its columns
        # what plans announce to an executor with real KV (one whose pool has page identities);
        # the simulator's executor needs none of it, so it is not recorded there
        self.announce = self.pool.has_ids
        self.preempted: list[int] = []  # since the last plan (announced in it)
        self.released: list[int] = []  # finished since the last plan (announced in it)
        self.passes = 0
        self.finished = 0
        self.on_done = None  # callable(rid, now) when a request finishes or is rejected
        self.draft_log = None  # policies.draftlog.DraftLog: sampled requests' draft lengths (None: off)
        # time stamps of a pass applied before its end is known (`apply(..., t_end=None)`, the
        # runtime's overlapped loop): replayed in order by `stamp` once the pass has ended
        self._deferred: list = []
        self._keep_scores = cfg.draft_method == DraftMethod.VERIFY_ATTN  # PassPlan.keep_scores

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
                hits = pool.match_prefix(blocks)
                if hits * cfg.block_size >= target:  # keep one token to compute logits from
                    hits -= 1
                blocks = blocks[:hits]
                pool.attach_prefix(rid, blocks)  # first: eviction below must not take them
            shared = hits * (cfg.block_size or 0)
            need = pool.pages_for(target - shared)
            if not pool.grow((rid,), (0,), (need,)):
                if cache is not None:
                    pool.detach_prefix(rid, blocks)
                break
            if cache is not None:
                pool.count_lookup(hits, int(t.prompt[rid]) // cfg.block_size)
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
        cached = int(t.cached_blocks[rid])
        self.pool.release(rid, int(t.pages[rid]), self._blocks(rid)[:cached] if cached else ())
        t.pages[rid] = 0
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
        if self.announce:
            self.preempted.append(rid)
        self.dirty = True

    def finish(self, rid: int, now: float | None) -> None:
        t = self.t
        self._release(rid)
        self.running.remove(rid)
        t.phase[rid] = DONE
        self.policy.on_finish(rid)
        self.finished += 1
        if self.announce:
            self.released.append(rid)
        self.dirty = True
        self._at(now, self._finished_at, rid)

    def abort(self, rid: int, now: float | None) -> bool:
        """End a waiting or running request now (a live client left, or its output hit a stop):
        its pages return to the pool as at a finish. False if it had already ended."""
        t = self.t
        if t.phase[rid] == WAITING:
            self.waiting.remove(rid)
            t.phase[rid] = DONE
            if not np.isnan(t.t_admit[rid]):  # preempted: admitted once, its pages already returned
                self.policy.on_finish(rid)
            self.finished += 1
            self._at(now, self._finished_at, rid)
            return True
        if t.phase[rid] not in (PREFILL, DECODE):
            return False
        if t.phase[rid] == PREFILL:
            self.prefilling.remove(rid)
        self.finish(rid, now)
        return True

    # ---------------------------------------------------------------- time stamps
    def _at(self, now: float | None, fn, *args) -> None:
        """`fn(now, *args)` now, or, with `now` None (the pass's end is not known yet), when
        `stamp` gives it. Only time fields and the finish callback wait: planning reads none."""
        if now is None:
            self._deferred.append((fn, args))
        else:
            fn(now, *args)

    def stamp(self, t_end: float) -> None:
        """The pass applied with `t_end=None` ended at `t_end`: its time stamps, in order."""
        todo, self._deferred = self._deferred, []
        for fn, args in todo:
            fn(t_end, *args)

    def _first_token_at(self, now: float, rid: int) -> None:
        t = self.t
        if np.isnan(t.t_first[rid]):
            t.t_first[rid] = now
        else:  # a recomputed request resumes: the gap counts as one inter-token latency
            t.recomputes[rid] += 1
            self.itl.append(np.array([now - t.t_last_emit[rid]]))
        t.t_last_emit[rid] = now

    def _finished_at(self, now: float, rid: int) -> None:
        self.t.t_finish[rid] = now
        if self.on_done:
            self.on_done(rid, now)

    def _emitted_at(self, now: float, v: np.ndarray) -> None:
        t = self.t
        self.itl.append(now - t.t_last_emit[v])
        t.t_last_emit[v] = now

    def _logged_at(self, now: float, v, drafted, accepted) -> None:
        self.draft_log.add(v, drafted, accepted, now)

    # ---------------------------------------------------------------- planning
    def _decoding(self) -> np.ndarray:
        run = np.fromiter(self.running, I64, len(self.running))
        return run[self.t.phase[run] == DECODE]

    def ask_policy(self, dec: np.ndarray) -> None:
        """Refresh the policy's targets of these decode requests where they are due."""
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
        committed = t.committed[ask]
        view = DecodeView(
            ids=ask, context=t.ctx[ask], drafted=t.drafted[ask], remaining=t.output[ask] - committed,
            budget=cfg.draft_budget, method=cfg.draft_method,
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

    def _sync_verify(self, dec: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(verify, idle) masks of a synchronous policy's pass. The batch verifies together once
        any request reaches the policy's target (or `max_draft`). A request whose next draft would
        pass its remaining output does not force that: it has drafted all it can use, sits the
        cycle's remaining draft passes out (in no pass, holding its drafts) and verifies with the
        batch, as MagicDec's batch runs every cycle to gamma whatever a request's end (docs/
        policies.md). If no request could draft (all capped), the batch verifies now. idle is None
        when no request sits out."""
        t = self.t
        drafted = t.drafted[dec]
        want = drafted >= np.minimum(t.target[dec], self.cfg.max_draft)
        if any(want.tolist()):
            return np.ones(len(dec), bool), None
        capped = drafted >= t.output[dec] - t.committed[dec] - 1
        if all(capped.tolist()):
            return np.ones(len(dec), bool), None
        return want, (capped if any(capped.tolist()) else None)

    def _grow_pages(self, dec: np.ndarray) -> np.ndarray:
        """Reserve one more token's page for each decode request, preempting if short."""
        t, pool = self.t, self.pool
        while len(dec):
            need = private_pages(t.ctx[dec] + t.drafted[dec] + 1, t.shared_tokens[dec], self.cfg.page_size)
            if pool.grow(dec, t.pages[dec], need):
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
            self.ask_policy(dec)
            idle = None
            if self.policy.synchronous:
                verify, idle = self._sync_verify(dec)
                d = dec[~(verify | idle)] if idle is not None else dec[~verify]
            else:
                verify = t.drafted[dec] >= self._effective_target(dec)
                d = dec[~verify]
            v = dec[verify]
            q = t.drafted[v] + 1
            decode = dict(draft_ids=d, draft_context=t.ctx[d], draft_pos=t.drafted[d],
                          verify_ids=v, verify_query=q, verify_context=t.ctx[v])
            self.decode_order = (dec, verify, idle)
            used = len(d) + sum(q.tolist())
        else:
            self.decode_order = None
        left = cfg.token_budget - used
        ids, toks, ctxs, last = [], [], [], []
        for rid in self.prefilling:
            if left <= 0:
                break
            todo = int(t.prefill_target[rid] - t.prefilled[rid])
            chunk = min(todo, left)
            ids.append(rid)
            toks.append(chunk)
            ctxs.append(int(t.prefilled[rid]))
            last.append(chunk == todo)
            left -= chunk
        keep = self._keep_scores
        b, m = cfg.draft_budget, cfg.draft_method
        plan = (PassPlan(NO_IDS, NO_IDS, NO_IDS, NO_BOOL, **decode, draft_budget=b, draft_method=m, keep_scores=keep)
                if not ids else
                PassPlan(np.asarray(ids, I64), np.asarray(toks, I64), np.asarray(ctxs, I64), np.asarray(last), **decode,
                         draft_budget=b, draft_method=m, keep_scores=keep))
        if self.announce:
            self._announce(plan)
        return plan

    def _announce(self, plan: PassPlan) -> None:
        """What the executor must do outside this pass: forget requests preempted or finished
        since the last plan; pages freed meanwhile (a pool with identities logs them)."""
        if self.preempted:
            plan.preempted = np.asarray(self.preempted, I64)
            self.preempted = []
        if self.released:
            plan.released = np.asarray(self.released, I64)
            self.released = []
        plan.freed_pages = self.pool.take_freed()

    # ---------------------------------------------------------------- outcomes
    def apply(self, plan: PassPlan, out: Outcome, t_end: float | None) -> None:
        """The pass's outcome. `t_end` None: the pass is still running (the runtime's overlapped
        loop plans the next pass first); its time stamps wait for `stamp(t_end)`."""
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
            self.record_verifications(v, plan.verify_query - 1, np.asarray(out.accepted, I64), t_end)

    def _prefill_done(self, rid: int, now: float | None) -> None:
        t, cfg, cache = self.t, self.cfg, self.pool.cache
        t.phase[rid] = DECODE
        self.prefilling.remove(rid)
        t.committed[rid] += 1  # the prefill pass samples the next token
        t.target[rid] = -1
        self._at(now, self._first_token_at, rid)
        if cache is not None:  # publish this prompt's full blocks for later requests
            full = self._blocks(rid)[: int(t.prompt[rid]) // cfg.block_size]
            moved = self.pool.publish_prefix(rid, full[int(t.cached_blocks[rid]):].tolist())
            t.cached_blocks[rid] = len(full)
            t.shared_tokens[rid] = len(full) * cfg.block_size
            t.pages[rid] -= moved
        self.dirty = True
        if t.committed[rid] >= t.output[rid]:
            self.finish(rid, now)

    # ---------------------------------------------------------------- extension point
    # For executors that advance many passes at once (the simulator's fast path): it plans from
    # the request table, `running`, `pool.free()` and `decode_order`, and applies through these.
    def record_verifications(self, v: np.ndarray, drafted: np.ndarray, accepted: np.ndarray, now: float | None) -> None:
        """Verifications of requests `v` (which held `drafted` drafts) ending at `now`: commit the
        accepted prefix and the target token, shrink pages to the committed tokens, tell the policy,
        finish requests that reached their output length."""
        t = self.t
        emitted = accepted + 1
        t.committed[v] += emitted
        t.ctx[v] += emitted
        t.drafted[v] = 0
        t.sum_entropy[v] = 0.0
        t.last_entropy[v] = np.nan
        t.verifies[v] += 1
        t.accepted[v] += accepted
        need = private_pages(t.ctx[v], t.shared_tokens[v], self.cfg.page_size)
        self.pool.resize(v, t.pages[v], need)
        t.pages[v] = need
        self._at(now, self._emitted_at, v)
        spec = drafted > 0
        if any(spec.tolist()):
            sv = v[spec]
            t.spec_verifies[sv] += 1
            t.target[sv] = -1
            self.policy.on_verify(sv, drafted[spec], accepted[spec])
            if self.draft_log is not None:
                self._at(now, self._logged_at, sv, drafted[spec], accepted[spec])
        done = t.committed[v] >= t.output[v]
        if any(done.tolist()):
            for rid in v[done].tolist():
                self.finish(rid, now)
