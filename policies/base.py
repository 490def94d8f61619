"""What a speculation policy sees and decides.

Each pass the batcher hands the policy a read-only, array-shaped view of the decode requests that
need a decision and the policy answers, per request, a *target*: the number of drafted tokens at
which that request verifies. `target <= drafted` means verify now; `target == drafted + 1` means
draft one more; `target == 0` is plain autoregressive decoding (speculation off).

A policy with `plans_ahead = True` promises its targets hold until that request's next
verification with drafts, or until the replica's batch changes (an admission or a finish): the
batcher asks again only then, which lets the simulator advance many passes between events. A
zero target (no speculation) produces no verification with drafts, so it holds for
`hold(view, targets)` tokens instead (`plain_hold` unless the policy says otherwise); then the
policy is asked again (otherwise one "speculation does not pay" answer would stick until the
batch changes). A policy with `plans_ahead = False` is asked for every
decode request every pass.

A policy is one dataclass: its fields are its spec parameters (`fixed-k:k=8`), validated in
`__post_init__`. Add one by writing the class and decorating it with `@register`; it runs in the
simulator pass by pass until it also says how to plan many passes at once (`fast_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from spsim.cost import CostModel
from spsim.plan import DRAFT_METHOD, DraftMethod


@dataclass
class DecodeView:
    """Decode requests needing a decision this pass (parallel arrays, one entry per request, and
    the run's draft settings)."""

    ids: np.ndarray  # int64 request ids
    context: np.ndarray  # KV tokens (prompt + committed)
    drafted: np.ndarray  # provisional drafts held since the last verification
    remaining: np.ndarray  # output tokens still to emit
    committed: np.ndarray  # output tokens emitted so far (the next draft's output position)
    budget: int  # the run's sparse draft budget (tokens)
    method: int  # the run's DraftMethod code
    last_entropy: np.ndarray  # entropy of each request's latest draft (NaN if none)
    sum_entropy: np.ndarray  # sum of entropies of the drafts held
    num_decode: int  # decode requests in the batch (including those not in this view)
    prefill_tokens: int  # prefill tokens the pass carries (the chunks about to run; 0 in segments)
    max_draft: int  # the batcher forces a verify at this many drafts


@dataclass
class PolicyContext:
    """What a policy is bound to once, before the run."""

    cost: CostModel
    acceptance: object | None = None  # only for policies with `oracle = True`


class Policy:
    name: ClassVar[str] = ""
    synchronous: ClassVar[bool] = False  # never mixes drafting and verifying requests in one pass
    plans_ahead: ClassVar[bool] = True
    plain_hold: ClassVar[int] = 8  # tokens a zero target holds before the policy is asked again
    needs_entropy: ClassVar[bool] = False
    oracle: ClassVar[bool] = False  # may ask the simulator's acceptance model for outcomes
    speculative: ClassVar[bool] = True
    default_draft_method: ClassVar[DraftMethod] = DRAFT_METHOD
    description: ClassVar[str] = ""

    def bind(self, ctx: PolicyContext) -> None:
        self.ctx = ctx

    def on_admit(self, rid: int) -> None:
        pass

    def on_finish(self, rid: int) -> None:
        pass

    def on_verify(self, ids: np.ndarray, drafted: np.ndarray, accepted: np.ndarray) -> None:
        """Outcome of verifications with drafts (parallel arrays)."""

    def targets(self, view: DecodeView) -> np.ndarray:
        raise NotImplementedError

    def hold(self, view: DecodeView, targets: np.ndarray) -> np.ndarray | int:
        """Tokens a zero target holds before this policy is asked again (plans-ahead policies)."""
        return self.plain_hold

    def longest_run(self, max_draft: int) -> int:
        """The most drafts this policy lets a request hold before it verifies (the batcher forces
        a verification at `max_draft`): what the runtime's shape rule sizes verifications for."""
        return max_draft

    # ---- for executors that advance many passes at once (the simulator's fast path). A policy
    # planning ahead stays exact: its plan is what asking it pass by pass would do.
    def fast_plan(self, ahead, max_passes: int):
        """The next passes (at most max_passes) as one plan, made with the executor's planners
        (`ahead`: the simulator's `FastPath`, whose `held`, `cycles`, `zero`, `stretch`, ...
        each state what they assume of the policy), or None: the executor plans pass by pass.
        Called with every running request decoding and no prefill in progress. The default
        plans nothing ahead, so a policy that is only `targets` runs unchanged."""
        return None

    def zero_run(self, view: DecodeView, n: int) -> int | None:
        """For a policy asked every pass, when no request in `view` holds drafts: on how many
        consecutive passes from this one (at most n) it would answer 0 for every request, if each
        pass commits one token to each (context and committed + 1, remaining - 1) and nothing
        else changes (batch, prefill load, no outcomes). Changes no state. None: cannot tell."""
        return None

    def skip_zero(self, view: DecodeView, n: int) -> None:
        """Leave the state as after being asked on the n passes `zero_run` described."""

    @property
    def spec(self) -> str:
        from dataclasses import fields

        params = ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))
        return f"{self.name}:{params}" if params else self.name


def spec_shares(cost, view: "DecodeView", width: int = 0):
    """Speculation's once-per-pass seconds (`CostModel.spec_overhead`) as one decode request's
    share, the way cost-aware policies share `pass_overhead`: (per draft, per verification of
    drafts), or with `width` the verification's as a row by drafts held 0..width-1 (0 at none).
    A pass drafts beside verifications (mixed) unless the request is alone; its first draft
    selects pages; its verification checks drafts."""
    nd = max(view.num_decode, 1)
    dp, fp, sp, mx = cost.spec_overhead(view.method)
    d, v = (dp + (mx if nd > 1 else 0.0)) / nd, (fp + sp) / nd
    if not width:
        return d, v
    row = np.full(width, v)
    row[0] = 0.0
    return d, row


def expected_tokens(alpha: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Tokens a verification emits after k drafts when each is accepted with prob alpha
    independently: accepted prefix plus the target token, sum_{i=0..k} alpha^i."""
    alpha = np.minimum(np.maximum(alpha, 0.0), 0.999999)  # np.clip, without its ~3 us wrapper
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def ema_looks(acc, ids: np.ndarray, pos: np.ndarray, n: int, commit: bool = False) -> np.ndarray:
    """(n, r) acceptance estimates that `acc.get(ids, pos + i)` (an AcceptanceEMA) returns on n
    consecutive looks i = 0..n-1 without outcomes in between, computed as those looks would, bit
    for bit; with `commit`, the estimator's state is left as after them."""
    c, seen, keep, strength = acc.counts, acc.seen, acc.keep, acc.strength
    ps, pt = acc.pop
    default = ps / pt
    out = np.empty((n, len(ids)))
    for j, (i, p) in enumerate(zip(ids.tolist(), pos.tolist())):
        x = c.get(i)
        if not x:
            out[:, j] = default
            if commit:
                seen[i] = p + n - 1
            continue
        p0 = seen.get(i)
        x0, x1 = x
        col = []
        for q in range(p, p + n):
            if p0 is not None and q > p0:
                w = keep ** (q - p0)
                x0 = w * x0 + (1.0 - w) * default * strength
                x1 = w * x1 + (1.0 - w) * strength
            p0 = q
            col.append(x0 / x1)
        out[:, j] = col
        if commit:
            x[0], x[1] = x0, x1
            seen[i] = p + n - 1
    return out
