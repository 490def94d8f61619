"""One pricing formula for one request and for many: the array namespace a formula runs on.

A per-request term is written once over its inputs' operators (`+ - * / // **`, comparisons), which
numpy arrays (a batch) and Python ints and floats (one request) both have; the few functions they
do not share (max, min, where, ceil, ...) come from `ns(x)`: numpy's for arrays, builtins and
`math` for Python numbers. The step path prices a pass of a few requests on Python numbers because
numpy costs ~1 us a call whatever the length (a pass priced in numpy was ~8x slower). Each kind of
input keeps its own arithmetic (numpy's vector `**` and Python's `pow` may round apart), so a
formula gives a scalar caller and a batch caller the bits each had when each had its own copy.
Sums over a pass's requests keep their orders too: `fold` (one pass: in turn, or numpy's sum of a
large pass) and `pass_sums` (many passes: a left fold per pass, as `fold` adds a small one).
"""

from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np


class Table:
    """A small constant table as a numpy array (indexed by arrays) and nested lists (by ints)."""

    __slots__ = ("a", "l")

    def __init__(self, values):
        self.a = np.asarray(values)
        self.l = self.a.tolist()


class PY:
    """Python numbers: one request. Each function returns what numpy's does, elementwise."""

    maximum, minimum = max, min  # (of equal values the first: the same value as numpy's)

    @staticmethod
    def where(c, a, b):
        return a if c else b

    ceil = math.ceil  # (an int: the same value as numpy's float, exact below 2**53)
    hypot = math.hypot
    any = bool

    @staticmethod
    def full(like, value):
        return value

    @staticmethod
    def pick(t: Table, i, j=None):
        return t.l[i] if j is None else t.l[i][j]

    @staticmethod
    def searchsorted(t: Table, x):
        return bisect_left(t.l, x)

    @staticmethod
    def pow2(x):
        """The next power of two of a positive int."""
        return 1 << (x - 1).bit_length()


class NP:
    """numpy arrays: many requests or passes."""

    maximum, minimum, where, ceil, hypot, any = np.maximum, np.minimum, np.where, np.ceil, np.hypot, np.any

    @staticmethod
    def full(like, value):
        return np.full(np.shape(like), value)

    @staticmethod
    def pick(t: Table, i, j=None):
        if j is None:
            return t.a[i]
        return t.a[i][j] if isinstance(i, int) else t.a[i, j]  # (one row, then a gather: the cheaper way)

    @staticmethod
    def searchsorted(t: Table, x):
        return np.searchsorted(t.a, x)

    @staticmethod
    def pow2(x):
        """The next power of two of each positive integer (exact: powers of two have exact logs)."""
        return np.left_shift(1, np.ceil(np.log2(x)).astype(np.int64))


def ns(x):
    """The namespace for `x`: numpy's for an array, else Python's (numpy scalars too: a pass's
    request priced one at a time, as Python numbers)."""
    return NP if isinstance(x, np.ndarray) else PY


def fold(total: float, f, scalar: bool, *cols: np.ndarray) -> float:
    """`total` plus `f` of each request of a group (`cols`: its per-request arrays): few requests
    one at a time on Python numbers, added in turn; many as arrays, summed as numpy sums them."""
    if not len(cols[0]):
        return total
    if scalar:
        for x in zip(*(c.tolist() for c in cols)):
            total += f(*x)
        return total
    return total + float(f(*cols).sum())


def pass_sums(n: int, *groups: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per pass of n, its requests' values added in turn, group after group (`groups`: (pass
    index, value) per request), as `time` adds a small plan's (one bincount: a left fold per pass)."""
    return np.bincount(np.concatenate([g[0] for g in groups]), np.concatenate([g[1] for g in groups]), n)
