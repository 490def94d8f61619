"""The cost-model contract: what a pass costs, in seconds. Both worlds use it.

Implementations register a profile kind (`spsim.cost.profile`): the analytic roofline (the
embedded default) and, from calibration, models fitted to GPU measurements. Policies receive one
to price their choices; the simulator uses it as its clock; calibration fits it through `times`.
`times` is the one pricing form: the simulator's runs of decode passes are batches too
(`PlanBatch.decode`, `PlanBatch.plain`), which a model with lookup tables prices from their grids.

Every member is declared here and every model has each one: a member that does not apply to a
model holds its neutral value (`None`, `False`, "none"), so callers read it plainly.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from spsim.models import ModelConfig
from spsim.plan import PassPlan

from .batch import PlanBatch


@runtime_checkable
class CostModel(Protocol):
    name: str
    """The model's kind, as profiles and run summaries name it ("roofline", "calibrated", ...)."""

    source: str | None
    """The profile file the model was loaded from (a shipped one), None where built in code."""

    info: dict
    """The profile's measurement metadata (errors, KV pages, points); empty for an analytic model."""

    overlapped: bool
    """Measured on a runtime that plans each pass while the previous one runs: the simulator then
    sees arrivals a pass later (simulator/replica.py). False for a model not measured so."""

    model: ModelConfig | None
    """The LLM the model prices (window, KV sizes); None where it prices none: the run's config says."""

    page_size: int | None
    """KV page size (tokens) the model prices; None where it prices none: the run's config says."""

    padding: str
    """How the measured runtime pads graphed passes, as priced (cost/padding.py's modes); "none":
    padding not priced."""

    def kv_capacity_pages(self, reserve_frac: float | None = None) -> int | None:
        """KV pages a replica holds on the model's GPU beside its weights (`reserve_frac`: the share
        of memory held back, else the default); None where the model knows no GPU: the caller
        sizes the pool from the run's config."""

    def time(self, plan: PassPlan) -> float:
        """Seconds for one forward pass, priced from its actual per-request composition."""

    def times(self, batch: PlanBatch) -> np.ndarray:
        """`time` of every pass of a batch in one call (equal to float rounding; a decode grid's
        entry i is what the simulator's step path pays for that pass, to the bit)."""

    def pass_overhead(self, num_tokens: int, prefill_tokens: int = 0) -> float:
        """Seconds of a pass with `num_tokens` decode tokens and no attention: weights, GEMMs, LM
        head, sampling, host scheduling (and TP communication). Shared by every request in the
        pass. `prefill_tokens`: a prefill chunk's tokens in the same pass (one logits row)."""

    def marginal(self, context: np.ndarray, budget: int, method: int,
                 query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per request, the seconds it adds to a pass (attention and its share of nothing else)
        when it drafts one token with the run's draft `budget` and `method`, and when it verifies
        `query` tokens. Cheap: cost-aware policies call it every pass."""

    def tables(self, budget: int, method: int, width: int, rows: int) -> tuple[np.ndarray, np.ndarray] | None:
        """`marginal`'s prices as lookup tables covering contexts below `width` and draft positions
        and verify queries below `rows`: `(draft[context, draft_pos], verify[context, query])`
        (verify[:, 0] is 0), the same floats `marginal` returns for them; None where the model has
        none (or they would be too large): the caller asks `marginal`."""

    def spec_overhead(self, method: int) -> tuple[float, float, float, float]:
        """Seconds a pass pays once because of speculation, beyond its requests' own costs: a pass
        holding drafts of `method`, one holding a run's first drafts (page selection), one
        verifying drafts, one both drafting and verifying. Cost-aware policies share these over
        the pass's requests, as they share `pass_overhead`."""

    def metadata(self) -> dict:
        """GPU, model config, dtypes, page size, versions, fit error: what a profile records."""
