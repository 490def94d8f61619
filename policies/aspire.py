"""`aspire`: per-request asynchronous speculation inside the mixed pass.

After each of its verifications a request picks its next draft length k to maximise expected
committed tokens per unit of time it costs the batch: (1 - a^(k+1)) / (1 - a) tokens, from its
smoothed acceptance a, over (k+1) passes' share of the per-pass overhead (prefill chunks in the
pass included) plus its own marginal attention cost for k drafts and one (k+1)-token verification,
priced by the cost model at its actual context. Drafts use the per-step refreshed sparse index by
default.

Exploration: the smoothed acceptance starts from a prior, and a rule that answers "do not
speculate" from the prior alone would never test it (nobody speculates, so no outcome ever moves
the estimate: at batch 1 and 32K the prior 0.8 said 0 where fixed-k gains 10 %). Until the pooled
rate rests on `explore` trials of real outcomes, a request whose answer is 0 although speculation
could pay (perfect acceptance would win: not cost-bound) probes instead: it drafts the rule's best
k > 0 at its estimate, the cheapest cycle that tests it. Once the pool has that evidence the rule
is trusted, zeros included (the estimate then relaxes towards a measured pooled rate).
"""

from dataclasses import dataclass

import numpy as np

from spsim.plan import DraftMethod

from .acceptance_ema import AcceptanceEMA
from .aspire_stretch import AspireStretch
from .base import DecodeView, Policy, ema_looks, expected_tokens, spec_shares
from .registry import register


_KS: dict = {}  # (k_min, k_max) -> (ks, ks + 1), read-only: made once, asked every decision


def cycle_costs(cost, view: DecodeView, k_max: int, k_min: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Draft lengths ks = k_min..k_max and each request's cost of a cycle of k drafts and one
    verification (r, K): k + 1 passes' share of the pass overhead plus its own attention."""
    ks1 = _KS.get((k_min, k_max))
    if ks1 is None:
        ks1 = _KS[(k_min, k_max)] = tuple(np.arange(k_min + i, k_max + 1 + i, dtype=np.int64) for i in (0, 1))
        for a in ks1:
            a.flags.writeable = False
    ks, kp1 = ks1
    m = _table_marginal(cost, view, kp1)
    if m is None:
        K = len(ks)
        # 2-D arrays: one vectorised cost-model call for every (request, k) (repeat, not
        # broadcast_to: the same arrays for ~1 us instead of ~7 us each, asked every decision)
        m = cost.marginal(view.context[:, None].repeat(K, 1), view.budget, view.method,
                          kp1[None, :].repeat(len(view.ids), 0))
    draft_m, verify_m = m
    # a pass carrying a prefill chunk is longer for every request in it: drafting then costs more
    nd = max(view.num_decode, 1)
    share = cost.pass_overhead(nd, prefill_tokens=view.prefill_tokens) / nd
    # speculation's once-per-pass terms, shared like the overhead (k draft passes, one verification)
    d_add, v_add = spec_shares(cost, view)
    if d_add or v_add:
        return ks, kp1 * share + ks * draft_m + verify_m + np.where(ks > 0, ks * d_add + v_add, 0.0)
    return ks, kp1 * share + ks * draft_m + verify_m


def _table_marginal(cost, view: DecodeView, query: np.ndarray):
    """`cost.marginal` of the (request, k) grid of these contexts and verify queries from the
    model's tables (`CostModel.tables`), without building the grids (this runs at every
    decision, on a few requests, where building them was most of the cost). None where it has
    none (the caller asks `marginal` itself)."""
    ctx = view.context
    if not len(ctx):
        return None
    tb = cost.tables(view.budget, view.method, int(ctx.max()) + 1, int(query[-1]) + 1)
    if tb is None:
        return None
    return tb[0][ctx, 0][:, None], tb[1][ctx[:, None], query]


def zero_holds(ks: np.ndarray, cycle: np.ndarray, targets: np.ndarray, context: np.ndarray, short: int) -> np.ndarray:
    """Tokens each zero target holds: `short` where low acceptance made speculation lose (it may
    pay again after a hard span), but until the context has grown by a quarter where it would lose
    even if every draft were accepted (short contexts: a draft costs nearly a verification): only
    the context or the batch (whose changes re-ask anyway) can change that."""
    zero = targets == 0
    if not zero.any():
        return np.full(len(targets), short, np.int64)
    perfect = ks[np.argmax((ks + 1.0) / cycle, axis=1)]
    return np.where(zero & (perfect == 0), np.maximum(short, context // 4), short)


class RatePlanner(Policy):
    """A plans-ahead policy that picks each request's k as the argmax of tokens / cycle cost."""

    def plan(self, view: DecodeView, tokens_fn, k_max: int, probe: bool = False) -> np.ndarray:
        """tokens_fn(ks) -> (r, K) expected tokens for the draft lengths `ks` (K,). `probe`: a
        zero answer where perfect acceptance would pay becomes the best k > 0 (exploration)."""
        ks, cycle = cycle_costs(self.ctx.cost, view, k_max)
        rate = tokens_fn(ks) / cycle
        k = ks[np.argmax(rate, axis=1)]
        if probe and len(ks) > 1 and any((k == 0).tolist()):
            perfect = ks[np.argmax((ks + 1.0) / cycle, axis=1)]
            k = np.where((k == 0) & (perfect > 0), ks[1 + np.argmax(rate[:, 1:], axis=1)], k)
        self._hold = zero_holds(ks, cycle, k, view.context, self.plain_hold)
        return k

    def hold(self, view: DecodeView, targets: np.ndarray) -> np.ndarray:
        return self._hold  # made with the targets: the batcher asks for both on the same view


@register
@dataclass
class Aspire(RatePlanner):
    ema: float = 0.1  # weight of each verification in the decayed counts (memory ~10 cycles)
    prior: float = 0.8
    k_max: int = 0  # 0: the batcher's max_draft
    replan: str = "verify"  # "pass": asked every pass (with each pass's prefill load), not planned ahead
    explore: int = 32  # pooled trials of real outcomes before a zero answer is trusted (0: never probe)
    name = "aspire"
    default_draft_method = DraftMethod.STEP_LAYER
    description = "per-request k from smoothed acceptance and batch-aware cost (ASPIRE)"

    def __post_init__(self):
        if not 0 < self.ema <= 1:
            raise ValueError("ema must be in (0, 1]")
        if not 0 <= self.prior < 1:
            raise ValueError("prior must be in [0, 1)")
        if self.replan not in ("verify", "pass"):
            raise ValueError("replan must be 'verify' or 'pass'")
        if self.explore < 0:
            raise ValueError("explore must be >= 0")
        self.acc = AcceptanceEMA(self.ema, self.prior)
        self._planner = None
        if self.replan == "pass":
            self.plans_ahead = False  # asked for every decode request every pass

    def zero_run(self, view: DecodeView, n: int) -> int | None:
        """(replan=pass) Passes on which every request would be given 0: the rule is row-wise
        (table-priced cycle costs, argmax per row), so (pass, request) rows in one call answer as
        the passes would one by one."""
        r = len(view.ids)
        if r == 0 or any(view.drafted.tolist()) or self.exploring:
            return None  # exploring: answers depend on the pool's evidence, which outcomes move
        a = ema_looks(self.acc, view.ids, view.committed, n).ravel()
        i = np.arange(n, dtype=np.int64)[:, None]
        rows = DecodeView(ids=np.tile(view.ids, n), context=(view.context[None, :] + i).ravel(),
                          drafted=np.zeros(n * r, np.int64), remaining=(view.remaining[None, :] - i).ravel(),
                          committed=(view.committed[None, :] + i).ravel(), budget=view.budget,
                          method=view.method, last_entropy=np.tile(view.last_entropy, n),
                          sum_entropy=np.tile(view.sum_entropy, n), num_decode=view.num_decode,
                          prefill_tokens=view.prefill_tokens, max_draft=view.max_draft)
        ks, cycle = cycle_costs(self.ctx.cost, rows, self.k_max or view.max_draft)
        k = ks[np.argmax(expected_tokens(a[:, None], ks[None, :]) / cycle, axis=1)]
        first = (k != 0).reshape(n, r).any(axis=1)
        return int(np.argmax(first)) if first.any() else n

    def skip_zero(self, view: DecodeView, n: int) -> None:
        ema_looks(self.acc, view.ids, view.committed, n, commit=True)

    def on_finish(self, rid):
        self.acc.drop(rid)

    # ---- many passes at once (an executor that advances a fixed batch many passes per event)
    def fast_plan(self, ahead, max_passes: int):
        if self.plans_ahead:  # replan=verify: asked after each request's own verifications
            if not ahead.ask():
                return None
            if ahead.max_draft and ahead.open and ahead.any_target():
                return ahead.cycles(0, False, max_passes, after=self)
            return ahead.held(max_passes)
        if not ahead.max_draft:
            return None
        # replan=pass: plain passes while `zero_run` vouches for them (tried again only after a
        # pass with no drafts, with no request waiting), else a stretch (`aspire_stretch`), else
        # cycles re-asked after each request's own outcomes
        if not ahead.open or ahead.zero_ok:
            sp = ahead.zero(max_passes)
            if sp is not None:
                return sp
            ahead.zero_ok = False
        if self._planner is None:
            self._planner = AspireStretch(self)
        if (sp := ahead.stretch(self._planner, max_passes)) is not None:
            return sp
        return ahead.every(self, max_passes) if ahead.open else None

    def on_verify(self, ids, drafted, accepted):
        self.acc.update(ids, drafted, accepted)

    @property
    def exploring(self) -> bool:
        """The pooled rate rests on fewer than `explore` trials: zero answers probe instead."""
        return self.acc.trials < self.explore

    def targets(self, view: DecodeView) -> np.ndarray:
        a = self.acc.get(view.ids, view.committed)
        return self.plan(view, lambda ks: expected_tokens(a[:, None], ks[None, :]), self.k_max or view.max_draft,
                         probe=self.exploring)

    # ---- asking ahead (replan=verify), for an executor that plans many passes at once. A request
    # asked right after its own verification reads only its own counts (the outcome forgets its
    # last look: nothing to relax), so its answers follow from its own outcomes.
    def ask_state(self, ids: list[int]) -> list:
        """Per request, what `targets_after` starts from (None: no outcome yet, or exploring, so
        its answers depend on every request's outcomes through the pool)."""
        if self.exploring:
            return [None] * len(ids)
        return self.acc.own(ids)

    def targets_after(self, view: DecodeView, drafted: np.ndarray, accepted: np.ndarray, state: list):
        """(targets, holds, state after) the requests in `view` would be given when asked on the
        pass after a verification of `drafted` drafts with `accepted` accepted, `view` holding
        their state after it; changes nothing (`asked` records the asks kept). Row by row."""
        new = self.acc.after(state, drafted.tolist(), accepted.tolist())
        a = np.fromiter((x0 / x1 for x0, x1 in new), np.float64, len(new))
        tg = self.plan(view, lambda ks: expected_tokens(a[:, None], ks[None, :]), self.k_max or view.max_draft)
        return tg, self._hold, new

    def asked(self, ids: np.ndarray, committed: np.ndarray) -> None:
        """These requests were asked (`targets_after`) at these positions, after their outcomes."""
        self.acc.get(ids, committed)
