"""`fixed-k`: each request verifies after exactly k drafts inside the mixed pass (SparseSpec style).

A request's first cycle after admission has `1 + id mod k` drafts so that, when many
requests start together (offline runs), their verifications spread over passes instead of landing
in the same one.
"""

from dataclasses import dataclass

import numpy as np

from .base import DecodeView, Policy
from .registry import register


@register
@dataclass
class FixedK(Policy):
    k: int = 8
    stagger: bool = True
    name = "fixed-k"
    description = "each request verifies after k drafts, phases staggered (SparseSpec)"

    def __post_init__(self):
        if self.k < 0:
            raise ValueError("k must be >= 0")
        self._first: set[int] = set()

    def on_admit(self, rid: int) -> None:
        self._first.add(rid)

    def on_finish(self, rid: int) -> None:
        self._first.discard(rid)

    def on_verify(self, ids, drafted, accepted) -> None:
        self._first.difference_update(ids.tolist())

    def longest_run(self, max_draft: int) -> int:
        return min(self.k, max_draft)  # staggered first runs are shorter

    def fast_plan(self, ahead, max_passes: int):
        if not ahead.ask():
            return None
        if self.k and ahead.max_draft and ahead.open:  # after a verification with drafts, every cycle is k
            return ahead.cycles(self.k, False, max_passes)
        return ahead.held(max_passes)

    def targets(self, view: DecodeView) -> np.ndarray:
        t = np.full(len(view.ids), self.k, np.int64)
        if self.stagger and self.k > 0 and self._first:
            first = np.fromiter((i in self._first for i in view.ids.tolist()), bool, len(view.ids))
            t = np.where(first & (view.drafted == 0), 1 + view.ids % self.k, t)
        return t
