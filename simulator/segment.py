"""The simulator's fast path: many decode passes planned, priced and applied as one segment.

When every running request is decoding under a policy that plans ahead, the next passes are known
until the first verification whose outcome is random, a completion or a page shortage (an arrival
routed to the replica cuts the segment short there). `FastPath.plan` returns them as one
`SegmentPlan`: the policy picks how (`Policy.fast_plan`, from the planners here: `held`, `cycles`,
`zero`, `stretch`, `every`; its own beside it where it needs one, as `policies/sync_ahead.py`).
The replica prices them in one call (`CostModel.times` of a `PlanBatch`), and `FastPath.apply` leaves
exactly the state that as many single passes through `Batcher.plan`/`apply` would. It works on the
batcher's request table and its extension point (`ask_policy`, `decode_order`,
`record_verifications`, `finish`, and the public `running`, `pool`, `itl`, `passes`); the batcher
knows nothing of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spsim.cost.batch import PlanBatch
from spsim.plan import PassPlan
from spsim.policies.base import DecodeView
from spsim.policies.batcher import Batcher
from spsim.policies.kv import private_pages
from spsim.policies.stretch import PageSums

from .outcomes import OutcomeTable

I64 = np.int64
NO_IDS = np.zeros(0, I64)
_FMAX = float(np.finfo(np.float64).max)


@dataclass(slots=True)
class SegmentPlan:
    rids: np.ndarray | list[int]  # running order (a list when every request decodes plainly)
    n: int  # passes
    seg: PlanBatch | None  # None: every request decodes plainly, priced as `PlanBatch.plain`
    context: list[int] | None = None  # plain decode: each request's context before the first pass
    ar_like: np.ndarray | None = None  # bool per request: verifies every pass with no drafts
    verify_at: np.ndarray | None = None  # pass index of each speculative request's verification (or n)
    cycles: "Cycles | None" = None  # verifications with known outcomes inside the segment
    zero: DecodeView | None = None  # plain passes of a policy asked every pass (`Policy.zero_run`)
    stretch: tuple | None = None  # (planner, its plan) of a policy planning these passes itself (`FastPath.stretch`)
    looks: list | None = None  # (pass, committed, k) of each later cycle's start (`policies/sync_ahead.py`)


@dataclass(slots=True)
class Cycles:
    """A segment through many draft-verify cycles: every verification's pass, column (running
    order), drafts held and accepted drafts, in pass-major order, planned with the acceptance
    model's keyed outcomes (drawn ahead: they do not depend on when they are asked)."""

    vp: np.ndarray  # pass of each verification
    vj: np.ndarray  # its column
    dv: np.ndarray  # drafts it checks
    acc: np.ndarray  # drafts it accepts
    K: int  # target after a verification with drafts (`FastPath.cycles`)
    need: np.ndarray  # (n, r) pages each request holds after pass i's reservation
    asks: tuple | None = None  # (pass, column, target, recheck, committed) of each re-ask, in plan order
    idle: list | None = None  # synchronous: (column, first pass, end pass, drafts held) of each span a
    # request sits out (drafted all its output can use) before the batch's verification
    told: object | None = None  # a policy told of the asks kept (`asked`: `cycles`' `after`)


class FastPath:
    # Plain-decode segments (every request verifies one token per pass, no drafts) of up to this
    # many requests are planned and applied on Python scalars: at ~1.5 requests per pass, numpy's
    # ~1 us per call on tiny arrays was most of a segment's cost.
    SCALAR_MAX = 8
    # Draft-verify cycles planned per segment (a cycle of every request per round): beyond, the
    # segment ends and the next one plans on (plans past the next arrival are thrown away; on
    # the Azure conv trace 16 beat 8: half the segments for ~10 % more cycles drawn in vain)
    MAX_ROUNDS = 16
    # Plain passes a policy asked every pass is asked about at once (`Policy.zero_run`): on the
    # Azure conv trace's first 4,000 requests, entropy's CPU time 3.06 s at 256, 2.72 s at 512
    # (7,103 -> 6,561 segments), 2.66 s at 1,024; sync (auto k) the same at 256 and 1,024
    ZERO_MAX = 512
    # Passes a policy that plans its own stretches (`stretch`) is asked to plan at once
    STRETCH_MAX = 256
    # Positions an `ask_rows` policy is asked about at once when re-asked (plain stretches)
    ASK_AHEAD = 16
    # Positions a cycle-target policy's outcomes are drawn ahead at once per request (OutcomeTable)
    TABLE_ROWS = 256
    # ... and the cycles of every request planned per segment then (no call for most: cycles
    # drawn in vain cost little). Azure conv first 4,000 requests, CPU s at 16 / 32 / 64 rounds:
    # sync:k=4 4.90 / 4.42 / 4.65, fixed-k:k=8 4.28 / 4.07 / 4.20
    TABLE_ROUNDS = 32

    def __init__(self, batcher: Batcher):
        self.b = batcher
        # the batcher's state objects (never rebound by it), held directly: attribute hops add up
        # at tens of thousands of segments
        self.t, self.cfg, self.pool, self.running = batcher.t, batcher.cfg, batcher.pool, batcher.running
        self.itl = batcher.itl  # emission gaps, one array per pass or segment
        self.acc = None  # the acceptance model (set by the replica): keyed outcomes for cycles
        # a policy choosing each cycle's k (sync) tries `zero_run` only after its last cycle was 0 drafts:
        # while it speculates the check fails, and cost as much as the cycle's own decision
        self.zero_ok = True
        # outcomes drawn ahead (OutcomeTable): "outcomes", a cycle target's; "runs", any draft count's
        # (`prefix_table`)
        self.tables: dict[str, OutcomeTable] = {}

    def one_pass(self, plan: PassPlan) -> PlanBatch:
        """A decode-only plan as a one-pass segment with its requests in running order, the same
        column order `plan()` uses, so both paths price passes identically."""
        dec, verify, idle = self.b.decode_order
        t = self.t
        d = t.drafted[dec]
        kind = np.where(verify, 2, 1).astype(np.int8)
        if idle is not None:  # a synchronous batch's request sitting the pass out: in no pass
            kind[idle] = PlanBatch.IDLE
        return PlanBatch.decode(kind[None, :],
                             np.where(verify, d + 1, 1)[None, :], t.ctx[dec][None, :], d[None, :],
                             plan.draft_budget, plan.draft_method)

    def plan(self, max_passes: int) -> SegmentPlan | None:
        """The next passes as one segment, or None when the step path must plan: a prefill is in
        progress, nothing runs, the policy cannot say ahead what it would answer (`Policy.fast_plan`
        picks among the planners below), or fewer than two passes are known (the first already
        needs a finish or a page decision)."""
        if self.b.prefilling or not self.running:
            return None
        return self.b.policy.fast_plan(self, max_passes)

    # ---- what a policy's `fast_plan` reads and picks from
    @property
    def max_draft(self) -> int:
        return self.cfg.max_draft

    @property
    def open(self) -> bool:
        """No request waits for pages the batch could free: plans may run through verifications
        (whose freed pages could otherwise admit a waiting request)."""
        return not self.b.waiting or len(self.running) >= self.cfg.max_batch

    def any_target(self) -> bool:
        """Some running request was given drafts (not all decode plainly)."""
        t = self.t
        return any((t.target[self.running] > 0).tolist())

    def ask(self) -> bool:
        """Ask the policy for the running requests' next pass as the step path would (a plans-ahead
        policy: only those whose answer expired); False where their pages do not fit."""
        return self._ask_as_step(np.array(self.running, dtype=I64))

    def held(self, max_passes: int) -> SegmentPlan | None:
        """The passes over which every running request's target (asked already) holds: each
        decodes plainly, or drafts up to its target and verifies; up to the first verification
        with drafts, finish, expiry of a zero target or page shortage."""
        t, cfg, running = self.t, self.cfg, self.running
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
        kind = np.where(is_verify, PlanBatch.VERIFY, PlanBatch.DRAFT).astype(np.int8)
        dpos = np.where(ar_like, 0, d + i)
        query = np.where(is_verify, dpos + 1, 1)
        ctx = ctx0 + np.where(ar_like, i, 0)
        verify_at = np.where(ar_like, n, wait)
        seg = PlanBatch.decode(kind, query, ctx, dpos, self.cfg.draft_budget, self.cfg.draft_method)
        return SegmentPlan(run, n, seg, None, ar_like, verify_at)

    def zero(self, max_passes: int) -> SegmentPlan | None:
        """Plain passes of a policy asked every pass, for as long as it says it would answer 0."""
        t, b = self.t, self.b
        dr = t.drafted
        for rid in self.running:  # scalar: while a policy asked every pass speculates, most calls end here
            if dr.item(rid):
                return None
        run = np.array(self.running, dtype=I64)
        committed = t.committed[run]
        rem = t.output[run] - committed
        n = min(max_passes, self.ZERO_MAX, min(rem.tolist()))
        if n < 2:
            return None
        r = len(run)
        ctx0 = t.ctx[run]
        # the view the batcher's ask_policy would build at this pass (no prefill in progress)
        view = self.view(run, ctx0, committed, rem, t.drafted[run], t.last_entropy[run], t.sum_entropy[run], r)
        h = b.policy.zero_run(view, n)
        if h is None or h < 2:
            return None
        n = self._fit_pages((ctx0 - t.shared_tokens[run] + 1).tolist(), sum(t.pages[run].tolist()), min(n, h))
        if n < 2:
            return None
        return SegmentPlan(run.tolist(), n, None, ctx0.tolist(), zero=view)

    def stretch(self, planner, max_passes: int) -> SegmentPlan | None:
        """Passes a policy asked every pass plans itself (`planner`: a `policies.stretch.StretchBase`,
        the entropy rule's or aspire's), given the view the batcher would build on the first (no
        prefill in progress) and the acceptance model's keyed draws; up to its first finish, page
        shortage, or the pass where its own plan stops being certain. `planner.commit` leaves the
        policy as the passes applied would."""
        t, cfg = self.t, self.cfg
        run = np.array(self.running, dtype=I64)
        r = len(run)
        committed = t.committed[run]
        ctx0, d0 = t.ctx[run], t.drafted[run]
        view = self.view(run, ctx0, committed, t.output[run] - committed, d0, t.last_entropy[run],
                          t.sum_entropy[run], r)
        acc, budget, method = self.acc, cfg.draft_budget, cfg.draft_method

        def entropy(ids, pos, dpos, ctx):
            return acc.draft_entropy(ids, pos, dpos, ctx, budget, method)

        def verify(ids, pos, drafted, ctx):
            return acc.verify(ids, pos, drafted, ctx, budget, method)

        verify.prefix_draws = getattr(acc, "prefix_draws", False)  # (outcomes.OutcomeTable.run)
        if hasattr(acc, "draft_entropy_rows"):  # one request's grid of (start, draft) entropies
            def rows(rid, starts, ctx, k):
                return acc.draft_entropy_rows(rid, starts, ctx, k, budget, method)
            entropy.rows = rows
        # with requests waiting for pages, the stretch ends at the first verification with drafts
        # (whose freed pages the next pass's admission may take)
        gate = bool(self.b.waiting) and r < cfg.max_batch
        # the pages these requests may hold: the stretch is cut below before the first pass that
        # needs more, and the planner stops planning near there
        other = self.pool.used - sum(t.pages[run].tolist())
        pages = (self.pool.capacity - other, cfg.page_size, t.shared_tokens[run].tolist())
        st = planner.plan(view, min(max_passes, self.STRETCH_MAX), entropy, verify, gate, pages)
        if st is None:
            return None
        vp, vj, dv, ac = (np.array(x, I64) for x in (st.vp, st.vj, st.dv, st.acc))
        order = np.argsort(vp * r + vj, kind="stable")  # pass-major, running order within a pass
        vp, vj, dv, ac = vp[order], vj[order], dv[order], ac[order]
        cut = self._cut_cycles(st.n, 1, r, ctx0, d0, vp, vj, dv, ac, run, [])
        if cut is None:
            return None
        n, vp, vj, dv, ac, seg, need, _ = cut
        self.zero_ok = not (dv > 0).any()  # no drafts in it: zero_run may cover what follows
        return SegmentPlan(run, n, seg, None, cycles=Cycles(vp, vj, dv, ac, -1, need), stretch=(planner, st))

    def _table(self, name: str, K: int, runl: list[int]) -> OutcomeTable:
        """The outcome table `name` for K drafts (made anew for another K), less the entries of
        finished requests once there are many."""
        tab = self.tables.get(name)
        if tab is None or tab.K != K:
            tab = self.tables[name] = OutcomeTable(K, self.cfg.max_draft, self.TABLE_ROWS)
        elif len(tab.tab) > 4 * len(runl) + 64:
            tab.forget(set(runl))
        return tab

    def _apply_stretch(self, sp: SegmentPlan, n: int) -> None:
        """The policy's state after the stretch's first n passes, and what it set in the table:
        targets, the newest draft's entropy, the entropy sum of the drafts held."""
        t = self.t
        run = sp.rids
        planner, st = sp.stretch
        tg, last, ents, restart = planner.commit(st, n)
        t.target[run] = tg
        t.last_entropy[run] = last
        se = t.sum_entropy
        for rid, en, rs in zip(run.tolist(), ents, restart):
            s = 0.0 if rs else se.item(rid)
            for e in en:  # added one draft at a time, as the step path does (np.nan_to_num's values)
                s += 0.0 if e != e else min(e, _FMAX)
            se[rid] = s

    def _ask_as_step(self, run: np.ndarray) -> bool:
        """Ask the policy for these requests' next pass where the step path would: it reserves the
        pass's pages first (`Batcher._grow_pages`, preempting when short) and asks only the
        requests left, so where the pages do not fit, no look (False: the step path plans)."""
        t = self.t
        need = private_pages(t.ctx[run] + t.drafted[run] + 1, t.shared_tokens[run], self.cfg.page_size)
        if sum((need - t.pages[run]).tolist()) > self.pool.free():
            return False
        self.b.ask_policy(run)
        return True

    def prefix_table(self):
        """The table of outcomes drawn ahead by position for any draft count (`accepted`), where
        the acceptance model's draws are prefix draws; else None."""
        if not getattr(self.acc, "prefix_draws", False):
            return None
        return self._table("runs", self.cfg.max_draft, self.running)

    def accepted(self, runs, J: list[int], xs: list[int], rids: list[int], com: list[int], ctx: list[int],
                 out: list[int]) -> list[int]:
        """Accepted drafts of verifications of xs > 0 drafts by the columns J (of per-column
        request ids, committed positions, contexts and outputs): keyed draws, so the same whenever
        drawn; from `runs` (`prefix_table`: one draw per position serves every count) where given."""
        if runs is None:
            return self.acc.verify(np.array([rids[j] for j in J], I64), np.array([com[j] for j in J], I64),
                                   np.array(xs, I64), np.array([ctx[j] for j in J], I64),
                                   self.cfg.draft_budget, self.cfg.draft_method).tolist()
        got = [runs.run(rids[j], com[j], ctx[j]) for j in J]
        for j, g in zip(J, got):
            if g is None:
                runs.want(rids[j], com[j], ctx[j], out[j])
        if runs.pending:
            ids, cs, xs_, cxs = runs.rows_wanted()
            runs.store(self.acc.verify(ids, cs, xs_, cxs, self.cfg.draft_budget, self.cfg.draft_method).tolist())
            got = [runs.run(rids[j], com[j], ctx[j]) for j in J]
        return [x if x < g else g for x, g in zip(xs, got)]

    def synchronous(self, n: int, vps: list, vjs: list, dvs: list, accs: list, K: int, idle: list,
                    looks: list) -> SegmentPlan | None:
        """A plan of the running batch's synchronous cycles (verifications listed pass-major, spans
        sat out as `Cycles.idle`, `looks` replayed by `apply` as `_tell` says), cut at the first
        page shortage (`sync_ahead`)."""
        if not vps:
            return None
        t = self.t
        run = np.array(self.running, dtype=I64)
        vp, vj, dv, acc = (np.array(x, I64) for x in (vps, vjs, dvs, accs))
        cut = self._cut_cycles(n, 1, len(run), t.ctx[run], t.drafted[run], vp, vj, dv, acc, run, idle)
        if cut is None:
            return None
        n, vp, vj, dv, acc, seg, need, idle = cut
        looks = [x for x in looks if x[0] < n] or None
        return SegmentPlan(run, n, seg, None, cycles=Cycles(vp, vj, dv, acc, K, need, None, idle), looks=looks)

    def every(self, asker, max_passes: int) -> SegmentPlan | None:
        """Cycles of a policy asked every pass whose answer for a request holding drafts stays
        what it was at the cycle's start while its own state stands (`asker`, as `cycles`' `after`:
        `aspire` with replan=pass). Asked here for the first pass (which always runs), then re-asked
        after each request's own verifications; the segment ends where an answer would depend
        on others (a request with no outcome yet, while any outcome moves the pool; the pass
        after a plain one, whose look relaxes towards the pool's rate)."""
        t = self.t
        run = np.array(self.running, dtype=I64)
        if not self._ask_as_step(run):
            return None
        if not any(t.drafted[run].tolist()) and not any(t.target[run].tolist()):
            self.zero_ok = True  # all plain: zero_run may hold for the next passes
        return self.cycles(0, False, max_passes, rounds=-1, after=asker)

    def ask_rows(self, rids: list[int], com: list[int], ctx: list[int], out: list[int], r: int):
        """The targets and recheck positions of a policy whose `targets` answers each row from the
        view alone and changes no state (`oracle`: asked for rows of later passes early and in any
        grouping), for these requests holding no drafts, on the view the batcher would build
        (no prefill in progress, r decoding)."""
        view = self._rows_view(rids, com, ctx, out, r)
        pol = self.b.policy
        tg = np.asarray(pol.targets(view), I64)
        return tg.tolist(), (view.committed + pol.hold(view, tg)).tolist()

    def _rows_view(self, rids: list[int], com: list[int], ctx: list[int], out: list[int], r: int) -> DecodeView:
        n = len(rids)
        committed = np.array(com, I64)
        return self.view(np.array(rids, I64), np.array(ctx, I64), committed, np.array(out, I64) - committed,
                          np.zeros(n, I64), np.full(n, np.nan), np.zeros(n), r)

    def view(self, ids, context, committed, remaining, drafted, last_entropy, sum_entropy, num_decode) -> DecodeView:
        """The view the batcher's `ask_policy` builds for these rows, no prefill in progress."""
        cfg = self.cfg
        return DecodeView(ids=ids, context=context, drafted=drafted, remaining=remaining, budget=cfg.draft_budget,
                          method=cfg.draft_method, last_entropy=last_entropy, sum_entropy=sum_entropy, num_decode=num_decode,
                          prefill_tokens=0, max_draft=self.cfg.max_draft, committed=committed)

    def _ask_after(self, after, rids, com, ctx, out, r, drafted, accepted, state):
        """`after.targets_after` for these requests, re-asked on the pass after their verification
        with `drafted` drafts and `accepted` accepted (view as `ask_rows`)."""
        view = self._rows_view(rids, com, ctx, out, r)
        tg, hold, new = after.targets_after(view, np.array(drafted, I64), np.array(accepted, I64), state)
        return np.asarray(tg, I64).tolist(), (view.committed + hold).tolist(), new

    def cycles(self, K: int, sync: bool, max_passes: int, rounds: int = 0, ask=None,
               after=None) -> SegmentPlan | None:
        """Passes through many draft-verify cycles of a policy with one target K after every
        verification with drafts, whatever the batch, contexts or outcomes (`fixed-k`, `sync:k=N`:
        asking has no other effect, a zero target holds its `plain_hold`; outcomes still reach
        `on_verify` pass by pass, in order), up to the first finish or page shortage: each
        request's cycles follow from its keyed outcomes alone (synchronous policies: the batch's
        cycles, all verifying together), drawn a cycle of every request at a time. `rounds`: at
        most this many cycles of every request (one: no outcomes drawn ahead; a one-pass segment
        then does). `ask`: `ask_rows`, a policy re-asked where the step path would ask it (the
        pass after a verification with drafts; a zero target's expiry), one call per round:
        its answers are row by row and change no state, so asking ahead is asking then.
        `after`: a policy re-asked after its verifications with drafts from each request's own
        outcomes (its `ask_state`, `targets_after`, and `asked` told of the asks kept: `aspire`);
        where the answer would depend on other requests (a first outcome, a zero target's
        expiry) the segment ends at that pass. `rounds=-1`: for `every` (a one-pass segment may do)."""
        t, cfg = self.t, self.cfg
        run = np.array(self.running, dtype=I64)
        r = len(run)
        ctx0, d0 = t.ctx[run], t.drafted[run]
        tg = t.target[run].tolist() if self.b.policy.plans_ahead or rounds == -1 else [K] * r
        if min(tg) < 0:
            return None
        out, com, ctx, d = t.output[run].tolist(), t.committed[run].tolist(), ctx0.tolist(), d0.tolist()
        rc = t.recheck[run].tolist() if ask or after else None
        st = after.ask_state(run.tolist()) if after else None
        dx = {}  # column -> (drafts, accepted) of its verification before a re-ask
        asked = []  # the asks: (pass, column, target, recheck, committed)
        pend: dict = {}  # column -> (committed, answers for positions committed, committed + 1, ...)
        md = cfg.max_draft
        start = [0] * r  # pass where each request's current cycle begins
        live = list(range(r))  # columns not finished within the plan and not past n
        budget, method, verify = cfg.draft_budget, cfg.draft_method, self.acc.verify
        n = max_passes
        vps, vjs, dvs, accs = [], [], [], []
        idle = []  # synchronous: spans sat out (Cycles.idle)
        plain = []  # (column, first pass, passes) of plain spans until a zero target expires
        # the pass where the pages run out (`_cut_cycles` ends the segment there): planning stops
        # there once every column is planned through it (synchronous batches and re-asked
        # plain passes are not summed: no stop), within the first 256 passes (segments are
        # shorter: Mooncake aspire 24 passes on average; a zero target's plain span can be
        # thousands of passes, each summed); none where every pass is sure to fit (PageSums.fits:
        # on short contexts the summing was most of aspire's time)
        free, shared = self.pool.capacity - self.pool.used + sum(t.pages[run].tolist()), t.shared_tokens[run].tolist()
        cover = None if sync or PageSums.fits(free, cfg.page_size, shared, (ctx0 + d0).tolist(), min(n, 256)) \
            else PageSums(free, cfg.page_size, shared, min(n, 256)).cover
        cut = n
        every = rounds == -1  # a policy asked every pass (`every`): its first pass asked already
        max_rounds, min_n = (self.MAX_ROUNDS if rounds in (0, -1) else rounds), 1 if rounds in (1, -1) else 2
        # every: a request with no outcome yet answers from the pool's rate, which any outcome moves
        volatile = every and any(x is None for x in st)
        rounds = 0
        runl = run.tolist()
        # outcomes drawn one cycle ahead: a call draws this round's unknown verifications and,
        # for every outcome each could have, the request's next verification as it would be
        # asked (keyed draws: a row's outcome depends on its own arguments only), so about every
        # other round needs no call. column -> ((committed, drafts, context), accepted)
        known: dict = {}
        # a policy with one cycle target: every position's outcome drawn ahead (OutcomeTable)
        table = None
        if K > 0 and md > 0 and max_rounds > 1 and ask is None and after is None:
            table = self._table("outcomes", K, runl)
            max_rounds = self.TABLE_ROUNDS
        # a re-asked policy's draft counts change from cycle to cycle; where the model's draws are
        # prefix draws, one draw per position serves every count (`prefix_table`) and the rounds
        # need a call only every TABLE_ROWS positions of a request, not each
        runs = self.prefix_table() if table is None and (ask or after) and md > 0 else None
        while live:
            if rounds == max_rounds:  # the rest later: an arrival cuts most long plans short
                n = min(n, min(start[j] for j in live))
                break
            rounds += 1
            if sync:  # one reaches the target: all verify (after the fewest passes of drafting); a
                # request that drafted all its output can use sits the rest out (Batcher._sync_verify)
                # (one reaches it only if its output lets it draft that far)
                w0 = max([out[j] - com[j] - 1 - d[j] for j in live])  # every request capped after w0 passes
                for j in live:
                    w = min(tg[j], md) - d[j]
                    if w < w0 and (w <= 0 or out[j] - com[j] - 1 - d[j] >= w):
                        w0 = w
                if w0 < 0:
                    w0 = 0
            cols, spec, sids, scom, sdv, sctx = [], [], [], [], [], []
            got = {}
            later = []  # columns whose outcome comes from the prefix draws (`accepted`)
            for j in live:
                dj = d[j]
                if sync:
                    w = w0
                    cap = out[j] - com[j] - 1 - dj
                    if cap < w0:  # drafts cap passes, then sits out until the batch verifies
                        if start[j] + cap < n:
                            idle.append((j, start[j] + cap, start[j] + w0, dj + cap))
                        w = cap
                else:  # passes of drafting before this cycle's verification
                    eff = min(tg[j], out[j] - com[j] - 1, md)
                    w = eff - dj if eff > dj else 0
                if start[j] + (w0 if sync else w) < n:
                    x = dj + w
                    cols.append((j, x))
                    if x > 0:
                        spec.append((j, x))
                        kn = known.get(j) if table is None else None
                        if kn is not None and kn[0] == (com[j], x, ctx[j]):
                            got[j] = kn[1]
                        elif table is not None and (a := table.get(runl[j], com[j], x, ctx[j], out[j])) is not None:
                            got[j] = a
                        elif runs is not None:
                            if (a := runs.run(runl[j], com[j], ctx[j])) is None:
                                later.append((j, x))  # (drawn below, with the others missing)
                            else:
                                got[j] = x if x < a else a
                        else:
                            sids.append(runl[j])
                            scom.append(com[j])
                            sdv.append(x)
                            sctx.append(ctx[j])
            if not cols:
                break
            known = {}
            if later:
                J = [j for j, _ in later]
                got.update(zip(J, self.accepted(runs, J, [x for _, x in later], runl, com, ctx, out)))
            if sids:
                u = len(sids)
                # (column, outcomes lo..hi-1, their first row, drafts next): a column's next
                # verification after outcome a, while far from its end, checks min(K, max_draft)
                cand = []
                kc = min(K, md)
                ahead = spec if len(spec) <= self.SCALAR_MAX and table is None and max_rounds > 1 and not (ask or after) else ()
                if table is not None:  # this cycle's unknown outcomes drawn with every position's next
                    for j, x in spec:
                        if j not in got and not table.covers(runl[j], com[j] + 1):
                            table.want(runl[j], com[j] + 1, ctx[j] + 1, out[j])
                for j, x in ahead:  # small batches
                    c, o, cx, rid = com[j], out[j], ctx[j], runl[j]
                    lo, top = (got[j], got[j] + 1) if j in got else (0, x + 1)
                    hi = min(top, o - 1 - kc - c)  # outcomes below: next verification of kc drafts
                    if hi > lo:
                        m = hi - lo
                        cand.append((j, lo, hi, len(sids), kc))
                        sids.extend([rid] * m)
                        scom.extend(range(c + 1 + lo, c + 1 + hi))
                        sdv.extend([kc] * m)
                        sctx.extend(range(cx + 1 + lo, cx + 1 + hi))
                    for a in range(max(lo, hi), top):  # near the end: fewer drafts, or finished
                        c1 = c + a + 1
                        x1 = min(K, o - c1 - 1, md)
                        if c1 < o and x1 > 0:
                            cand.append((j, a, a + 1, len(sids), x1))
                            sids.append(rid)
                            scom.append(c1)
                            sdv.append(x1)
                            sctx.append(cx + a + 1)
                if table is not None and table.pending:
                    ids, cs, xs, cxs = table.rows_wanted()
                    res = verify(np.concatenate((np.array(sids, I64), ids)), np.concatenate((np.array(scom, I64), cs)),
                                 np.concatenate((np.array(sdv, I64), xs)), np.concatenate((np.array(sctx, I64), cxs)),
                                 budget, method).tolist()
                    table.store(res[u:])
                else:
                    res = verify(np.array(sids, I64), np.array(scom, I64), np.array(sdv, I64),
                                 np.array(sctx, I64), budget, method).tolist()
                i = 0
                for j, x in spec:
                    if j not in got:
                        got[j] = res[i]
                        i += 1
                for j, lo, hi, row, x1 in cand:
                    a = got[j]
                    if lo <= a < hi:
                        known[j] = ((com[j] + a + 1, x1, ctx[j] + a + 1), res[row + a - lo])
            live, fin = [], None
            due = []
            for j, x in cols:
                a = got[j] if x > 0 else 0
                vp = start[j] + (w0 if sync else x - d[j])
                if cover is not None and (c := cover(j, start[j], vp, ctx[j] + d[j], cut)) < cut:
                    cut = c
                vps.append(vp)
                vjs.append(j)
                dvs.append(x)
                accs.append(a)
                com[j] += a + 1
                ctx[j] += a + 1
                d[j] = 0
                start[j] = vp + 1
                if ask is not None:
                    if x > 0:
                        due.append(j)
                    elif tg[j] == 0:  # plain passes while its answers, asked ahead, stay 0
                        while com[j] < out[j]:
                            if com[j] >= rc[j]:  # the zero target expired: asked on this pass
                                p = pend.get(j)
                                i = com[j] - p[0] if p else -1
                                if not 0 <= i < len(p[1]):
                                    due.append(j)
                                    break
                                tg[j], rc[j] = p[1][i]
                                asked.append((start[j], j, tg[j], rc[j], com[j]))
                                if tg[j]:
                                    break
                            if start[j] >= n:
                                break
                            vps.append(start[j])
                            vjs.append(j)
                            dvs.append(0)
                            accs.append(0)
                            com[j] += 1
                            ctx[j] += 1
                            start[j] += 1
                elif after is not None:
                    if x > 0:
                        if st[j] is None or volatile:  # the next answers depend on the pool's rate
                            if fin is None or start[j] < fin:
                                fin = start[j]
                        else:
                            due.append(j)
                            dx[j] = (x, a)
                    elif every:  # a plain pass: the next pass's look relaxes towards the pool's rate
                        if fin is None or start[j] < fin:
                            fin = start[j]
                    elif tg[j] == 0:  # plain passes until the zero target expires
                        h = min(out[j] - com[j], rc[j] - com[j], n - start[j])
                        if h > 0:  # (a zero held for a quarter of a long context can reach far
                            # past where the segment ends: its passes are listed once n is final)
                            plain.append((j, start[j], h))
                            if cover is not None and (c := cover(j, start[j], start[j] + h - 1, ctx[j], cut)) < cut:
                                cut = c
                            com[j] += h
                            ctx[j] += h
                            start[j] += h
                        if com[j] < out[j] and com[j] >= rc[j] and (fin is None or start[j] < fin):
                            fin = start[j]  # asked there, relaxing towards the pool's rate
                elif x > 0:
                    tg[j] = K
                if com[j] >= out[j]:
                    if fin is None or start[j] < fin:
                        fin = start[j]
                else:
                    live.append(j)
            if fin is not None and fin < n:
                n = fin
            if cut < n:
                n = cut
            due = [j for j in due if com[j] < out[j] and start[j] < n]
            if due and ask is not None:
                # each asked for its next ASK_AHEAD positions at once (rows are pure; a position
                # fixes context and remaining): the later rows answer a plain stretch's re-asks
                rows = [(j, i) for j in due for i in range(min(self.ASK_AHEAD, out[j] - com[j], n - start[j]))]
                g, h = ask([runl[j] for j, _ in rows], [com[j] + i for j, i in rows], [ctx[j] + i for j, i in rows],
                           [out[j] for j, _ in rows], r)
                for (j, i), gj, hj in zip(rows, g, h):
                    if i == 0:
                        tg[j], rc[j] = gj, hj
                        asked.append((start[j], j, gj, hj, com[j]))
                        pend[j] = (com[j], [])
                    pend[j][1].append((gj, hj))
            due = [j for j in due if com[j] < out[j] and start[j] < n] if after is not None else ()
            if due:
                g, h, new = self._ask_after(after, [runl[j] for j in due], [com[j] for j in due], [ctx[j] for j in due],
                                  [out[j] for j in due], r, [dx[j][0] for j in due], [dx[j][1] for j in due],
                                  [st[j] for j in due])
                for j, gj, hj, sj in zip(due, g, h, new):
                    tg[j], rc[j], st[j] = gj, hj, sj
                    asked.append((start[j], j, gj, hj, com[j]))
        for j, p, h in plain:  # plain passes (no drafts, nothing accepted) before pass n
            h = min(h, n - p)
            if h > 0:
                vps.extend(range(p, p + h))
                vjs.extend([j] * h)
                dvs.extend([0] * h)
                accs.extend([0] * h)
        if not vps:
            return None
        vp, vj, dv, acc = (np.array(x, I64) for x in (vps, vjs, dvs, accs))
        if r > 1 or plain:  # one request: its verifications are in pass order already (but for
            # its plain spans, listed last)
            order = np.argsort(vp * r + vj, kind="stable")  # pass-major, running order within a pass
            vp, vj, dv, acc = vp[order], vj[order], dv[order], acc[order]
        if n < min_n:  # the pages ran out before (found while planning)
            return None
        cut = self._cut_cycles(n, min_n, r, ctx0, d0, vp, vj, dv, acc, run, idle)
        if cut is None or cut[0] < min_n:
            return None
        n, vp, vj, dv, acc, seg, need, idle = cut
        asks = None
        if ask is not None or after is not None:
            asks = tuple(np.array(x, I64) for x in (zip(*asked) if asked else [()] * 5))
        return SegmentPlan(run, n, seg, None, cycles=Cycles(vp, vj, dv, acc, K, need, asks, idle, after))

    def _cut_cycles(self, n, min_n, r, ctx0, d0, vp, vj, dv, acc, run, idle):
        """The verifications (pass-major) before pass `n`, the segment's arrays and pages, and `n`
        cut before the first pass whose page reservation does not fit in the pool: (n, vp, vj, dv,
        acc, seg, need, idle), or None where fewer than `min_n` passes fit."""
        k = int(np.searchsorted(vp, n))
        vp, vj, dv, acc = vp[:k], vj[:k], dv[:k], acc[:k]
        idle = [x for x in idle if x[1] < n] or None
        seg, need = self._cycle_arrays(n, r, ctx0, d0, vp, vj, dv, acc, run, idle)
        other = self.pool.used - sum(self.t.pages[run].tolist())
        over = other + need.sum(axis=1) > self.pool.capacity
        if over.any():
            n = int(np.argmax(over))
            if n < min_n:
                return None
            k = int(np.searchsorted(vp, n))
            vp, vj, dv, acc = vp[:k], vj[:k], dv[:k], acc[:k]
            seg = seg.head(n)
            need = need[:n]
            if idle is not None:
                idle = [x for x in idle if x[1] < n] or None
        return n, vp, vj, dv, acc, seg, need, idle

    def _cycle_arrays(self, n, r, ctx0, d0, vp, vj, dv, acc, run, idle=None):
        """(n, r) kind, query, context and draft position of a cycles segment, and pages needed.
        `idle`: spans sat out (Cycles.idle): no pass there, the drafts held stay (for the
        verification that ends the span too)."""
        V = np.zeros((n, r), bool)
        V[vp, vj] = True
        E = np.zeros((n, r), I64)
        E[vp, vj] = acc + 1
        ctx = np.empty((n, r), I64)
        ctx[0] = ctx0
        if n > 1:
            np.cumsum(E[:-1], axis=0, out=ctx[1:])
            ctx[1:] += ctx0
        i = np.arange(n, dtype=I64)[:, None]
        last = np.maximum.accumulate(np.where(V, i, -1), axis=0)  # last verification at or before i
        prev = np.empty_like(last)
        prev[0] = -1
        prev[1:] = last[:-1]
        dpos = np.where(prev >= 0, i - prev - 1, d0 + i)
        kind = np.where(V, PlanBatch.VERIFY, PlanBatch.DRAFT).astype(np.int8)
        if idle:
            for j, p0, p1, x in idle:
                kind[p0:p1, j] = PlanBatch.IDLE
                dpos[p0:p1 + 1, j] = x  # through its verification at p1 (when inside the segment)
        query = np.where(V, dpos + 1, 1)
        need = private_pages(ctx + dpos + 1, self.t.shared_tokens[run], self.cfg.page_size)
        return PlanBatch.decode(kind, query, ctx, dpos, self.cfg.draft_budget, self.cfg.draft_method), need

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
        extra = private_pages(np.asarray(base, I64)[None, :] + i, 0, ps).sum(axis=1) - held
        fits = extra <= free
        return n if fits.all() else int(np.argmin(fits))

    def apply(self, sp: SegmentPlan, n: int, ends: np.ndarray, accepted: np.ndarray) -> None:
        """Apply the first `n` passes of a segment. `ends[i]` is when pass i ended; `accepted` the
        outcome of the speculative verifications in pass n-1 (aligned with `last_verify_ids`)."""
        b = self.b
        b.passes += n
        if sp.cycles is not None:
            return self._apply_cycles(sp, n, ends)
        if sp.zero is not None:  # before any finish: the policy was asked on each of these passes
            b.policy.skip_zero(sp.zero, n)
            self.t.target[sp.zero.ids] = 0
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
        held = t.ctx[run] + np.where(ar, 1, t.drafted[run])
        held[~ar] += ver
        need = private_pages(held, t.shared_tokens[run], ps)
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

    def _apply_cycles(self, sp: SegmentPlan, n: int, ends: np.ndarray) -> None:
        """The first n passes of a cycles segment, as the step path leaves them pass by pass."""
        b, t, pool, cy = self.b, self.t, self.pool, sp.cycles
        run = sp.rids
        r = len(run)
        if b.draft_log is not None:  # sampled requests' draft lengths (policies/draftlog.py); reads only
            k = int(np.searchsorted(cy.vp, n))
            sp_ = cy.dv[:k] > 0
            b.draft_log.add(run[cy.vj[:k][sp_]], cy.dv[:k][sp_], cy.acc[:k][sp_], ends[cy.vp[:k][sp_]])
        if r <= self.SCALAR_MAX:
            return self._apply_cycles_small(sp, n, ends)
        k = int(np.searchsorted(cy.vp, n))
        vp, vj, dv, acc = cy.vp[:k], cy.vj[:k], cy.dv[:k], cy.acc[:k]
        kind = sp.seg.kind[:n]
        emitted = np.bincount(vj, acc + 1, r).astype(I64)
        nver = np.bincount(vj, None, r).astype(I64)
        spec = dv > 0
        t.committed[run] += emitted
        t.ctx[run] += emitted
        t.verifies[run] += nver
        t.accepted[run] += np.bincount(vj, acc, r).astype(I64)
        t.spec_verifies[run] += np.bincount(vj[spec], None, r).astype(I64)
        t.drafts[run] += (kind == PlanBatch.DRAFT).sum(axis=0)
        last_v = kind[n - 1] == PlanBatch.VERIFY
        t.drafted[run] = np.where(last_v, 0, sp.seg.draft_pos[n - 1] + (kind[n - 1] == PlanBatch.DRAFT))
        # pages: after pass n-1's reservation, shrunk to the committed tokens where it verified
        need = cy.need[:n]
        pages = np.where(last_v, private_pages(t.ctx[run], t.shared_tokens[run], self.cfg.page_size), need[n - 1])
        before = sum(t.pages[run].tolist())
        peak = pool.used - before + int(need.sum(axis=1).max())
        if peak > pool.peak:
            pool.peak = peak
        pool.adjust(sum(pages.tolist()) - before)
        t.pages[run] = pages
        # targets: -1 after a verification with drafts in the last pass; asked again (the cycle
        # target, held from the committed tokens then) after one in an earlier pass
        sv = vj[spec]
        if len(sv):
            last_spec = np.full(r, -1, I64)
            last_spec[sv] = vp[spec]  # pass-major order: the last write is the latest
            asked = (last_spec >= 0) & (last_spec < n - 1)
            t.target[run[asked]] = cy.K
            if b.policy.plans_ahead:
                t.recheck[run[asked]] = t.committed[run[asked]] + b.policy.plain_hold
            if cy.asks is not None:
                self._apply_asks(run, cy.asks, n)
            t.target[run[last_spec == n - 1]] = -1
        elif cy.asks is not None:
            self._apply_asks(run, cy.asks, n)
        # emission gaps in pass order, running order within a pass
        col = np.argsort(vj, kind="stable")  # request-major, pass order within a request
        e = ends[vp[col]]
        prev = np.empty_like(e)
        prev[1:] = e[:-1]
        first = np.ones(len(col), bool)
        first[1:] = vj[col][1:] != vj[col][:-1]
        prev[first] = t.t_last_emit[run[vj[col][first]]]
        gaps = np.empty_like(e)
        gaps[col] = e - prev
        self.itl.append(gaps)
        lastpos = np.full(r, -1, I64)
        lastpos[vj] = vp
        em = lastpos >= 0
        t.t_last_emit[run[em]] = ends[lastpos[em]]
        # outcomes to the policy pass by pass, in order; then the last pass's finishes
        if sp.stretch is not None:
            self._apply_stretch(sp, n)
        elif len(sv) or sp.looks:
            self._tell(sp, n, run[sv], vp[spec], dv[spec], acc[spec])
        if cy.asks is not None:
            self._commit_asks(cy, run, n, vp[spec], vj[spec])
        done = last_v & (t.committed[run] >= t.output[run])
        if done.any():
            end = float(ends[n - 1])
            for rid in run[done].tolist():
                b.finish(rid, end)

    def _tell(self, sp: SegmentPlan, n: int, rs: np.ndarray, svp: np.ndarray, sd: np.ndarray, sa: np.ndarray) -> None:
        """The outcomes of verifications with drafts (requests rs at passes svp, pass-major) to
        the policy pass by pass, in order, with the looks of cycles planned ahead (`looks`:
        before the pass they start on, after the outcomes before it) on the first n passes."""
        pol = self.b.policy
        looks = sp.looks or ()
        li = 0
        cuts = np.flatnonzero(svp[1:] != svp[:-1]).tolist() if len(svp) else None
        for lo, hi in zip([0, *(c + 1 for c in cuts)], [*(c + 1 for c in cuts), len(svp)]) if cuts is not None else ():
            p = svp.item(lo)
            while li < len(looks) and looks[li][0] <= p:
                pol.look(sp.rids, looks[li][1], looks[li][2])
                li += 1
            pol.on_verify(rs[lo:hi], sd[lo:hi], sa[lo:hi])
        for p, committed, k in looks[li:]:
            if p < n:
                pol.look(sp.rids, committed, k)

    def _apply_asks(self, run: np.ndarray, asks: tuple, n: int) -> None:
        """Targets and recheck positions of the re-asks on the first n passes (the latest wins)."""
        t, last = self.t, {}
        for p, j, g, h, _ in zip(*(x.tolist() for x in asks)):
            if p < n:
                last[j] = (g, h)
        runl = run.tolist()
        ahead = self.b.policy.plans_ahead  # the others are asked every pass: no recheck
        for j, (g, h) in last.items():
            t.target[runl[j]] = g
            if ahead:
                t.recheck[runl[j]] = h

    def _commit_asks(self, cy: Cycles, run: np.ndarray, n: int, svp: np.ndarray, svj: np.ndarray) -> None:
        """A policy re-asked through `targets_after` is told of the asks kept (`asked`) whose
        request verified with drafts no later: the state the step path's asking leaves."""
        if cy.told is None:
            return
        asks = cy.asks
        last_v = dict(zip(svj.tolist(), svp.tolist()))  # pass-major: the latest wins
        last = {}
        for p, j, c in zip(asks[0].tolist(), asks[1].tolist(), asks[4].tolist()):
            if p < n and p > last_v.get(j, -1):
                last[j] = c
        if last:
            runl = run.tolist()
            cy.told.asked(np.array([runl[j] for j in last], I64), np.array(list(last.values()), I64))

    def _apply_cycles_small(self, sp: SegmentPlan, n: int, ends: np.ndarray) -> None:
        """_apply_cycles on Python scalars, one verification then one request at a time (small
        batches: numpy's per-call cost on arrays of a few entries was most of the work)."""
        b, t, pool, cy = self.b, self.t, self.pool, sp.cycles
        pol = b.policy
        run = sp.rids
        runl = run.tolist()
        r = len(runl)
        k = int(cy.vp.searchsorted(n))
        vp, vj, dv, acc = cy.vp[:k], cy.vj[:k], cy.dv[:k], cy.acc[:k]
        em, nv, na, ns = [0] * r, [0] * r, [0] * r, [0] * r
        lastv, lasts = [-1] * r, [-1] * r
        le = t.t_last_emit
        prev = [le.item(rid) for rid in runl]
        gaps = []
        # emission gaps in pass order, running order within a pass (the verifications' order)
        for p, j, x, a, e in zip(vp.tolist(), vj.tolist(), dv.tolist(), acc.tolist(), ends[vp].tolist()):
            em[j] += a + 1
            nv[j] += 1
            na[j] += a
            if x > 0:
                ns[j] += 1
                lasts[j] = p
            lastv[j] = p
            gaps.append(e - prev[j])
            prev[j] = e
        self.itl.append(np.array(gaps))
        need = cy.need[:n]
        dpos, need_last = sp.seg.draft_pos[n - 1].tolist(), need[n - 1].tolist()
        com, ctx, out, sh, pg = t.committed, t.ctx, t.output, t.shared_tokens, t.pages
        ps, K, m = self.cfg.page_size, cy.K, n - 1
        hold = pol.plain_hold if pol.plans_ahead else None
        before = after = 0
        done = []
        sat = [0] * r  # passes each sat out (synchronous), and whether it sits out pass m
        last_idle = [False] * r
        if cy.idle:
            for j, p0, p1, _ in cy.idle:
                if p0 < n:
                    sat[j] += min(p1, n) - p0
                    if p1 > m:
                        last_idle[j] = True
        for j, rid in enumerate(runl):
            c = com.item(rid) + em[j]
            com[rid] = c
            cx = ctx.item(rid) + em[j]
            ctx[rid] = cx
            if nv[j]:
                t.verifies[rid] += nv[j]
                t.accepted[rid] += na[j]
                t.spec_verifies[rid] += ns[j]
                le[rid] = prev[j]
            t.drafts[rid] += n - nv[j] - sat[j]
            # pages: after pass n-1's reservation, shrunk to the committed tokens where it verified
            if lastv[j] == m:
                t.drafted[rid] = 0
                pages = private_pages(cx, sh.item(rid), ps)
                if c >= out.item(rid):
                    done.append(rid)
            else:
                t.drafted[rid] = dpos[j] + (not last_idle[j])
                pages = need_last[j]
            before += pg.item(rid)
            after += pages
            pg[rid] = pages
            # targets: -1 after a verification with drafts in the last pass; asked again (the
            # cycle target, held from the committed tokens then) after one in an earlier pass
            ls = lasts[j]
            if ls == m:
                t.target[rid] = -1
            elif ls >= 0 and cy.asks is None:
                t.target[rid] = K
                if hold is not None:
                    t.recheck[rid] = c + hold
        if cy.asks is not None:  # re-asks on the passes kept (a request verifying in pass m: -1 above)
            ap, aj, atg, arc, _ = cy.asks
            for p, j, g, h in zip(ap.tolist(), aj.tolist(), atg.tolist(), arc.tolist()):
                if p < n and lasts[j] != m:
                    t.target[runl[j]] = g
                    if hold is not None:
                        t.recheck[runl[j]] = h
        peak = pool.used - before + int(need.sum(axis=1).max())
        if peak > pool.peak:
            pool.peak = peak
        pool.adjust(after - before)
        # outcomes to the policy pass by pass, in order; then the last pass's finishes
        spec = dv > 0
        if sp.stretch is not None:
            self._apply_stretch(sp, n)
        elif any(ns) or sp.looks:
            self._tell(sp, n, run[vj[spec]], vp[spec], dv[spec], acc[spec])
        if cy.asks is not None:
            self._commit_asks(cy, run, n, vp[spec], vj[spec])
        for rid in done:
            b.finish(rid, ends.item(m))

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
            need = private_pages(k, sh.item(rid), ps)  # room for one more token before pass n-1
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
        if sp.seg is None or sp.cycles is not None:
            return NO_IDS
        s = ~sp.ar_like
        return sp.rids[s][sp.verify_at[s] == n - 1]
