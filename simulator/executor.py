"""The simulated executor: time from a cost model, outcomes from an acceptance model.

`execute(plan)` is the same contract the GPU executor fulfils with a real forward pass. A plan
with no prefill is priced as a one-pass segment (`one_pass`), exactly as the fast path prices its
passes, so both paths give bit-identical times.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from spsim.cost.batch import PlanBatch
from spsim.plan import Outcome, PassPlan
from spsim.policies.request import RequestTable



class SimExecutor:
    def __init__(self, cost, acceptance, table: RequestTable, want_entropy: bool, budget: int, method: int,
                 one_pass: Callable[[PassPlan], PlanBatch]):
        self.cost = cost
        self.acc = acceptance
        self.t = table
        self.want_entropy = want_entropy
        self.one_pass = one_pass
        self.budget, self.method = budget, method  # the run's draft settings

    def execute(self, plan: PassPlan) -> Outcome:
        if len(plan.prefill_ids):
            elapsed = float(self.cost.time(plan))
        else:
            elapsed = float(self.cost.times(self.one_pass(plan))[0])
        return Outcome(elapsed, self.entropy(plan), self.verify(plan.verify_ids, plan.verify_query - 1))

    def entropy(self, plan: PassPlan) -> np.ndarray:
        d = plan.draft_ids
        if not self.want_entropy or len(d) == 0:
            return np.full(len(d), np.nan)
        return self.acc.draft_entropy(d, self.t.committed[d], plan.draft_pos, plan.draft_context, self.budget,
                                      self.method)

    def verify(self, ids: np.ndarray, drafted: np.ndarray) -> np.ndarray:
        acc = np.zeros(len(ids), np.int64)
        spec = drafted > 0
        if any(spec.tolist()):  # numpy's any() costs ~2 us; batches are small
            v = ids[spec]
            acc[spec] = self.acc.verify(v, self.t.committed[v], drafted[spec], self.t.ctx[v], self.budget,
                                        self.method)
        return acc
