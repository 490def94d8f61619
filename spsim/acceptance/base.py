"""The acceptance-model contract the simulator's executor calls.

Randomness is keyed by (seed, request id, output position), never by call order, so two policies,
or the simulator and the GPU runtime with oracle acceptance, see the same draws.

Positions: `out_pos` is the number of output tokens the request has committed when its current
draft run started, so draft `j` (0-based since the last verification) is the token at output
position `out_pos + j`. All methods are vectorised over requests (parallel arrays); `budget` and
`method` are one per request (recorded events mix them) or one value for all (a run's settings).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class AcceptanceModel(Protocol):
    def begin(self, rid: int, prompt_tokens: int, output_tokens: int) -> None:
        """A request was admitted (may build its latent per-position acceptance). Idempotent."""

    def end(self, rid: int) -> None:
        """A request finished or was rejected; drop its state."""

    def draft_entropy(self, rid: np.ndarray, out_pos: np.ndarray, draft_pos: np.ndarray,
                      context: np.ndarray, budget: int | np.ndarray, method: int | np.ndarray) -> np.ndarray:
        """Entropy signal (nats) of each drafted token, correlated with its acceptance."""

    def verify(self, rid: np.ndarray, out_pos: np.ndarray, drafted: np.ndarray,
               context: np.ndarray, budget: int | np.ndarray, method: int | np.ndarray) -> np.ndarray:
        """Accepted drafts per request: the longest accepted prefix of its `drafted` tokens."""
