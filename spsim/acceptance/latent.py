"""The latent acceptance model: a per-token acceptance probability along each request's output.

For the token at output position t of request r, drafted j positions after the last verification
(its staleness), with `context` tokens in the KV cache, a sparse `budget` and draft-KV `method`:

    logit p = mu + sigma_req * L_r + sigma_span * X_r(t)             (request level, easy/hard spans)
              + method offset - ctx_slope_m * ln(max(context, budget) / budget)   (budget vs context)
              - stale_m(context) * j                                 (index staleness, draft length)
              - temp_slope * (temperature - ref_temperature)         (rejection sampling at T > 0)

L_r ~ N(0, 1) per request; X_r is a stationary AR(1) with unit variance and lag-one correlation rho
(persistence of easy and hard spans). The token is accepted iff its keyed uniform U_r(t) < p, so the
same position keeps the same draw whatever the draft length or call order; verification accepts the
longest accepted prefix. Method terms: selected pages (every method but STATIC) share `ctx_slope`;
those refreshed every step (STEP_LAYER, STEP_QUEST) keep only `step_residual` of the staleness;
STATIC (a fixed window) has its own offset, context slope and draft-length slope, and that slope
grows by `static_stale_ctx` per e-fold of context/budget beyond `static_knee` (the long-context
cliff: docs/acceptance.md). VERIFY_ATTN and STEP_QUEST may differ from VERIFY_QUEST and STEP_LAYER
by `verify_attn_offset`, `step_quest_offset` and `step_quest_residual`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from itertools import accumulate

import numpy as np
from scipy.special import logit as _logit

from spsim.plan import DraftMethod

from . import entropy as ent
from . import keyed
from .store import KeyedDraws, PositionStore



@dataclass
class LatentParams:
    mu: float = 3.0
    ctx_slope: float = 0.05
    stale: float = 0.05
    step_residual: float = 0.15
    static_offset: float = -0.5
    static_ctx_slope: float = 0.10
    static_stale: float = 0.20
    static_stale_ctx: float = 0.0  # extra static draft-length slope per e-fold of context/budget ...
    static_knee: float = 0.0  # ... beyond this log(context/budget)
    verify_attn_offset: float = 0.0  # VERIFY_ATTN's offset against VERIFY_QUEST
    step_quest_offset: float = 0.0  # STEP_QUEST's offset against STEP_LAYER
    step_quest_residual: float = 0.15  # STEP_QUEST's share of the staleness (STEP_LAYER: step_residual)
    sigma_req: float = 0.6
    sigma_span: float = 1.0
    rho: float = 0.9
    auc: float = 0.64
    entropy_median: float = 0.6
    entropy_sigma: float = 1.0
    temperature: float = 0.0
    ref_temperature: float = 0.0
    temp_slope: float = 0.3

    def __post_init__(self):
        for f in fields(self):
            setattr(self, f.name, float(getattr(self, f.name)))
        checks = [("sigma_req", self.sigma_req >= 0), ("sigma_span", self.sigma_span >= 0),
                  ("rho", 0 <= self.rho < 1), ("auc", 0 < self.auc < 1), ("step_residual", self.step_residual >= 0),
                  ("step_quest_residual", self.step_quest_residual >= 0), ("static_knee", self.static_knee >= 0),
                  ("entropy_median", self.entropy_median > 0), ("entropy_sigma", self.entropy_sigma > 0),
                  ("temperature", self.temperature >= 0)]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)} out of range")

    def to_dict(self) -> dict:
        return asdict(self)

    def method_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(offset, context slope, staleness slope, staleness slope per e-fold of context/budget
        beyond the knee, knee) indexed by DraftMethod code."""
        t = -self.temp_slope * (self.temperature - self.ref_temperature)
        # by code: STATIC, VERIFY_QUEST, STEP_LAYER, VERIFY_ATTN, STEP_QUEST
        off = np.array([self.static_offset + t, t, t, t + self.verify_attn_offset, t + self.step_quest_offset])
        cs = np.array([self.static_ctx_slope] + [self.ctx_slope] * 4)
        st = np.array([self.static_stale, self.stale, self.stale * self.step_residual, self.stale,
                       self.stale * self.step_quest_residual])
        sc = np.array([self.static_stale_ctx, 0.0, 0.0, 0.0, 0.0])
        knee = np.array([self.static_knee, 0.0, 0.0, 0.0, 0.0])
        assert len(off) == len(DraftMethod)
        return off, cs, st, sc, knee


def ar1(eps: np.ndarray, rho: float) -> np.ndarray:
    """Stationary unit-variance AR(1) along the last axis from N(0, 1) innovations (causal, so a
    longer build has the same prefix).

    The recursion y[k] = rho * y[k - 1] + e[k] on Python floats, in the operations scipy's
    `lfilter([1], [1, -rho], e)` makes (its delay term x * 0 - y * -rho is rho * y exactly, then
    + 1 * x): the same bits (checked against lfilter in tests/test_acceptance.py), without
    importing scipy.signal, which took ~1.3 s of every simulation that speculates (a run builds
    ~4 M positions on the whole Mooncake trace: ~0.5 s this way)."""
    e = eps * math.sqrt(1.0 - rho * rho)
    e[..., 0] = eps[..., 0]
    out = np.empty_like(e)
    rows, flat = e.reshape(-1, e.shape[-1]), out.reshape(-1, e.shape[-1])
    for i, row in enumerate(rows.tolist()):
        flat[i] = list(accumulate(row, lambda y, x: rho * y + x))
    return out


def base_logits(p: LatentParams, level_z: np.ndarray, span_eps: np.ndarray) -> np.ndarray:
    """mu + request level + span process, shape of span_eps (level broadcasts over positions)."""
    return p.mu + p.sigma_req * np.asarray(level_z)[..., None] + p.sigma_span * ar1(span_eps, p.rho)


def log_ratio(context, budget) -> np.ndarray:
    b = np.maximum(np.asarray(budget, np.float64), 1.0)
    return np.log(np.maximum(np.asarray(context, np.float64), b) / b)


class LatentAcceptance(KeyedDraws):
    """AcceptanceModel backed by per-request latent arrays in a PositionStore.

    Per position we keep `margin` = base logit - logit(U): the token is accepted at staleness j iff
    margin + method/context/staleness offset > 0, one add and one compare per drafted token.
    """

    # each draft's acceptance depends on its position alone (not on how many are verified): a
    # verification of x drafts accepts min(x, the first rejected one's index) (outcomes.OutcomeTable.run;
    # `prefix_draws`, from KeyedDraws)

    def __init__(self, params: LatentParams, seed: int = 0, name: str = "latent"):
        self.params, self.seed, self.name = params, int(seed), name
        self._terms = params.method_terms()  # offset, slopes and knee by method code
        self._method_terms = [tuple(float(t[m]) for t in self._terms) for m in range(len(self._terms[0]))]
        self._stale_ctx = bool(self._terms[3].any())  # the static window's slope grows with context
        self._shift = ent.shift_for_auc(params.auc, params.entropy_sigma)
        self._store = PositionStore(2, self._build)  # margin, entropy noise
        self._j = np.arange(64)

    def _build(self, rid: int, n: int):
        p = self.params
        # the three position streams hashed in one call (keyed.request_keys; same draws as
        # keyed.normal / keyed.uniform per stream)
        span, accept, noise = keyed.request_keys(self.seed, (keyed.SPAN, keyed.ACCEPT, keyed.ENTROPY), rid, n)
        base = base_logits(p, keyed.level_normal(self.seed, rid), keyed.keys_to_normal(span))
        with np.errstate(divide="ignore"):
            lu = _logit(keyed.keys_to_uniform(accept))
        return base - lu, keyed.keys_to_normal(noise)

    # -- AcceptanceModel (begin, end: KeyedDraws) ----------------------------------------------
    def _offsets(self, context, budget, method):
        """Per request: logit offset at staleness 0, and the logit drop per draft position (one
        for all where budget and method are)."""
        if isinstance(method, (int, np.integer)) and isinstance(budget, (int, np.integer)):  # the run's
            off, cs, st, sc, knee = self._method_terms[method]
            budget = max(budget, 1)
        else:
            off, cs, st, sc, knee = (t.take(method) for t in self._terms)
            budget = np.maximum(budget, 1)
        lr = np.log(np.maximum(context / budget, 1.0))
        if self._stale_ctx:  # the static window's draft-length slope grows with context beyond the knee
            st = st + sc * np.maximum(lr - knee, 0.0)
        return off - cs * lr, st

    def verify(self, rid, out_pos, drafted, context, budget, method) -> np.ndarray:
        drafted = np.asarray(drafted, np.int64)
        k = max(drafted.tolist(), default=0) + 1  # one spare column: every row fails somewhere
        if k <= 1:
            return np.zeros(len(drafted), np.int64)
        if k > len(self._j):
            self._j = np.arange(2 * k)
        j = self._j[:k]
        off, stale = self._offsets(context, budget, method)
        fail = self._rows(rid, out_pos, j) + (off[:, None] - np.multiply.outer(stale, j)) <= 0.0
        return self._accepted(fail, j, drafted)

    def draft_entropy(self, rid, out_pos, draft_pos, context, budget, method) -> np.ndarray:
        draft_pos = np.asarray(draft_pos, np.int64)
        at = self._at(rid, out_pos, draft_pos)
        off, stale = self._offsets(context, budget, method)
        acc = self._store.bufs[0][at] + off - stale * draft_pos > 0.0
        p = self.params
        return ent.signal(acc, self._store.bufs[1][at], p.entropy_median, p.entropy_sigma, self._shift)

    def draft_entropy_rows(self, rid: int, starts, context, k: int, budget, method) -> np.ndarray:
        """`draft_entropy` of one request's drafts 0..k-1 from each of these cycle starts (their
        contexts; budget and method per start or one for all): (len(starts), k), each entry the
        same floats as drawn alone (the offsets computed once per start, broadcast along the drafts)."""
        starts = np.asarray(starts, np.int64)
        j = np.arange(k, dtype=np.int64)
        s = int(self._store.ensure(np.array([rid], np.int64), np.array([int(starts[-1]) + k], np.int64))[0])
        at = (s + starts)[:, None] + j
        off, stale = self._offsets(context, budget, method)
        acc = self._store.bufs[0][at] + off[:, None] - np.multiply.outer(stale, j) > 0.0
        p = self.params
        return ent.signal(acc, self._store.bufs[1][at], p.entropy_median, p.entropy_sigma, self._shift)
