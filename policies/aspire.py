"""`aspire`: per-request asynchronous speculation inside the mixed pass.

After each of its verifications a request picks its next draft length k to maximise expected
committed tokens per unit of time it costs the batch: (1 - a^(k+1)) / (1 - a) tokens, from its
smoothed acceptance a, over (k+1) passes' share of the per-pass overhead (prefill chunks in the
pass included) plus its own marginal attention cost for k drafts and one (k+1)-token verification,
priced by the cost model at its actual context. Drafts use the per-step refreshed sparse index by
default.
"""

from dataclasses import dataclass

import numpy as np

from spsim.plan import DraftMethod

from .acceptance_ema import AcceptanceEMA
from .base import DecodeView, Policy, expected_tokens
from .registry import register


def best_k(cost, view: DecodeView, tokens_fn, k_max: int, k_min: int = 0) -> np.ndarray:
    """argmax over k in [k_min, k_max] of tokens_fn(k) / cycle cost, per request.

    tokens_fn(ks) -> (r, K) expected tokens for the draft lengths `ks` (K,)."""
    ks = np.arange(k_min, k_max + 1, dtype=np.int64)
    K = len(ks)
    # 2-D arrays: one vectorised cost-model call for every (request, k) (repeat, not
    # broadcast_to: the same arrays for ~1 us instead of ~7 us each, asked every decision)
    draft_m, verify_m = cost.marginal(view.context[:, None].repeat(K, 1), view.budget[:, None].repeat(K, 1),
                                      view.method[:, None].repeat(K, 1), (ks + 1)[None, :].repeat(len(view.ids), 0))
    # a pass carrying a prefill chunk is longer for every request in it: drafting then costs more
    nd = max(view.num_decode, 1)
    share = cost.pass_overhead(nd, prefill_tokens=view.prefill_tokens) / nd
    cycle = (ks + 1) * share + ks * draft_m + verify_m
    rate = tokens_fn(ks) / cycle
    return ks[np.argmax(rate, axis=1)]


@register
@dataclass
class Aspire(Policy):
    ema: float = 0.1  # weight of each verification in the decayed counts (memory ~10 cycles)
    prior: float = 0.8
    k_max: int = 0  # 0: the batcher's max_draft
    name = "aspire"
    default_draft_method = DraftMethod.STEP_REFRESH
    description = "per-request k from smoothed acceptance and batch-aware cost (ASPIRE)"

    def __post_init__(self):
        if not 0 < self.ema <= 1:
            raise ValueError("ema must be in (0, 1]")
        if not 0 <= self.prior < 1:
            raise ValueError("prior must be in [0, 1)")
        self.acc = AcceptanceEMA(self.ema, self.prior)

    def on_finish(self, rid):
        self.acc.drop(rid)

    def on_verify(self, ids, drafted, accepted):
        self.acc.update(ids, drafted, accepted)

    def targets(self, view: DecodeView) -> np.ndarray:
        a = self.acc.get(view.ids, view.committed)
        k_max = self.k_max or view.max_draft
        return best_k(self.ctx.cost, view, lambda ks: expected_tokens(a[:, None], ks[None, :]), k_max)
