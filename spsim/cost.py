"""The cost-model contract: what a pass costs, in seconds. Both worlds use it.

Implementations: `spsim.simulator.cost.RooflineCostModel` (analytic, the embedded default) and the
calibrated model fitted from GPU measurements (`spsim.calibration`). Policies receive one to price
their choices; the simulator uses it as its clock.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .plan import DecodeSegment, PassPlan


@runtime_checkable
class CostModel(Protocol):
    name: str

    def time(self, plan: PassPlan) -> float:
        """Seconds for one forward pass, priced from its actual per-request composition."""

    def segment_times(self, seg: DecodeSegment) -> np.ndarray:
        """Seconds of each of the `n` passes of a decode segment, in one vectorised call."""

    def decode_times(self, context: list[int], n: int) -> np.ndarray:
        """`segment_times` of n plain decode passes (every request verifies one token, no drafts)
        over requests with `context` KV tokens before the first pass: the simulator's commonest
        segment, priced without building its (n, r) arrays."""

    def pass_overhead(self, num_tokens: int, prefill_tokens: int = 0) -> float:
        """Seconds of a pass with `num_tokens` decode tokens and no attention: weights, GEMMs, LM
        head, sampling, host scheduling (and TP communication). Shared by every request in the
        pass. `prefill_tokens`: a prefill chunk's tokens in the same pass (one logits row)."""

    def marginal(self, context: np.ndarray, budget: np.ndarray, method: np.ndarray,
                 query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per request, the seconds it adds to a pass (attention and its share of nothing else)
        when it drafts one token, and when it verifies `query` tokens. Cheap: cost-aware policies
        call it every pass."""

    def metadata(self) -> dict:
        """GPU, model config, dtypes, page size, versions, fit error: what a profile records."""
