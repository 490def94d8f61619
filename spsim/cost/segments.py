"""Pricing many decode passes in one call (`DecodeSegment`): the simulator's fast path, not part of
the shared `CostModel` protocol (the runtime never needs it).

`segment_cost(cost)` gives a `SegmentCost` for any cost model: the model itself if it prices
segments, a registered adapter for its type (the roofline's lookup tables), else `PerPass`, which
prices the segment's passes as a batch with the protocol's `times()`, so a measured profile works
in the simulator before anyone writes a fast path for it. Entry i of `segment_times(seg)` must equal what the step path pays for the
same pass, which prices one-pass segments through the same object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from spsim.plan import DraftMethod, PassPlan

from .batch import PlanBatch
from .roofline import RooflineCostModel

I64 = np.int64


@dataclass
class DecodeSegment:
    """`n` consecutive pure-decode passes over the same `r` requests (no prefill, no admissions).

    Per pass i and request j: `kind[i, j]` is 1 (draft), 2 (verify) or 0 (not in the pass: a
    synchronous batch's request waiting for the batch's verification), `query[i, j]` the query
    tokens (1 for a draft), `context[i, j]` the KV tokens before that pass, `draft_pos[i, j]` the
    provisional drafted tokens held before that pass (PassPlan.draft_pos for drafts; for a verify,
    query - 1). `budget`, `method`: the run's draft settings (one value each). A segment cost returns the n pass times from
    this in one call; entry i must equal what the step path pays for the same pass.
    """

    kind: np.ndarray  # (n, r) int8
    query: np.ndarray  # (n, r) int64
    context: np.ndarray  # (n, r) int64
    draft_pos: np.ndarray  # (n, r) int64
    budget: int
    method: int  # a DraftMethod code; verify-attn: passes verifying keep page scores

    DRAFT = 1
    VERIFY = 2
    IDLE = 0  # in no pass: a synchronous batch's request that drafted all its output can use

    @classmethod
    def plain(cls, context: list[int], n: int) -> "DecodeSegment":
        """n plain decode passes (every request verifies one token) from `context`."""
        r = len(context)
        ctx = np.asarray(context, I64) + np.arange(n, dtype=I64)[:, None]
        one = np.ones((n, r), I64)
        return cls(np.full((n, r), cls.VERIFY, np.int8), one, ctx, one - 1, 0, 0)

    @classmethod
    def from_plan(cls, plan: PassPlan) -> "DecodeSegment":
        """A one-pass segment from a plan without prefill, drafts first (tests use it)."""
        assert not len(plan.prefill_ids)
        nd, nv = len(plan.draft_ids), len(plan.verify_ids)
        kind = np.concatenate([np.full(nd, 1, np.int8), np.full(nv, 2, np.int8)])[None, :]
        query = np.concatenate([np.ones(nd, I64), plan.verify_query])[None, :]
        ctx = np.concatenate([plan.draft_context, plan.verify_context])[None, :]
        dpos = np.concatenate([plan.draft_pos, plan.verify_query - 1])[None, :]
        # the run's method, where it shows: its drafts, or verifications keeping page scores
        method = int(DraftMethod.VERIFY_ATTN) if plan.keep_scores else plan.draft_method if nd else 0
        return cls(kind, query, ctx, dpos, plan.draft_budget, method)

    def plans(self) -> list[PassPlan]:
        """Each pass as a plan (its requests numbered by column)."""
        out = []
        ids = np.arange(self.kind.shape[1], dtype=I64)
        for i in range(self.kind.shape[0]):
            d, v = self.kind[i] == self.DRAFT, self.kind[i] == self.VERIFY
            out.append(PassPlan(draft_ids=ids[d], draft_context=self.context[i][d], draft_pos=self.draft_pos[i][d],
                                draft_budget=self.budget, draft_method=self.method, verify_ids=ids[v],
                                verify_query=self.query[i][v], verify_context=self.context[i][v]))
        return out

    def drafting(self, draft: np.ndarray, q: np.ndarray) -> tuple[bool, int]:
        """`(has_draft, rows)` for table lookups: whether any pass drafts, and the table rows the
        segment reads (`q`: the verify query tokens, 0 where none)."""
        if not draft.any():
            return False, int(q.max()) + 1
        return True, max(int(q.max()), int(self.draft_pos.max())) + 1


class SegmentCost(Protocol):
    def segment_times(self, seg: DecodeSegment) -> np.ndarray:
        """Seconds of each of the `n` passes of a decode segment, in one vectorised call."""

    def decode_times(self, context: list[int], n: int) -> np.ndarray:
        """`segment_times` of n plain decode passes (every request verifies one token, no drafts)
        over requests with `context` KV tokens before the first pass: the commonest segment,
        priced without building its (n, r) arrays."""


ADAPTERS: dict[type, Callable[[object], SegmentCost]] = {}


def segment_cost(cost) -> SegmentCost:
    if hasattr(cost, "segment_times") and hasattr(cost, "decode_times"):
        return cost
    for cls in type(cost).__mro__:
        if cls in ADAPTERS:
            return ADAPTERS[cls](cost)
    return PerPass(cost)


class PerPass:
    """The generic fallback: the segment's passes priced as one batch (`CostModel.times`)."""

    def __init__(self, cost):
        self.cost = cost

    def segment_times(self, seg: DecodeSegment) -> np.ndarray:
        return np.asarray(self.cost.times(PlanBatch.of(seg.plans())), np.float64)

    def decode_times(self, context: list[int], n: int) -> np.ndarray:
        return self.segment_times(DecodeSegment.plain(context, n))


class RooflineSegments:
    """Segments priced from the roofline's lookup tables (bit-identical to its formulas)."""

    def __init__(self, cm: RooflineCostModel):
        self.cm = cm

    def segment_times(self, seg: DecodeSegment) -> np.ndarray:
        cm = self.cm
        kind, ctx = seg.kind, seg.context
        draft, verify = kind == DecodeSegment.DRAFT, kind == DecodeSegment.VERIFY
        q = np.where(verify, seg.query, 0)
        has_draft, rows = seg.drafting(draft, q)
        if not cm.tables_fit(int(ctx.max()) + 1, rows):
            return self.formula(seg)
        att = cm.verify_table()[ctx, q]
        if has_draft:
            att = np.where(draft, cm.draft_table(seg.budget, seg.method)[ctx, seg.draft_pos], att)
        tokens = q.sum(axis=1) + draft.sum(axis=1)
        return cm.overhead_table(int(tokens.max()))[tokens] + att.sum(axis=1)

    def decode_times(self, context: list[int], n: int) -> np.ndarray:
        """From slices of the q = 1 column: no (n, r) arrays. Below 8 requests numpy's row sum is
        a left fold (its pairwise sum starts at 8 terms), so slices added in order give the same
        bits."""
        cm = self.cm
        r = len(context)
        if not cm.tables_fit(max(context) + n, 2):
            return self.formula(DecodeSegment.plain(context, n))
        v = cm.verify_table()[:, 1]
        if r < 8:
            c = context[0]
            att = v[c:c + n]
            for c in context[1:]:
                att = att + v[c:c + n]
        else:
            att = v[np.asarray(context, np.int64) + np.arange(n, dtype=np.int64)[:, None]].sum(axis=1)
        return cm.overhead_table(r)[r] + att

    def formula(self, seg: DecodeSegment) -> np.ndarray:
        """segment_times without tables (the definition the tables reproduce)."""
        cm = self.cm
        kind, ctx = seg.kind, seg.context
        draft, verify = kind == DecodeSegment.DRAFT, kind == DecodeSegment.VERIFY
        q = np.where(verify, seg.query, 0)
        att = np.where(verify, cm.full_attn(ctx, q), 0.0)
        if draft.any():
            att = att + np.where(draft, cm.draft_attn(ctx, seg.budget, seg.method, seg.draft_pos), 0.0)
        tokens = q.sum(axis=1) + draft.sum(axis=1)
        return cm.overhead_vec(tokens, tokens) + att.sum(axis=1)


ADAPTERS[RooflineCostModel] = RooflineSegments
