"""`oracle`: clairvoyant draft lengths. Before each cycle it asks the simulator's acceptance model
how many of its next drafts verification would accept (outcomes are keyed by request and output
position, so asking changes nothing), then applies ASPIRE's rate rule to those exact counts: it
never drafts a token that will be rejected unless drafting on still pays. A reference point for
what any draft-length rule could gain (marked as such in reports), not a guarantee: it optimises
each request's own rate, not the batch's. Simulator only, or the GPU runtime with simulated
acceptance."""

from dataclasses import dataclass

import numpy as np

from spsim.plan import DraftMethod

from .aspire import RatePlanner
from .base import DecodeView
from .registry import register


@register
@dataclass
class Oracle(RatePlanner):
    k_max: int = 0
    name = "oracle"
    oracle = True
    default_draft_method = DraftMethod.STEP_LAYER
    description = "reference: ASPIRE's rule with the exact accepted counts (simulator only)"
    plain_hold = 1  # it knows when the next draft would be accepted: look again every token

    def targets(self, view: DecodeView) -> np.ndarray:
        acc = self.ctx.acceptance
        if acc is None:
            raise RuntimeError("the oracle policy needs the simulator's acceptance model")
        k_max = self.k_max or view.max_draft
        # accepted drafts out of k_max = where the first rejection would fall
        first_reject = acc.verify(view.ids, view.committed, np.full(len(view.ids), k_max, np.int64),
                                  view.context, view.budget, view.method)
        return self.plan(view, lambda ks: np.minimum(ks[None, :], first_reject[:, None]) + 1.0, k_max)

    def fast_plan(self, ahead, max_passes: int):
        if not ahead.ask():
            return None
        if ahead.max_draft and ahead.open and ahead.any_target():
            # `targets` reads keyed outcomes and the cost model row by row and changes no state:
            # rows of later passes may be asked early and in any grouping
            return ahead.cycles(0, False, max_passes, ask=ahead.ask_rows)
        return ahead.held(max_passes)
