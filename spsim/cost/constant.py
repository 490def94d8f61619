"""A cost model where every pass takes the same time: for hand-checkable tests and debugging."""

from __future__ import annotations

import numpy as np

from spsim.plan import PassPlan


class ConstantCostModel:
    name = "constant"
    source: str | None = None
    overlapped = False
    padding = "none"
    model = None  # prices no model or GPU: the run's config sizes its KV pool
    page_size = None

    def __init__(self, seconds_per_pass: float = 1e-3, draft_fraction: float = 0.5):
        self.c = float(seconds_per_pass)
        self.f = float(draft_fraction)
        self.info: dict = {}

    def kv_capacity_pages(self, reserve_frac: float | None = None) -> None:
        return None  # no GPU: the caller sizes the pool from the run's config

    def time(self, plan: PassPlan) -> float:
        return self.c

    def pass_overhead(self, num_tokens: int, prefill_tokens: int = 0) -> float:
        return self.c  # every pass, prefill or not

    def times(self, batch) -> np.ndarray:
        return np.full(batch.n, self.c)

    def tables(self, budget: int, method: int, width: int, rows: int) -> None:
        return None  # marginal's prices depend on nothing a table would index

    def marginal(self, context, budget, method, query):
        n = len(context)
        return np.full(n, self.c * self.f * 1e-3), np.full(n, self.c * 1e-3) * np.asarray(query, float)

    def spec_overhead(self, method: int) -> tuple[float, float, float, float]:
        return 0.0, 0.0, 0.0, 0.0

    def metadata(self) -> dict:
        return {"name": self.name, "seconds_per_pass": self.c}
