"""`entropy`: SparseSpec-L's controller: the draft length follows the draft tokens' entropy.

Each drafted token's entropy H gives an acceptance estimate p = exp(-lam * H), so the chance that
the whole draft so far is accepted is exp(-lam * sum H). A request keeps drafting while one more
draft raises its expected emitted tokens per unit cost (one more draft adds P_k * p_next expected
tokens, with p_next estimated from the latest draft's entropy), and verifies as soon as it would
not. Asked every pass (it reacts to each new draft's entropy).
"""

from dataclasses import dataclass

import numpy as np

from .base import DecodeView, Policy
from .registry import register


@register
@dataclass
class Entropy(Policy):
    lam: float = 0.27  # per-nat decay of the acceptance estimate
    k_min: int = 1
    name = "entropy"
    plans_ahead = False
    needs_entropy = True
    description = "draft length from draft-token entropy (SparseSpec-L)"

    def __post_init__(self):
        if self.lam <= 0:
            raise ValueError("lam must be > 0")
        self._seen: dict[int, tuple[int, float]] = {}  # rid -> (drafts counted, expected tokens)

    def on_finish(self, rid):
        self._seen.pop(rid, None)

    def _expected(self, view: DecodeView) -> np.ndarray:
        """Expected emitted tokens if each request verified now: 1 + sum_i P(first i accepted)."""
        out = np.ones(len(view.ids))
        prefix = np.exp(-self.lam * view.sum_entropy)
        for j, (rid, d) in enumerate(zip(view.ids.tolist(), view.drafted.tolist())):
            if d == 0:
                self._seen[rid] = (0, 1.0)
                continue
            seen, e = self._seen.get(rid, (0, 1.0))
            if d > seen:  # one new draft since the last look
                e += float(prefix[j])
                self._seen[rid] = (d, e)
            out[j] = e
        return out

    def targets(self, view: DecodeView) -> np.ndarray:
        cost = self.ctx.cost
        d = view.drafted
        e_now = self._expected(view)
        p_next = np.where(np.isnan(view.last_entropy), np.exp(-self.lam * 0.6), np.exp(-self.lam * np.nan_to_num(view.last_entropy)))
        gain = np.exp(-self.lam * view.sum_entropy) * p_next
        draft_m, v_now = cost.marginal(view.context, view.budget, view.method, d + 1)
        _, v_next = cost.marginal(view.context, view.budget, view.method, d + 2)
        share = cost.pass_overhead(max(view.num_decode, 1)) / max(view.num_decode, 1)
        c_now = (d + 1) * share + d * draft_m + v_now
        c_next = (d + 2) * share + (d + 1) * draft_m + v_next
        more = ((e_now + gain) / c_next > e_now / c_now) | (d < self.k_min)
        return np.where(more, d + 1, d)
