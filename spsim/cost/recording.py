"""A cost model that records each pass it prices: what `spsim validate` compares pass by pass and
what `--calibration-points` chooses its points from."""

from __future__ import annotations

import numpy as np


def _inner(member: str) -> property:
    """The wrapped model's `member` (a value, or a bound method with its own signature)."""
    return property(lambda self: getattr(self.inner, member))


class RecordingCost:
    """The run's cost model, recording each pass the simulator prices, in order: every batch's
    passes are priced one `time()` call each (a decode grid as its plans). Subclasses keep
    something else per pass by overriding `record`."""

    def __init__(self, cost):
        self.inner = cost
        self.passes: list = []

    def time(self, plan) -> float:
        t = float(self.inner.time(plan))
        self.record(plan, t)
        return t

    def times(self, batch):
        """Each plan priced and recorded in order, as `time` does."""
        return np.array([self.time(p) for p in batch.plans])

    def record(self, plan, seconds: float) -> None:
        self.passes.append({"category": plan.category, "prefill_tokens": int(plan.prefill_tokens.sum()),
                            "drafts": len(plan.draft_ids), "verifies": len(plan.verify_ids),
                            "verify_tokens": int(plan.verify_query.sum()), "predicted_ms": seconds * 1e3})

    def __getattr__(self, name):  # anything else the wrapped model offers
        return getattr(self.inner, name)


# the CostModel protocol's members, the wrapped model's (time and times record, above); declared on
# the class, not only reached through __getattr__, so the protocol's checks see them
for _member in ("name", "source", "info", "overlapped", "model", "page_size", "padding", "kv_capacity_pages",
                "pass_overhead", "marginal", "tables", "spec_overhead", "metadata"):
    setattr(RecordingCost, _member, _inner(_member))
del _member
