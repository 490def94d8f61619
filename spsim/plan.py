"""The pass plan and its outcome: the contract between the scheduling brain and the two executors.

One `PassPlan` is one forward pass of the model. Every request in it appears in exactly one of
three groups, each a set of parallel numpy arrays (one entry per request):

- prefill chunks: `(request, tokens, context, last)`; `last`: the prompt's final chunk, which
  samples the first output token;
- drafting requests: `(request, context, draft position)`: one query token with sparse attention
  over `draft_budget` tokens (sink and recent pages included) of the `context` in the KV cache,
  chosen by `draft_method`; budget and method are the run's settings, one value per pass;
- verifying requests: `(request, query tokens = drafted + 1, context)`: full attention over the
  whole `context` plus a causal tail of `query` tokens. `query == 1` is a plain autoregressive
  decode step.

`context` is always the number of tokens already in the KV cache before this pass, not counting
provisional (drafted, not yet verified) tokens, which a request holds `drafted` of.

Many passes priced at once (the simulator's runs of decode passes, calibration's designs) are a
`spsim.cost.batch.PlanBatch`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar
from enum import IntEnum

import numpy as np

I64 = np.int64


class DraftMethod(IntEnum):
    """How a drafting request chooses the sparse KV it attends to: the one list both worlds
    implement (the runtime's selectors, the cost models' terms, the acceptance model's effects).

    Codes are stable (they appear in recorded accept events). Names on the command line use
    dashes: `static`, `verify-quest`, `step-layer`, `verify-attn`, `step-quest`.
    """

    STATIC = 0  # sink + recent window, fixed (StreamingLLM / MagicDec)
    VERIFY_QUEST = 1  # Quest page bounds scored with the first draft's query after each verification
    STEP_LAYER = 2  # every draft step, one designated layer attends in full; its scores pick the
    #                 other layers' pages (ASPIRE)
    VERIFY_ATTN = 3  # top pages by the attention the last verification paid (SparseSpec-L / PillarAttn)
    STEP_QUEST = 4  # Quest page bounds scored again at every draft step

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")

    @property
    def refresh(self) -> str:
        """When the selection changes: `never`, `verify` or `step`."""
        return {0: "never", 1: "verify", 3: "verify", 2: "step", 4: "step"}[int(self)]

    @classmethod
    def parse(cls, text: str) -> "DraftMethod":
        key = text.strip().lower().replace("_", "-")
        if key in _METHOD_ALIASES:
            return cls(_METHOD_ALIASES[key])
        names = ", ".join(m.label for m in cls)
        from .errors import SpecError

        raise SpecError(f"unknown draft-KV method {text!r} (known: {names}; old names: verify-refresh, step-refresh)")


# old spellings (earlier releases, recorded events, presets) -> codes
_METHOD_ALIASES = {m.name.lower().replace("_", "-"): int(m) for m in DraftMethod} | {
    "window": 0, "streaming": 0,
    "verify-refresh": 1, "verify": 1, "quest": 1,
    "step-refresh": 2, "step": 2, "aspire": 2,
    "pillar": 3, "attn": 3,
}


def _ints(a=()) -> np.ndarray:
    return np.asarray(a, dtype=I64)


# the run-wide draft settings' defaults, declared here once (ServingConfig, BatcherConfig and the
# policies read them)
DRAFT_BUDGET = 2048  # tokens
DRAFT_METHOD = DraftMethod.VERIFY_QUEST

_EMPTY = np.zeros(0, I64)
_EMPTY.flags.writeable = False


@dataclass
class PassPlan:
    """One forward pass. Request ids are the integer ids the batcher assigned (trace row index)."""

    prefill_ids: np.ndarray = field(default_factory=_ints)
    prefill_tokens: np.ndarray = field(default_factory=_ints)
    prefill_context: np.ndarray = field(default_factory=_ints)
    prefill_last: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # the prompt's last
    #   chunk (only that one samples a token)

    draft_ids: np.ndarray = field(default_factory=_ints)
    draft_context: np.ndarray = field(default_factory=_ints)
    draft_pos: np.ndarray = field(default_factory=_ints)  # drafts already held before this one (0-based)
    # the run's settings, one value for every draft of the pass
    draft_budget: int = DRAFT_BUDGET  # tokens; min(budget, context) are read
    draft_method: int = int(DRAFT_METHOD)  # a DraftMethod code

    verify_ids: np.ndarray = field(default_factory=_ints)
    verify_query: np.ndarray = field(default_factory=_ints)  # drafted + 1
    verify_context: np.ndarray = field(default_factory=_ints)
    # the run keeps its verifications' (and last prefill chunks') page scores for the next drafts'
    # selection (verify-attn): the attention kernel then writes a score per page, a slower pass
    keep_scores: bool = False

    # Outside the pass, before it: requests preempted since the last plan (free their KV, keep
    # their committed tokens: they are recomputed later as prefill), requests finished since the
    # last plan (forget them), and page ids the pool freed meanwhile (finished, preempted,
    # rejected draft tails, evicted or duplicate prefix blocks). Set by the batcher when there is
    # news; empty read-only class defaults otherwise (most plans have none: no per-plan arrays).
    preempted: ClassVar[np.ndarray] = _EMPTY
    released: ClassVar[np.ndarray] = _EMPTY
    freed_pages: ClassVar[np.ndarray] = _EMPTY

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
