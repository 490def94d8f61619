"""Counter-based random draws keyed by (seed, stream, request id, output position).

A draw is a pure function of its key (`spsim.keyed`: splitmix64 on numpy uint64), so it never
depends on call order: two policies replaying the same trace, or the simulator and the GPU runtime
with preset acceptance, see the same numbers (common random numbers). Vectorised; no numpy
Generator state.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

from spsim.keyed import GOLD as _GOLD, INV53 as _INV53, M1 as _M1, M2 as _M2, U64, key, mix  # noqa: F401

_S30, _S27, _S31, _S11 = U64(30), U64(27), U64(31), U64(11)

# Streams: independent families of draws for one (seed, request, position).
ACCEPT = 1  # uniform compared with the acceptance probability
ENTROPY = 2  # noise of the entropy signal
SPAN = 3  # innovations of the easy/hard span process
LEVEL = 4  # per-request level (position 0 only)


# ---- one request's streams at positions 0..n-1, for building its latent arrays ------------------
# The per-(seed, stream, request) prefix of the hash is a handful of scalar operations: in Python
# ints (masked to 64 bits, the same wrapping arithmetic) they cost well under a microsecond each,
# where numpy spends microseconds per call on tiny arrays. Only the position part is vectorised,
# for all of a request's streams in one (streams, n) array. Bit-identical to `key`.
_MASK = (1 << 64) - 1
_GOLD_I, _M1_I, _M2_I = int(_GOLD), int(_M1), int(_M2)
_pos_gold = np.zeros(0, U64)  # arange(n) * GOLD, grown on demand


def _mix_int(x: int) -> int:
    z = (x + _GOLD_I) & _MASK
    z = ((z ^ (z >> 30)) * _M1_I) & _MASK
    z = ((z ^ (z >> 27)) * _M2_I) & _MASK
    return z ^ (z >> 31)


def _prefix(seed: int, stream: int, rid: int) -> int:
    """key() before the position is mixed in, for one request (Python ints)."""
    return _mix_int(_mix_int((seed & _MASK) ^ ((stream << 56) & _MASK)) ^ (int(rid) & _MASK))


def _u53(h: np.ndarray) -> np.ndarray:
    return (h >> _S11).astype(np.float64)


def request_keys(seed: int, streams, rid: int, n: int) -> np.ndarray:
    """key(seed, s, rid, arange(n)) for each stream s, as rows of one (len(streams), n) array."""
    global _pos_gold
    if len(_pos_gold) < n:
        with np.errstate(over="ignore"):
            _pos_gold = np.arange(max(n, 2 * len(_pos_gold)), dtype=U64) * _GOLD
    h = np.array([[_prefix(seed, s, rid)] for s in streams], dtype=U64)
    z = h ^ _pos_gold[:n]
    # mix() in place: the same operations, fewer temporaries
    z += _GOLD
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def keys_to_uniform(h: np.ndarray) -> np.ndarray:
    """`uniform` from keys already computed."""
    return _u53(h) * _INV53


def keys_to_normal(h: np.ndarray) -> np.ndarray:
    """`normal` from keys already computed."""
    return ndtri((_u53(h) + 0.5) * _INV53)


def level_normal(seed: int, rid: int) -> float:
    """normal(seed, LEVEL, rid, 0)[0] in scalar arithmetic."""
    h = _mix_int(_prefix(seed, LEVEL, rid) ^ 0)  # position 0: 0 * GOLD
    return float(ndtri(((h >> 11) + 0.5) * _INV53))


def uniform(seed: int, stream: int, rid, pos) -> np.ndarray:
    """U[0, 1) with 53 random bits: u < 1 always and u >= 0 always, so p=1 and p=0 are exact."""
    return (key(seed, stream, rid, pos) >> _S11).astype(np.float64) * _INV53


def normal(seed: int, stream: int, rid, pos) -> np.ndarray:
    """Standard normal by inverting the CDF at the bin centre (never 0 or 1)."""
    u = ((key(seed, stream, rid, pos) >> _S11).astype(np.float64) + 0.5) * _INV53
    return ndtri(u)
