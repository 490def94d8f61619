"""Many passes as one batch: what `CostModel.times` prices in one call.

Each group's requests of every pass sit in flat arrays with the index of their pass (`pre_of`,
`dr_of`, `ver_of`), so a term per request is one vector formula and a term per pass one
`np.bincount` or `np.maximum.at` over the pass index. The run's draft budget and method are one
value per pass (`PassPlan.draft_budget`, `draft_method`), repeated here for each draft so that a
batch of passes of different settings (calibration's designs) prices alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spsim.plan import DraftMethod, PassPlan


@dataclass
class PlanBatch:
    """Many plans as flat arrays (each group's requests, with the index of their plan)."""

    n: int
    pre_of: np.ndarray
    pre_ctx: np.ndarray
    pre_q: np.ndarray
    dr_of: np.ndarray
    dr_ctx: np.ndarray
    dr_budget: np.ndarray  # each draft's plan's budget and method (one per plan, repeated)
    dr_method: np.ndarray
    dr_pos: np.ndarray
    ver_of: np.ndarray
    ver_ctx: np.ndarray
    ver_q: np.ndarray
    tokens: np.ndarray
    logits: np.ndarray
    has_prefill: np.ndarray
    has_draft: np.ndarray
    keep_scores: np.ndarray | None = None  # PassPlan.keep_scores of each plan
    plans: list | None = None
    _ratios: dict | None = None

    def keeps(self) -> np.ndarray:
        """Plans whose pass keeps page scores (verify-attn runs, or drafts of that method beside
        them): those with a verification or a prefill chunk."""
        n = self.n
        va = np.bincount(self.dr_of[self.dr_method == DraftMethod.VERIFY_ATTN], minlength=n) > 0
        if self.keep_scores is not None:
            va = va | self.keep_scores
        return va & ((np.bincount(self.ver_of, minlength=n) > 0) | self.has_prefill)

    def work_ratios(self, model) -> tuple[np.ndarray, np.ndarray]:
        """`plan_work_ratio` of every plan: its launch's, its split prefill chunks' (cached: they
        depend on no fitted constant)."""
        P = model.p
        key = (model.group, model.model.kv_heads // model.tp, model.page_size, P.attn_sms, P.attn_item_tokens,
               P.prefill_split)
        if self._ratios is None:
            self._ratios = {}
        r = self._ratios.get(key)
        if r is None:
            r = self._ratios[key] = np.array([model.plan_work_ratio(p) for p in self.plans]).reshape(-1, 2).T
        return r[0], r[1]

    def split_prefill(self, model) -> np.ndarray:
        """`CalibratedCostModel.split_prefill` of every prefill chunk (a mask over `pre_of`)."""
        if not model.p.prefill_split or not len(self.pre_of):
            return np.zeros(len(self.pre_of), bool)
        from .calibrated import TILES  # the calibrated model's rule (it alone splits prefill)

        tall = model.tile_class(self.pre_q) == len(TILES) - 1
        n = self.n
        n_req = np.bincount(self.pre_of, minlength=n) + np.bincount(self.dr_of, minlength=n) + \
            np.bincount(self.ver_of, minlength=n)
        return tall & (np.bincount(self.pre_of[tall], minlength=n) < n_req)[self.pre_of]

    @classmethod
    def of(cls, plans: list[PassPlan]) -> "PlanBatch":
        cat = lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64)  # noqa: E731
        idx = lambda f: cat([np.full(len(f(p)), i) for i, p in enumerate(plans)])  # noqa: E731
        n_pre = np.array([len(p.prefill_ids) for p in plans], np.int64)
        n_dr = np.array([len(p.draft_ids) for p in plans], np.int64)
        ver_tok = np.array([int(p.verify_query.sum()) for p in plans], np.int64)
        pre_tok = np.array([int(p.prefill_tokens.sum()) for p in plans], np.int64)
        return cls(
            len(plans), idx(lambda p: p.prefill_ids), cat([p.prefill_context for p in plans]),
            cat([p.prefill_tokens for p in plans]), idx(lambda p: p.draft_ids),
            cat([p.draft_context for p in plans]), np.repeat([p.draft_budget for p in plans], n_dr).astype(np.int64),
            np.repeat([p.draft_method for p in plans], n_dr).astype(np.int64), cat([p.draft_pos for p in plans]),
            idx(lambda p: p.verify_ids), cat([p.verify_context for p in plans]), cat([p.verify_query for p in plans]),
            tokens=pre_tok + n_dr + ver_tok, logits=n_pre + n_dr + ver_tok, has_prefill=n_pre > 0,
            has_draft=n_dr > 0, keep_scores=np.array([bool(p.keep_scores) for p in plans], bool), plans=list(plans))
