"""The counter-based hash behind every keyed draw, in both worlds: a pure function of (seed,
stream, request id, output position), splitmix64's finaliser on numpy uint64, so a draw never
depends on call order (common random numbers across policies, and between the simulator's
acceptance model and the runtime's sampler). numpy only: no scipy, no torch.
"""

from __future__ import annotations

import numpy as np

U64 = np.uint64
GOLD = U64(0x9E3779B97F4A7C15)
M1 = U64(0xBF58476D1CE4E5B9)
M2 = U64(0x94D049BB133111EB)
INV53 = 1.0 / float(1 << 53)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser; uint64 arithmetic wraps, which is the point."""
    z = np.asarray(x, dtype=U64) + GOLD
    z = (z ^ (z >> U64(30))) * M1
    z = (z ^ (z >> U64(27))) * M2
    return z ^ (z >> U64(31))


def as_u64(a) -> np.ndarray:
    # negative ints (never expected) wrap instead of raising
    return np.asarray(a, dtype=np.int64).astype(U64)


def key(seed: int, stream: int, rid, pos) -> np.ndarray:
    """64-bit hash of the key; rid and pos broadcast against each other (and a leading 1)."""
    with np.errstate(over="ignore"):
        h = mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=U64) ^ (U64(stream) << U64(56)))
        h = mix(h ^ as_u64(rid))
        return mix(h ^ (as_u64(pos) * GOLD))


def keyed_hash(seed: int, stream: int, rid, pos) -> np.ndarray:
    """`key` with the broadcast shape of rid and pos."""
    return key(seed, stream, rid, pos).reshape(np.broadcast_shapes(np.shape(rid), np.shape(pos)))
