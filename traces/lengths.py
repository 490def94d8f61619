"""Length distributions for synthetic traces, written with the spec grammar (`spsim.spec`):

  fixed:value=4000         (or just `4000`)
  uniform:low=100,high=2000                 inclusive bounds
  lognormal:median=8000,sigma=0.8[,min=1,max=1000000]
  zipf:a=1.5[,min=1,max=131072]            P(L) proportional to L^-a on min..max
  resample:trace=mooncake[,column=prompt]   draw with replacement from a trace's lengths
Every sample is an int64 >= 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spsim.errors import SpecError
from spsim.spec import build, parse_spec


@dataclass
class Fixed:
    value: int

    def __post_init__(self):
        if self.value < 1:
            raise ValueError(f"value must be >= 1, got {self.value}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, np.int64)


@dataclass
class Uniform:
    low: int
    high: int

    def __post_init__(self):
        if not 1 <= self.low <= self.high:
            raise ValueError(f"need 1 <= low <= high, got low={self.low}, high={self.high}")

    def sample(self, rng, n):
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)


@dataclass
class Lognormal:
    median: float
    sigma: float
    min: int = 1
    max: int = 1_000_000

    def __post_init__(self):
        if self.median <= 0 or self.sigma < 0:
            raise ValueError(f"need median > 0 and sigma >= 0, got median={self.median}, sigma={self.sigma}")
        if not 1 <= self.min <= self.max:
            raise ValueError(f"need 1 <= min <= max, got min={self.min}, max={self.max}")

    def sample(self, rng, n):
        x = rng.lognormal(np.log(self.median), self.sigma, size=n)
        return np.clip(np.rint(x), self.min, self.max).astype(np.int64)


@dataclass
class Zipf:
    a: float = 1.5
    min: int = 1
    max: int = 131072

    def __post_init__(self):
        if self.a <= 0:
            raise ValueError(f"a must be > 0, got {self.a}")
        if not 1 <= self.min <= self.max or self.max - self.min > 50_000_000:
            raise ValueError(f"need 1 <= min <= max (at most 5e7 apart), got min={self.min}, max={self.max}")

    def sample(self, rng, n):
        support = np.arange(self.min, self.max + 1, dtype=np.float64)
        cdf = np.cumsum(support ** -self.a)
        cdf /= cdf[-1]
        return (self.min + np.searchsorted(cdf, rng.random(n), side="right")).clip(self.min, self.max).astype(np.int64)


@dataclass
class Resample:
    trace: str
    column: str = ""  # prompt | output; default: the role the spec is used for

    def __post_init__(self):
        if self.column not in ("", "prompt", "output"):
            raise ValueError(f"column must be prompt or output, got {self.column!r}")

    def sample(self, rng, n, role: str = "prompt"):
        from .io import read_trace
        t = read_trace(self.trace)
        col = t.prompt_tokens if (self.column or role) == "prompt" else t.output_tokens
        if len(col) == 0:
            raise ValueError(f"trace {self.trace} has no requests to resample")
        return col[rng.integers(0, len(col), size=n)].astype(np.int64)


KINDS = {"fixed": Fixed, "uniform": Uniform, "lognormal": Lognormal, "zipf": Zipf, "resample": Resample}


def length_dist(spec: str | int):
    """`lognormal:median=8000,sigma=0.8` -> a distribution with `.sample(rng, n)`."""
    if isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        return build(Fixed, "fixed", {"value": int(spec)})
    if not isinstance(spec, str):
        return spec  # already a distribution object
    name, params = parse_spec(spec)
    if name not in KINDS:
        raise SpecError(f"length spec {spec!r}: unknown distribution {name!r} (known: {', '.join(KINDS)})")
    return build(KINDS[name], name, params)


def sample_lengths(spec, rng: np.random.Generator, n: int, role: str) -> np.ndarray:
    d = length_dist(spec)
    try:
        return d.sample(rng, n, role) if isinstance(d, Resample) else d.sample(rng, n)
    except ValueError as e:
        raise SpecError(f"{role} length spec {spec!r}: {e}") from None
