"""A cost model that records each pass it prices: what `spsim validate` compares pass by pass and
what `--calibration-points` chooses its points from."""

from __future__ import annotations

import numpy as np


class RecordingCost:
    """The run's cost model, recording each pass the simulator prices. With the step path
    (`fast=False`) the simulator prices every pass with one `time()` call, in order: no segment
    pricing is offered (those attributes are hidden), so the generic per-pass adapter is used.
    Subclasses keep something else per pass by overriding `record`."""

    _HIDDEN = ("segment_times", "decode_times")

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

    def __getattr__(self, name):
        if name in RecordingCost._HIDDEN:
            raise AttributeError(name)
        return getattr(self.inner, name)
