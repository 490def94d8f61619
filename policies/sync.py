"""`sync`: batch-synchronous speculation (MagicDec / Vegas style): every decode request drafts
together for k passes, then all verify together.

`k=0` is speculation off. With `k=-1` (auto) the batch's k is chosen at the start of each cycle
by expected goodput: the sum over requests of expected emitted tokens over the time of k draft
passes and one verification pass, priced by the cost model, for k in [0, k_max].
"""

from dataclasses import dataclass

import numpy as np

from .acceptance_ema import AcceptanceEMA
from .base import DecodeView, Policy, expected_tokens
from .registry import register


@register
@dataclass
class Sync(Policy):
    k: int = -1
    k_max: int = 12
    ema: float = 0.1  # weight of each verification in the decayed counts (memory ~10 cycles)
    prior: float = 0.8
    name = "sync"
    synchronous = True
    plans_ahead = False
    description = "batch-synchronous draft-then-verify with one global k (MagicDec)"

    def __post_init__(self):
        if self.k < -1:
            raise ValueError("k must be >= 0, or -1 for auto")
        self.acc = AcceptanceEMA(self.ema, self.prior)
        self.cycle_k = max(self.k, 0)

    def on_finish(self, rid):
        self.acc.drop(rid)

    def on_verify(self, ids, drafted, accepted):
        self.acc.update(ids, drafted, accepted)

    def cycle_target(self) -> int | None:
        return self.k if self.k >= 0 else None  # a fixed k: every cycle k drafts (or fewer, forced)

    def _choose(self, view: DecodeView) -> int:
        cost = self.ctx.cost
        k_max = min(self.k_max, view.max_draft)
        a = self.acc.get(view.ids, view.committed)
        n = len(view.ids)
        best, best_rate = 0, -1.0
        for k in range(k_max + 1):
            tokens = expected_tokens(a, np.full(n, k)).sum()
            d_m, v_m = cost.marginal(view.context, view.budget, view.method, np.full(n, k + 1))
            t = k * (cost.pass_overhead(n) + d_m.sum()) + cost.pass_overhead(n * (k + 1)) + v_m.sum()
            if tokens / t > best_rate:
                best, best_rate = k, tokens / t
        return best

    def targets(self, view: DecodeView) -> np.ndarray:
        d = view.drafted
        if len(d) and d.max() == 0 and self.k < 0:
            self.cycle_k = self._choose(view)
        if len(d) == 0 or d.max() >= self.cycle_k:
            return d.copy()  # everyone verifies
        return d + 1
