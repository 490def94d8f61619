"""Counter-based random draws keyed by (seed, stream, request id, output position).

A draw is a pure function of its key (splitmix64 finaliser on numpy uint64), so it never depends on
call order: two policies replaying the same trace, or the simulator and the GPU runtime with oracle
acceptance, see the same numbers (common random numbers). Vectorised; no numpy Generator state.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

U64 = np.uint64
_GOLD = U64(0x9E3779B97F4A7C15)
_M1 = U64(0xBF58476D1CE4E5B9)
_M2 = U64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = U64(30), U64(27), U64(31), U64(11)
_INV53 = 1.0 / float(1 << 53)

# Streams: independent families of draws for one (seed, request, position).
ACCEPT = 1  # uniform compared with the acceptance probability
ENTROPY = 2  # noise of the entropy signal
SPAN = 3  # innovations of the easy/hard span process
LEVEL = 4  # per-request level (position 0 only)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser; uint64 arithmetic wraps, which is the point."""
    z = np.asarray(x, dtype=U64) + _GOLD
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def _as_u64(a) -> np.ndarray:
    # negative ints (never expected) wrap instead of raising
    return np.asarray(a, dtype=np.int64).astype(U64)


def key(seed: int, stream: int, rid, pos) -> np.ndarray:
    """64-bit hash of the key; rid and pos broadcast against each other."""
    with np.errstate(over="ignore"):
        h = mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=U64) ^ (U64(stream) << U64(56)))
        h = mix(h ^ _as_u64(rid))
        return mix(h ^ (_as_u64(pos) * _GOLD))


def uniform(seed: int, stream: int, rid, pos) -> np.ndarray:
    """U[0, 1) with 53 random bits: u < 1 always and u >= 0 always, so p=1 and p=0 are exact."""
    return (key(seed, stream, rid, pos) >> _S11).astype(np.float64) * _INV53


def normal(seed: int, stream: int, rid, pos) -> np.ndarray:
    """Standard normal by inverting the CDF at the bin centre (never 0 or 1)."""
    u = ((key(seed, stream, rid, pos) >> _S11).astype(np.float64) + 0.5) * _INV53
    return ndtri(u)
