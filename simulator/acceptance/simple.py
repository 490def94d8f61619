"""Simple acceptance models for tests and bring-up: no latent state, draws hashed on the fly.

`fixed:p=0.8`: every draft accepted independently with probability p (p=1 and p=0 are exact).
`position:p0=0.9,decay=0.02`: the j-th draft since the last verification (0-based) is accepted with
probability p0 * (1 - decay) ** j, independently.
Both carry the same entropy signal as the latent model (AUC of entropy for acceptance = `auc`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import entropy as ent
from . import keyed


class _Independent:
    """Independent Bernoulli draws keyed by (seed, request, output position)."""

    auc: float
    entropy_median: float
    entropy_sigma: float

    def _setup(self, seed: int):
        self.seed = int(seed)
        self._shift = ent.shift_for_auc(self.auc, self.entropy_sigma)

    def prob(self, j: np.ndarray) -> np.ndarray:  # per draft position (0-based)
        raise NotImplementedError

    def begin(self, rid, prompt_tokens, output_tokens) -> None:
        pass

    def end(self, rid) -> None:
        pass

    def verify(self, rid, out_pos, drafted, context, budget, method) -> np.ndarray:
        drafted = np.asarray(drafted, np.int64)
        k = max(drafted.tolist(), default=0) + 1
        if k <= 1:
            return np.zeros(len(drafted), np.int64)
        j = np.arange(k)
        u = keyed.uniform(self.seed, keyed.ACCEPT, np.asarray(rid)[:, None], np.asarray(out_pos)[:, None] + j)
        fail = (u >= self.prob(j)) | (j >= drafted[:, None])
        return fail.argmax(axis=1)

    def draft_entropy(self, rid, out_pos, draft_pos, context, budget, method) -> np.ndarray:
        draft_pos = np.asarray(draft_pos, np.int64)
        pos = np.asarray(out_pos, np.int64) + draft_pos
        acc = keyed.uniform(self.seed, keyed.ACCEPT, rid, pos) < self.prob(draft_pos)
        noise = keyed.normal(self.seed, keyed.ENTROPY, rid, pos)
        return ent.signal(acc, noise, self.entropy_median, self.entropy_sigma, self._shift)

    def latent(self, rid, out_pos, n, context, budget, method) -> np.ndarray:
        return np.broadcast_to(self.prob(np.arange(int(n))), (int(n),)).astype(float)


@dataclass
class FixedAcceptance(_Independent):
    p: float = 0.8
    auc: float = 0.64
    entropy_median: float = 0.6
    entropy_sigma: float = 1.0

    def __post_init__(self):
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"p={self.p} must be in [0, 1]")
        self._setup(0)  # make_acceptance re-keys with the run's seed

    def prob(self, j):
        return np.full(np.shape(j), self.p)


@dataclass
class PositionAcceptance(_Independent):
    p0: float = 0.9
    decay: float = 0.02
    auc: float = 0.64
    entropy_median: float = 0.6
    entropy_sigma: float = 1.0

    def __post_init__(self):
        if not 0.0 <= self.p0 <= 1.0:
            raise ValueError(f"p0={self.p0} must be in [0, 1]")
        if not 0.0 <= self.decay <= 1.0:
            raise ValueError(f"decay={self.decay} must be in [0, 1]")
        self._setup(0)  # make_acceptance re-keys with the run's seed

    def prob(self, j):
        return self.p0 * (1.0 - self.decay) ** np.asarray(j, float)
