"""`entropy`: SparseSpec-L's controller: the draft length follows the draft tokens' entropy.

Each drafted token's entropy turns into a per-token acceptance estimate (Bayes' rule from the
entropy signal's AUC, around the request's own smoothed acceptance); after every draft the request
verifies unless drafting more raises the cycle's expected tokens per unit cost, priced by the cost
model at its context (`entropy_rule.draft_more`). Asked every pass: it reacts to each new draft.
"""

from dataclasses import dataclass

import numpy as np

from . import entropy_rule as er
from .acceptance_ema import AcceptanceEMA
from .base import DecodeView, Policy, ema_looks, spec_shares
from .entropy_stretch import StretchPlanner
from .registry import register

_FMAX = float(np.finfo(np.float64).max)


@register
@dataclass
class Entropy(Policy):
    auc: float = 0.64  # how well entropy predicts acceptance (SparseSpec-L reports ~0.64)
    entropy_median: float = 0.6
    entropy_sigma: float = 1.0
    ema: float = 0.1  # weight of each verification in the decayed counts (memory ~10 cycles)
    prior: float = 0.9
    lookahead: int = 8
    name = "entropy"
    plans_ahead = False
    needs_entropy = True
    description = "draft length from draft-token entropy (SparseSpec-L)"

    def __post_init__(self):
        if not 0.5 <= self.auc < 1:
            raise ValueError("auc must be in [0.5, 1)")
        self.slope, self.thr = er.rule_from_auc(self.auc, self.entropy_sigma, self.entropy_median)
        self.acc = AcceptanceEMA(self.ema, self.prior)
        self._p: dict[int, list[float]] = {}  # per-token estimates of the drafts held
        # per request: (context, draft cost, verify cost by drafts held); a drafting request's
        # context only changes at its verification, so this is recomputed once per cycle
        self._costs: dict[int, tuple[int, float, np.ndarray]] = {}
        # the last pass's priced costs (draft, verify by drafts held, each plus the pass overhead's
        # share) and what they were priced for: while requests draft, passes repeat them
        self._priced_key, self._priced = None, None
        self._planner = None

    def on_finish(self, rid):
        self.acc.drop(rid)
        self._p.pop(rid, None)
        self._costs.pop(rid, None)

    def on_verify(self, ids, drafted, accepted):
        self.acc.update(ids, drafted, accepted)
        for rid in ids.tolist():
            self._p[rid] = []

    def targets(self, view: DecodeView) -> np.ndarray:
        r, d = len(view.ids), view.drafted
        prior = self.acc.get(view.ids, view.committed)
        ids, dl = view.ids.tolist(), d.tolist()
        k = max(max(dl, default=0), 1)
        p_hat = np.ones((r, k))
        # np.nan_to_num's values (NaN: the median; entropies are never negative and +inf -> the
        # largest float), without its ~15 us of wrappers
        le = view.last_entropy
        est = er.token_acceptance(np.minimum(np.where(le == le, le, self.entropy_median), _FMAX), prior, self.slope,
                                  self.thr)
        for j, (rid, n) in enumerate(zip(ids, dl)):
            held = self._p.setdefault(rid, [])
            if n == 0:
                held.clear()
            elif len(held) < n:  # one new draft since the last pass
                held.append(float(est[j]))
            if n:
                p_hat[j, :n] = held[:n]
        nd = max(view.num_decode, 1)
        key = (ids, view.context.tolist(), nd, view.prefill_tokens, view.max_draft)
        if key == self._priced_key:  # the same requests at the same contexts and load as the last pass
            cd, vc = self._priced
        else:
            draft_c, verify_c = self._marginal_costs(view)
            share = self.ctx.cost.pass_overhead(nd, prefill_tokens=view.prefill_tokens) / nd
            d_add, v_add = spec_shares(self.ctx.cost, view, verify_c.shape[1])
            cd, vc = self._priced = draft_c + share + d_add, verify_c + share + v_add
            self._priced_key = key
        more = er.draft_more(p_hat, d, prior, cd, vc, np.minimum(view.max_draft, view.remaining - 1), self.lookahead)
        return np.where(more, d + 1, d)

    def zero_run(self, view: DecodeView, n: int) -> int | None:
        """Passes on which no request would draft, from the same rule on the same inputs: every
        row (pass, request) of `targets` is computed on its own (row-wise numpy; one draft column
        when none is held), so the (n * r) rows in one call give the answers pass by pass would."""
        r = len(view.ids)
        if r == 0 or any(view.drafted.tolist()):
            return None
        prior = ema_looks(self.acc, view.ids, view.committed, n).ravel()
        i = np.arange(n, dtype=np.int64)[:, None]
        ctx = (view.context[None, :] + i).ravel()
        cap = np.minimum(view.max_draft, (view.remaining[None, :] - i).ravel() - 1)
        # with no drafts held the rule reads verify costs at 0..min(lookahead, max_draft) drafts
        # only (draft_more clips larger counts to the last column): the same columns, no others
        rows, n_max = n * r, min(view.max_draft, self.lookahead)
        c = n_max + 1  # the (rows, c) grids by ndarray.repeat: np.broadcast_to/np.tile cost more
        dm, vm = self.ctx.cost.marginal(ctx[:, None].repeat(c, 1), view.budget, view.method,
                                        np.arange(1, c + 1)[None, :].repeat(rows, 0))
        nd = max(view.num_decode, 1)
        share = self.ctx.cost.pass_overhead(nd, prefill_tokens=view.prefill_tokens) / nd
        d_add, v_add = spec_shares(self.ctx.cost, view, c)
        more = er.first_draft_more(prior, dm[:, 0] + share + d_add, vm + share + v_add, cap, self.lookahead)
        first = more.reshape(n, r).any(axis=1)
        return int(np.argmax(first)) if first.any() else n

    def skip_zero(self, view: DecodeView, n: int) -> None:
        ema_looks(self.acc, view.ids, view.committed, n, commit=True)
        for rid in view.ids.tolist():
            self._p.setdefault(rid, []).clear()

    # ---- many passes at once (an executor that advances a fixed batch many passes per event)
    def fast_plan(self, ahead, max_passes: int):
        """Plain passes while `zero_run` vouches for them, else what asking on each of the next
        passes would answer (`entropy_stretch`)."""
        if not ahead.max_draft:
            return None
        sp = ahead.zero(max_passes)
        if sp is not None:
            return sp
        if self._planner is None:
            self._planner = StretchPlanner(self)
        return ahead.stretch(self._planner, max_passes)

    def _marginal_costs(self, view: DecodeView) -> tuple[np.ndarray, np.ndarray]:
        """Each request's draft cost and verify cost for 0..max_draft drafts held, at its context."""
        n_max = view.max_draft
        ids, ctx = view.ids.tolist(), view.context.tolist()
        stale = [j for j, (rid, c) in enumerate(zip(ids, ctx)) if self._costs.get(rid, (None,))[0] != c]
        if stale:
            sj = np.asarray(stale)
            c = n_max + 1  # (stale, c) grids by ndarray.repeat: np.broadcast_to costs more
            dm, vm = self.ctx.cost.marginal(view.context[sj, None].repeat(c, 1), view.budget, view.method,
                                            np.arange(1, c + 1)[None, :].repeat(len(sj), 0))
            for row, j in enumerate(stale):
                self._costs[ids[j]] = (ctx[j], float(dm[row, 0]), vm[row])
        got = [self._costs[rid] for rid in ids]
        return np.array([g[1] for g in got]), np.stack([g[2] for g in got]) if got else np.zeros((0, n_max + 1))
