"""`sync`: batch-synchronous speculation (MagicDec / Vegas style): every decode request drafts
together for k passes, then all verify together.

`k=0` is speculation off. With `k=-1` (auto) the batch's k is chosen at the start of each cycle
by expected goodput: the sum over requests of expected emitted tokens over the time of the cycle's
draft passes and one verification pass, priced by the cost model, for k in [0, k_max], with the
batcher's rule at a request's end (a request drafts at most remaining - 1 tokens and sits the
cycle's later draft passes out: `Batcher._sync_verify`, docs/policies.md).
"""

from dataclasses import dataclass

import numpy as np

from .acceptance_ema import AcceptanceEMA
from .base import DecodeView, Policy, ema_looks, expected_tokens
from .registry import register
from .sync_ahead import sync_cycles


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

    def longest_run(self, max_draft: int) -> int:
        return min(self.k, max_draft) if self.k >= 0 else max_draft  # a fixed k: every cycle k drafts or fewer

    def __post_init__(self):
        if self.k < -1:
            raise ValueError("k must be >= 0, or -1 for auto")
        self.acc = AcceptanceEMA(self.ema, self.prior)
        self.cycle_k = max(self.k, 0)

    def on_finish(self, rid):
        self.acc.drop(rid)

    def on_verify(self, ids, drafted, accepted):
        self.acc.update(ids, drafted, accepted)

    def fast_plan(self, ahead, max_passes: int):
        if self.k > 0 and ahead.max_draft and ahead.open:  # a fixed k: every cycle k drafts (or fewer, forced)
            return ahead.cycles(self.k, True, max_passes)
        if not ahead.max_draft:
            return None
        if ahead.zero_ok:  # tried only after a cycle of 0 drafts: while it speculates it fails
            sp = ahead.zero(max_passes)
            if sp is not None:
                return sp
            ahead.zero_ok = False
        # asked for the cycle's first pass (which always runs) as the step path would: until the
        # batch's verification, asking again answers d + 1 while every request holds fewer than
        # cycle_k drafts, then d (all verify), and changes no state; a cycle of 0 is one plain pass
        if not ahead.ask():
            return None
        if self.cycle_k == 0:
            ahead.zero_ok = True
        elif ahead.open:
            return sync_cycles(self, ahead, self.cycle_k, max_passes)
        # (requests waiting for pages: a verification's freed pages may admit one, so one cycle)
        return ahead.cycles(self.cycle_k, True, max_passes, rounds=1)

    # relative margin by which k = 0 must win for `zero_run` to vouch for it: `zero_run` prices
    # every pass at once with (pass, request, k) arrays and `_choose` one pass's (1, request, k)
    # slice of the same arithmetic; reductions over other shapes may round differently (~1e-15),
    # so a pass nearer a tie is left to `targets` itself
    ZERO_MARGIN = 1e-9

    def zero_run(self, view: DecodeView, n: int) -> int | None:
        """Passes on which `_choose` would pick k = 0: its rates for every pass at once, with the
        exact acceptance estimates the looks would see (pass i: contexts + i, remaining - i);
        certain only by a margin."""
        if self.k >= 0:
            return n if self.k == 0 else 0
        r = len(view.ids)
        if r == 0 or any(view.drafted.tolist()):
            return None
        k_max = min(self.k_max, view.max_draft)
        if k_max == 0:
            return n
        a = ema_looks(self.acc, view.ids, view.committed, n)  # (n, r)
        step = np.arange(n, dtype=np.int64)[:, None]
        rate = self._rates(a, view.context[None, :] + step, view.remaining[None, :] - step, view, k_max)
        zero = rate[:, 1:].max(axis=1) < rate[:, 0] * (1.0 - self.ZERO_MARGIN)
        return n if zero.all() else int(np.argmin(zero))

    def skip_zero(self, view: DecodeView, n: int) -> None:
        if self.k < 0:
            ema_looks(self.acc, view.ids, view.committed, n, commit=True)
            self.cycle_k = 0

    def _choose(self, view: DecodeView, acc: AcceptanceEMA | None = None) -> int:
        """k in 0..k_max with the best expected goodput (once per cycle: the policy's hot spot).
        `acc`: another estimator to look with (`choose_ahead`), else the policy's own."""
        k_max = min(self.k_max, view.max_draft)
        a = (self.acc if acc is None else acc).get(view.ids, view.committed)
        if len(a) < 8 and k_max:
            k = self._choose_small(a, view, k_max)
            if k is not None:
                return k
        rate = self._rates(a[None, :], view.context[None, :], view.remaining[None, :], view, k_max)[0]
        return int(np.argmax(rate))  # the first best: the smallest k among equals

    def _choose_small(self, a: np.ndarray, view: DecodeView, k_max: int) -> int | None:
        """`argmax(_rates(...))` for fewer than 8 requests on Python floats: the sums over requests
        as numpy's reductions do them then (a left fold: its pairwise sum starts at 8 terms; the
        zeros of requests not drafting add nothing), the transcendental part (`expected_tokens`)
        by the same numpy call. The roofline's tables only (None: `_rates` prices it)."""
        cost = self.ctx.cost
        context = view.context
        K = k_max + 1
        tb = cost.tables(view.budget, view.method, int(context.max()) + 1, K + 1)
        if tb is None:
            return None
        r = len(a)
        ks, _ = _aranges(K)
        caps = np.maximum(view.remaining - 1, 0)
        eff = np.minimum(ks, caps[None, :, None])  # (1, r, K), as `_rates`
        tok = expected_tokens(a[None, :, None], eff)[0].tolist()
        draft = tb[0][context, :k_max].tolist()
        verify = tb[1][context, 1:K + 1].tolist()
        tbl = self._overheads(r * (K + 1))
        got = getattr(self, "_ovh_list", None)
        if got is None or got[0] is not tbl:
            got = self._ovh_list = (tbl, tbl.tolist())  # the same floats, read as Python floats
        ovh = got[1]
        cl = caps.tolist()
        dp, fp, sp, _ = cost.spec_overhead(view.method)  # once per pass: drafting, first drafts, verifying drafts
        best, best_k = None, 0
        cum = 0.0  # the draft passes' cumulative time (np.cumsum's running sum)
        for k in range(K):
            tk = vk = 0.0
            ne = r
            for i in range(r):
                e = k if k < cl[i] else cl[i]
                tk = tok[i][k] if i == 0 else tk + tok[i][k]
                vk = verify[i][e] if i == 0 else vk + verify[i][e]
                ne += e
            t = ovh[ne] + vk
            if sp and ne > r:
                t = t + sp
            if k:
                j = k - 1  # draft pass j: the requests with cap > j
                nj, pd = 0, 0.0
                for i in range(r):
                    if cl[i] > j:
                        pd = draft[i][j] if nj == 0 else pd + draft[i][j]
                        nj += 1
                pj = (ovh[nj] if nj else 0.0) + pd
                if (dp or fp) and nj:
                    pj = pj + ((dp + fp) if j == 0 else dp)
                cum = pj if k == 1 else cum + pj
                t = t + cum
            rate = tk / t
            if best is None or rate > best:
                best, best_k = rate, k
        return best_k

    def _rates(self, a, context, remaining, view: DecodeView, k_max: int) -> np.ndarray:
        """(m, k_max + 1) expected tokens per second of a cycle of k = 0..k_max drafts, for m
        looks at the batch ((m, r) acceptance estimates, contexts and remaining outputs), as the
        batcher runs the cycle (`Batcher._sync_verify`): request i drafts min(k, c_i) tokens,
        c_i = remaining_i - 1 (the drafts it can use), and sits the cycle's later draft passes
        out; the batch verifies after k draft passes, or once every request is so capped. Per k:
        expected tokens sum_i E[tokens | a_i, min(k, c_i) drafts] over the time of the draft
        passes that run (pass j: the requests with c_i > j, its overhead and their draft
        attention at position j) and one verification (query min(k, c_i) + 1 per request)."""
        m, r = a.shape
        K = k_max + 1
        ks, js = _aranges(K)
        cap = np.maximum(remaining - 1, 0)[:, :, None]
        eff = np.minimum(ks, cap)  # (m, r, K) drafts used
        tokens = expected_tokens(a[:, :, None], eff).sum(axis=1)
        draft, verify = _prices(self.ctx.cost, context, view.budget, view.method, k_max)
        v = verify[np.arange(m)[:, None, None], np.arange(r)[None, :, None], eff].sum(axis=1)  # (m, K)
        ovh = self._overheads(r * (K + 1))
        t = ovh[r + eff.sum(axis=1)] + v  # the verification pass
        # speculation's once-per-pass terms (the calibrated model's; the roofline has none)
        dp, fp, sp, _ = self.ctx.cost.spec_overhead(view.method)
        if sp:
            t = t + np.where(eff.sum(axis=1) > 0, sp, 0.0)
        if k_max:
            drafting = cap > js  # (m, r, k_max): pass j
            n_j = drafting.sum(axis=1)
            p = np.where(n_j > 0, ovh[n_j], 0.0) + (draft * drafting).sum(axis=1)
            if dp or fp:
                per = np.full(k_max, dp)
                per[0] = dp + fp
                p = p + np.where(n_j > 0, per, 0.0)
            t[:, 1:] += np.cumsum(p, axis=1)
        return tokens / t

    def _overheads(self, n: int) -> np.ndarray:
        """`cost.pass_overhead(t)` for t = 0..n (the same floats), tabulated once per run."""
        cost, tbl = getattr(self, "_ovh", (None, None))
        if cost is not self.ctx.cost or len(tbl) <= n:
            cost = self.ctx.cost
            size = max(n + 1, 256 if tbl is None else 2 * len(tbl))
            tbl = np.array([cost.pass_overhead(t) for t in range(size)])
            self._ovh = (cost, tbl)
        return tbl

    # ---- cycles planned ahead (an executor that advances a fixed batch through many cycles at
    # once): the choice at each later cycle's start made on a copy of the estimator, then replayed
    def shadow(self, ids: list[int]) -> AcceptanceEMA:
        """A copy of the estimator for asking ahead about these requests (`choose_ahead`, then its
        `update` with their outcomes): the policy's state is not touched."""
        return self.acc.copy_for(ids)

    def choose_ahead(self, view: DecodeView, shadow: AcceptanceEMA) -> int:
        """The k `targets` would choose at a cycle's start on `view`, with `shadow`'s estimates
        (which it moves as the policy's own look would)."""
        return self._choose(view, shadow)

    def look(self, ids: np.ndarray, committed: np.ndarray, k: int) -> None:
        """Leave the state as asking at a cycle's start did: the look (`AcceptanceEMA.get`) and the
        cycle's k (which `choose_ahead` gave for the same state)."""
        self.acc.get(ids, committed)
        self.cycle_k = k

    def targets(self, view: DecodeView) -> np.ndarray:
        d = view.drafted
        if len(d) and d.max() == 0 and self.k < 0:
            self.cycle_k = self._choose(view)
        if len(d) == 0 or d.max() >= self.cycle_k:
            return d.copy()  # everyone verifies
        return d + 1


_ARANGES: dict[int, tuple] = {}


def _aranges(K: int) -> tuple:
    """(0..K-1, 0..K-2) as int64 arrays, made once per K."""
    got = _ARANGES.get(K)
    if got is None:
        got = _ARANGES[K] = (np.arange(K, dtype=np.int64), np.arange(K - 1, dtype=np.int64))
    return got


def _prices(cost, context: np.ndarray, budget: int, method: int, k_max: int) -> tuple:
    """(draft, verify) attention seconds of requests at `context` ((m, r) ints): draft[..., j]
    a draft at position j (j < k_max), verify[..., k] a verification of k + 1 tokens (k <= k_max).
    From the roofline's lookup tables where it has them (bit-identical to its vector formulas,
    draft positions priced apart: a verify-refreshed index is scored on a cycle's first draft
    only); otherwise one `cost.marginal` call (the protocol's prices: every draft as a first one)."""
    K = k_max + 1
    tb = cost.tables(budget, method, int(context.max()) + 1, K + 1)
    if tb is not None:
        return tb[0][context, :k_max], tb[1][context, 1:K + 1]
    shape = context.shape
    flat = context.reshape(-1)
    rows = len(flat)
    d, v = cost.marginal(flat.repeat(K), budget, method, np.tile(np.arange(1, K + 1, dtype=np.int64), rows))
    d = np.asarray(d, np.float64).reshape(*shape, K)
    return d[..., :1].repeat(k_max, axis=-1), np.asarray(v, np.float64).reshape(*shape, K)
