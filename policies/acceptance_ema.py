"""Per-request smoothed acceptance, learnt from verification outcomes (shared by policies)."""

from __future__ import annotations

import numpy as np


class AcceptanceEMA:
    """Exponential moving average of each request's per-token acceptance probability.

    One verification with d drafts and a accepted is a run of a successes ended by a failure (if
    a < d): its per-token estimate is a / (a + [a < d]).
    """

    def __init__(self, weight: float, prior: float):
        self.w, self.prior = weight, prior
        self.alpha: dict[int, float] = {}

    def get(self, ids: np.ndarray) -> np.ndarray:
        a, p = self.alpha, self.prior
        return np.fromiter((a.get(i, p) for i in ids.tolist()), np.float64, len(ids))

    def update(self, ids: np.ndarray, drafted: np.ndarray, accepted: np.ndarray) -> None:
        est = accepted / (accepted + (accepted < drafted))
        w, a, p = self.w, self.alpha, self.prior
        for i, e in zip(ids.tolist(), est.tolist()):
            a[i] = (1 - w) * a.get(i, p) + w * e

    def drop(self, rid: int) -> None:
        self.alpha.pop(rid, None)
