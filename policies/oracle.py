"""`oracle`: ASPIRE's decision rule fed the simulator's latent acceptance probabilities instead
of estimates. An upper bound for the other policies (marked as such in reports); simulator only,
or the GPU runtime with oracle acceptance."""

from dataclasses import dataclass

import numpy as np

from spsim.plan import DraftMethod

from .aspire import best_k
from .base import DecodeView, Policy
from .registry import register


@register
@dataclass
class Oracle(Policy):
    k_max: int = 0
    name = "oracle"
    oracle = True
    default_draft_method = DraftMethod.STEP_REFRESH
    description = "upper bound: ASPIRE's rule with the latent acceptance (simulator only)"

    def targets(self, view: DecodeView) -> np.ndarray:
        acc = self.ctx.acceptance
        if acc is None:
            raise RuntimeError("the oracle policy needs the simulator's acceptance model")
        k_max = self.k_max or view.max_draft
        p = np.stack([acc.latent(int(i), int(c), k_max, int(x), int(b), int(m)) for i, c, x, b, m in
                      zip(view.ids, view.committed, view.context, view.budget, view.method)]) if len(view.ids) else np.zeros((0, k_max))
        # expected tokens after k drafts: 1 + sum_{i<k} prod_{l<=i} p_l
        tok = np.concatenate([np.ones((len(view.ids), 1)), 1 + np.cumsum(np.cumprod(p, axis=1), axis=1)], axis=1)
        return best_k(self.ctx.cost, view, lambda ks: tok[:, ks], k_max)
