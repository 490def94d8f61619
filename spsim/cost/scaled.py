"""A cost model on a machine slower (or faster) than its profile's by one factor: every price, the
policies' estimates included, times `factor`.

Lent GPUs of one model differ by a few percent at the same clocks (calibration/machine.py: two
H100s ran the sweep's decode-step anchor 3 % apart). A validation on another machine than its
profile's can judge the model on that machine by this first-order correction (one factor, where
weights-, KV- and compute-bound passes may move a little differently).
"""

from __future__ import annotations


class ScaledCost:
    """`inner`'s prices times `factor` (> 0)."""

    def __init__(self, inner, factor: float):
        if not factor > 0:
            raise ValueError(f"a cost scale must be positive, got {factor!r}")
        self.inner, self.factor = inner, float(factor)
        self._tables: dict = {}

    def time(self, plan) -> float:
        return self.factor * float(self.inner.time(plan))

    def times(self, batch):
        return self.factor * self.inner.times(batch)

    def pass_overhead(self, *args, **kw) -> float:
        return self.factor * self.inner.pass_overhead(*args, **kw)

    def marginal(self, *args, **kw):
        d, v = self.inner.marginal(*args, **kw)
        return self.factor * d, self.factor * v

    def tables(self, budget: int, method: int, width: int, rows: int):
        key = (budget, method, width, rows)  # (the simulator asks per segment: scaled once)
        if key not in self._tables:
            t = self.inner.tables(budget, method, width, rows)
            self._tables[key] = None if t is None else tuple(self.factor * x for x in t)
        return self._tables[key]

    def spec_overhead(self, method: int) -> tuple[float, float, float, float]:
        return tuple(self.factor * x for x in self.inner.spec_overhead(method))

    @property
    def name(self) -> str:
        return f"{self.inner.name} x{self.factor:.4g}"

    def __getattr__(self, name):  # anything else the wrapped model offers
        return getattr(self.inner, name)
