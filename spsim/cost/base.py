"""The cost-model contract: what a pass costs, in seconds. Both worlds use it.

Implementations register a profile kind (`spsim.cost.profile`): the analytic roofline (the
embedded default) and, from calibration, models fitted to GPU measurements. Policies receive one
to price their choices; the simulator uses it as its clock; calibration fits it through `times`.
`times` is the one pricing form: the simulator's runs of decode passes are batches too
(`PlanBatch.decode`, `PlanBatch.plain`), which a model with lookup tables prices from their grids.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from spsim.plan import PassPlan

from .batch import PlanBatch


@runtime_checkable
class CostModel(Protocol):
    name: str

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
