"""`sync`: batch-synchronous speculation (MagicDec / Vegas style): every decode request drafts
together for k passes, then all verify together.

`k=0` is speculation off. With `k=-1` (auto) the batch's k is chosen at the start of each cycle
by expected goodput: the sum over requests of expected emitted tokens over the time of k draft
passes and one verification pass, priced by the cost model, for k in [0, k_max].
"""

from dataclasses import dataclass

import numpy as np

from .acceptance_ema import AcceptanceEMA
from .base import DecodeView, Policy, ema_looks, expected_tokens
from .registry import register


@register
@dataclass
class Sync(Policy):
    k: int = -1
    k_max: int = 12
    ema: float = 0.1  # weight of each verification in the decayed counts (memory ~10 cycles)
    prior: float = 0.8
    name = "sync"
    synchronous = True
    plans_ahead = False
    description = "batch-synchronous draft-then-verify with one global k (MagicDec)"

    def __post_init__(self):
        if self.k < -1:
            raise ValueError("k must be >= 0, or -1 for auto")
        self.acc = AcceptanceEMA(self.ema, self.prior)
        self.cycle_k = max(self.k, 0)

    def on_finish(self, rid):
        self.acc.drop(rid)

    def on_verify(self, ids, drafted, accepted):
        self.acc.update(ids, drafted, accepted)

    def cycle_target(self) -> int | None:
        return self.k if self.k >= 0 else None  # a fixed k: every cycle k drafts (or fewer, forced)

    def asked_cycle(self) -> int:
        """The k of the cycle in progress, once `targets` has answered on a pass: until the
        batch's verification, asking again answers d + 1 while every request holds fewer than
        k drafts, then d (all verify), and changes no state; a cycle of 0 is one plain pass.
        (An executor that advances many passes at once asks for a cycle's first pass only.)"""
        return self.cycle_k

    # relative margin by which k = 0 must win for `zero_run` to vouch for it: the vectorised
    # prices below agree with `_choose`'s to float rounding (~1e-15), not bit for bit, so a pass
    # nearer a tie is left to `targets` itself
    ZERO_MARGIN = 1e-9

    def zero_run(self, view: DecodeView, n: int) -> int | None:
        """Passes on which `_choose` would pick k = 0: its rates for every pass at once, with the
        exact acceptance estimates the looks would see; certain only by a margin."""
        if self.k >= 0:
            return n if self.k == 0 else 0
        r = len(view.ids)
        if r == 0 or any(view.drafted.tolist()):
            return None
        k_max = min(self.k_max, view.max_draft)
        if k_max == 0:
            return n
        cost = self.ctx.cost
        a = ema_looks(self.acc, view.ids, view.committed, n)  # (n, r)
        ks = np.arange(k_max + 1, dtype=np.int64)
        K, rows = len(ks), n * r
        ctx = (view.context[None, :] + np.arange(n, dtype=np.int64)[:, None]).reshape(rows, 1)
        d_m, v_m = cost.marginal(ctx.repeat(K, 1), np.tile(view.budget, n)[:, None].repeat(K, 1),
                                 np.tile(view.method, n)[:, None].repeat(K, 1), (ks + 1)[None, :].repeat(rows, 0))
        d_sum = d_m[:, 0].reshape(n, r).sum(axis=1)
        v_sum = v_m.reshape(n, r, K).sum(axis=1)
        over = np.array([cost.pass_overhead(r * (k + 1)) for k in ks.tolist()])
        t = ks * (cost.pass_overhead(r) + d_sum[:, None]) + over + v_sum
        rate = expected_tokens(a[:, :, None], ks).sum(axis=1) / t
        zero = rate[:, 1:].max(axis=1) < rate[:, 0] * (1.0 - self.ZERO_MARGIN)
        return n if zero.all() else int(np.argmin(zero))

    def skip_zero(self, view: DecodeView, n: int) -> None:
        if self.k < 0:
            ema_looks(self.acc, view.ids, view.committed, n, commit=True)
            self.cycle_k = 0

    def _choose(self, view: DecodeView) -> int:
        """k in 0..k_max with the best expected goodput. Per k: expected tokens summed over the
        batch, over k draft passes plus one verification priced by the cost model. Every k's
        figures in few calls (once per cycle, the policy's hot spot), the same floats as one
        call per k: rows of (k, request) grids are summed as the 1-D arrays were."""
        cost = self.ctx.cost
        k_max = min(self.k_max, view.max_draft)
        a = self.acc.get(view.ids, view.committed)
        n, K = len(view.ids), k_max + 1
        ks = np.arange(K, dtype=np.int64)
        tokens = expected_tokens(a[None, :].repeat(K, 0), ks[:, None].repeat(n, 1)).sum(axis=1)
        d_sum, v_sum = _marginal_rows(cost, view, K)
        over = cost.pass_overhead(n) + d_sum
        best, best_rate = 0, -1.0
        for k, tok, v in zip(ks.tolist(), tokens, v_sum):
            t = k * over + cost.pass_overhead(n * (k + 1)) + v
            if tok / t > best_rate:
                best, best_rate = k, tok / t
        return best

    def targets(self, view: DecodeView) -> np.ndarray:
        d = view.drafted
        if len(d) and d.max() == 0 and self.k < 0:
            self.cycle_k = self._choose(view)
        if len(d) == 0 or d.max() >= self.cycle_k:
            return d.copy()  # everyone verifies
        return d + 1


def _marginal_rows(cost, view: DecodeView, K: int) -> tuple:
    """(sum of the batch's draft costs, (K,) sums of its verify costs with queries 1..K), as K
    calls `cost.marginal(context, budget, method, full(n, k + 1))` give them. A cost model that
    prices small calls element by element in plain floats (`SCALAR_MAX`: the roofline's scalar
    twins) is asked for whole rows of the (k, request) grid at once, up to that many elements
    per call: the same floats, in fewer calls. Others are asked once per k."""
    n = len(view.ids)
    rows = getattr(cost, "SCALAR_MAX", 0) // n if n else 0
    if rows < 2:
        d_sum, v = None, []
        for k in range(K):
            d_m, v_m = cost.marginal(view.context, view.budget, view.method, np.full(n, k + 1))
            if d_sum is None:
                d_sum = d_m.sum()  # the same for every k (no draft term depends on the query)
            v.append(v_m.sum())
        return d_sum, v
    ctx, b, m = view.context.tolist(), view.budget.tolist(), view.method.tolist()
    d_sum, v = None, []
    for k0 in range(0, K, rows):
        kk = min(rows, K - k0)
        q = np.arange(k0 + 1, k0 + kk + 1, dtype=np.int64).repeat(n)
        d_m, v_m = cost.marginal(np.array(ctx * kk, np.int64), np.array(b * kk, np.int64),
                                 np.array(m * kk, np.int64), q)
        if d_sum is None:
            d_sum = d_m[:n].sum()
        v.extend(v_m.reshape(kk, n).sum(axis=1).tolist())
    return d_sum, v

