"""The pass plan and its outcome: the contract between the scheduling brain and the two executors.

One `PassPlan` is one forward pass of the model. Every request in it appears in exactly one of
three groups, each a set of parallel numpy arrays (one entry per request):

- prefill chunks: `(request, tokens, context)`;
- drafting requests: `(request, context, draft-KV method, budget)`: one query token with sparse
  attention over `budget` tokens (sink and recent pages included) of the `context` in the KV cache;
- verifying requests: `(request, query tokens = drafted + 1, context)`: full attention over the
  whole `context` plus a causal tail of `query` tokens. `query == 1` is a plain autoregressive
  decode step.

`context` is always the number of tokens already in the KV cache before this pass, not counting
provisional (drafted, not yet verified) tokens, which a request holds `drafted` of.

`DecodeSegment` describes many consecutive passes over the same decode requests, with no prefill;
cost models price all of them in one vectorised call, which is how the simulator advances many
passes between events without one Python step per pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

I64 = np.int64


class DraftMethod(IntEnum):
    """How a drafting request chooses the sparse KV it attends to."""

    STATIC = 0  # sink + recent window fixed at prefill (StreamingLLM / MagicDec)
    VERIFY_REFRESH = 1  # top pages re-selected at each verification (SparseSpec / Quest)
    STEP_REFRESH = 2  # re-selected every draft step through one full-attention layer (ASPIRE)

    @classmethod
    def parse(cls, text: str) -> "DraftMethod":
        key = text.strip().lower().replace("-", "_")
        aliases = {"static": cls.STATIC, "window": cls.STATIC, "streaming": cls.STATIC,
                   "verify_refresh": cls.VERIFY_REFRESH, "verify": cls.VERIFY_REFRESH, "quest": cls.VERIFY_REFRESH,
                   "step_refresh": cls.STEP_REFRESH, "step": cls.STEP_REFRESH, "aspire": cls.STEP_REFRESH}
        if key not in aliases:
            from .errors import SpecError

            raise SpecError(f"unknown draft-KV method {text!r} (static, verify-refresh, step-refresh, auto)")
        return aliases[key]


def _ints(a=()) -> np.ndarray:
    return np.asarray(a, dtype=I64)


@dataclass
class PassPlan:
    """One forward pass. Request ids are the integer ids the batcher assigned (trace row index)."""

    prefill_ids: np.ndarray = field(default_factory=_ints)
    prefill_tokens: np.ndarray = field(default_factory=_ints)
    prefill_context: np.ndarray = field(default_factory=_ints)

    draft_ids: np.ndarray = field(default_factory=_ints)
    draft_context: np.ndarray = field(default_factory=_ints)
    draft_budget: np.ndarray = field(default_factory=_ints)  # tokens; min(budget, context) are read
    draft_method: np.ndarray = field(default_factory=_ints)  # DraftMethod codes
    draft_pos: np.ndarray = field(default_factory=_ints)  # drafts already held before this one (0-based)

    verify_ids: np.ndarray = field(default_factory=_ints)
    verify_query: np.ndarray = field(default_factory=_ints)  # drafted + 1
    verify_context: np.ndarray = field(default_factory=_ints)

    @property
    def num_tokens(self) -> int:
        """Tokens through the linear layers this pass."""
        return int(self.prefill_tokens.sum() + len(self.draft_ids) + self.verify_query.sum())

    @property
    def num_requests(self) -> int:
        return len(self.prefill_ids) + len(self.draft_ids) + len(self.verify_ids)

    @property
    def category(self) -> str:
        """`prefill` if any prefill chunk, else `mixed`, `draft` (pure draft) or `verify` (pure verify)."""
        if len(self.prefill_ids):
            return "prefill"
        if len(self.draft_ids) and len(self.verify_ids):
            return "mixed"
        return "draft" if len(self.draft_ids) else "verify"

    def is_empty(self) -> bool:
        return self.num_requests == 0


@dataclass
class Outcome:
    """What executing a plan produced. Arrays align with the plan's groups."""

    elapsed_s: float
    draft_entropy: np.ndarray  # float, one per draft request: entropy of the token it drafted
    accepted: np.ndarray  # int, one per verify request: accepted drafts (the target token not counted)


@dataclass
class DecodeSegment:
    """`n` consecutive pure-decode passes over the same `r` requests (no prefill, no admissions).

    Per pass i and request j: `kind[i, j]` is 1 (draft) or 2 (verify), `query[i, j]` the query
    tokens (1 for a draft), `context[i, j]` the KV tokens before that pass, `draft_pos[i, j]` the
    provisional drafted tokens held before that pass (PassPlan.draft_pos for drafts; for a verify,
    query - 1). `budget`, `method` are per request. A cost model returns the n pass times from this
    in one call; entry i must equal `time()` of the equivalent one-pass plan.
    """

    kind: np.ndarray  # (n, r) int8
    query: np.ndarray  # (n, r) int64
    context: np.ndarray  # (n, r) int64
    draft_pos: np.ndarray  # (n, r) int64
    budget: np.ndarray  # (r,) int64
    method: np.ndarray  # (r,) int64

    DRAFT = 1
    VERIFY = 2

    @classmethod
    def from_plan(cls, plan: PassPlan) -> "DecodeSegment":
        """A one-pass segment from a plan without prefill (the general case, used by tests)."""
        assert not len(plan.prefill_ids)
        nd, nv = len(plan.draft_ids), len(plan.verify_ids)
        kind = np.concatenate([np.full(nd, 1, np.int8), np.full(nv, 2, np.int8)])[None, :]
        query = np.concatenate([np.ones(nd, I64), plan.verify_query])[None, :]
        ctx = np.concatenate([plan.draft_context, plan.verify_context])[None, :]
        dpos = np.concatenate([plan.draft_pos, plan.verify_query - 1])[None, :]
        budget = np.concatenate([plan.draft_budget, np.zeros(nv, I64)])
        method = np.concatenate([plan.draft_method, np.zeros(nv, I64)])
        return cls(kind, query, ctx, dpos, budget, method)
