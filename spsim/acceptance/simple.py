"""Simple acceptance models for tests and bring-up: no latent state, draws hashed on the fly.

`fixed:p=0.8`: every draft accepted independently with probability p (p=1 and p=0 are exact).
`position:p0=0.9,decay=0.02`: the j-th draft since the last verification (0-based) is accepted with
probability p0 * (1 - decay) ** j, independently.
Both carry the same entropy signal as the latent model (AUC of entropy for acceptance = `auc`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logit as _logit

from . import entropy as ent
from .store import KeyedDraws, PositionStore, accept_draws


@dataclass(kw_only=True)
class _Independent(KeyedDraws):
    """Independent Bernoulli draws keyed by (seed, request, output position), stored per position
    as logit(U) so a call is one gather and one compare against logit(p_j). The entropy signal's
    fields, keyword-only, follow each model's own."""

    auc: float = 0.64
    entropy_median: float = 0.6
    entropy_sigma: float = 1.0

    def _setup(self, seed: int):
        self.seed = int(seed)
        self._shift = ent.shift_for_auc(self.auc, self.entropy_sigma)
        self._store = PositionStore(2, self._build)
        self._thr = self._logit_prob(np.arange(64))  # accepted iff logit(U) < logit(p_j)

    def _build(self, rid: int, n: int):
        return accept_draws(self.seed, rid, n)

    def prob(self, j: np.ndarray) -> np.ndarray:  # per draft position (0-based)
        raise NotImplementedError

    def _logit_prob(self, j):
        with np.errstate(divide="ignore"):
            return _logit(self.prob(j))  # p=1 -> +inf, p=0 -> -inf: exact comparisons

    def _threshold(self, k: int) -> np.ndarray:
        if k > len(self._thr):
            self._thr = self._logit_prob(np.arange(2 * k))
        return self._thr[:k]

    def verify(self, rid, out_pos, drafted, context, budget, method) -> np.ndarray:
        drafted = np.asarray(drafted, np.int64)
        k = max(drafted.tolist(), default=0) + 1
        if k <= 1:
            return np.zeros(len(drafted), np.int64)
        j = np.arange(k)
        return self._accepted(self._rows(rid, out_pos, j) >= self._threshold(k), j, drafted)

    def draft_entropy(self, rid, out_pos, draft_pos, context, budget, method) -> np.ndarray:
        draft_pos = np.asarray(draft_pos, np.int64)
        at = self._at(rid, out_pos, draft_pos)
        acc = self._store.bufs[0][at] < self._threshold(max(draft_pos.tolist(), default=0) + 1)[draft_pos]
        return ent.signal(acc, self._store.bufs[1][at], self.entropy_median, self.entropy_sigma, self._shift)


def _probabilities(**values: float) -> None:
    for name, v in values.items():
        if not 0.0 <= v <= 1.0:  # also NaN
            raise ValueError(f"{name}={v} must be in [0, 1]")


@dataclass
class FixedAcceptance(_Independent):
    p: float = 0.8

    def __post_init__(self):
        _probabilities(p=self.p)
        self._setup(0)  # make_acceptance re-keys with the run's seed

    def prob(self, j):
        return np.full(np.shape(j), self.p)


@dataclass
class PositionAcceptance(_Independent):
    p0: float = 0.9
    decay: float = 0.02

    def __post_init__(self):
        _probabilities(p0=self.p0, decay=self.decay)
        self._setup(0)  # make_acceptance re-keys with the run's seed

    def prob(self, j):
        return self.p0 * (1.0 - self.decay) ** np.asarray(j, float)
