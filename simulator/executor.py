"""The simulated executor: time from a cost model, outcomes from an acceptance model.

`execute(plan)` is the same contract the GPU executor fulfils with a real forward pass.
"""

from __future__ import annotations

import numpy as np

from spsim.cost import CostModel
from spsim.plan import Outcome, PassPlan
from spsim.policies.request import RequestTable


class SimExecutor:
    def __init__(self, cost: CostModel, acceptance, table: RequestTable, want_entropy: bool):
        self.cost = cost
        self.acc = acceptance
        self.t = table
        self.want_entropy = want_entropy

    def execute(self, plan: PassPlan, decode_segment=None) -> Outcome:
        """`decode_segment`: the same plan as a one-pass DecodeSegment (pure decode plans are
        priced through `segment_times`, exactly as the fast path prices them)."""
        if decode_segment is not None:
            elapsed = float(self.cost.segment_times(decode_segment)[0])
        else:
            elapsed = float(self.cost.time(plan))
        return Outcome(elapsed, self.entropy(plan), self.verify(plan.verify_ids, plan.verify_query - 1))

    def entropy(self, plan: PassPlan) -> np.ndarray:
        d = plan.draft_ids
        if not self.want_entropy or len(d) == 0:
            return np.full(len(d), np.nan)
        return self.acc.draft_entropy(d, self.t.committed[d], plan.draft_pos, plan.draft_context,
                                      plan.draft_budget, plan.draft_method)

    def verify(self, ids: np.ndarray, drafted: np.ndarray, budget: int | None = None,
               method: int | None = None) -> np.ndarray:
        acc = np.zeros(len(ids), np.int64)
        spec = drafted > 0
        if any(spec.tolist()):  # numpy's any() costs ~2 us; batches are small
            v = ids[spec]
            b = self._budget[:len(v)] if budget is None else np.full(len(v), budget, np.int64)
            m = self._method[:len(v)] if method is None else np.full(len(v), method, np.int64)
            acc[spec] = self.acc.verify(v, self.t.committed[v], drafted[spec], self.t.ctx[v], b, m)
        return acc

    def configure(self, budget: int, method: int) -> None:
        self.budget, self.method = budget, method
        # read-only per-request constants, sliced for each call instead of made
        self._budget = np.full(len(self.t.output), budget, np.int64)
        self._method = np.full(len(self.t.output), method, np.int64)
        self._budget.flags.writeable = self._method.flags.writeable = False
