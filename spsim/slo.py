"""The one SLO grammar of `replay`, `compare` and `plan`.

    --slo ttft_p90=2s,tpot_p99=60ms          run-level: the 90th percentile of TTFT <= 2 s, ...
    --slo ttft=2s,tpot=60ms,attain=95%       per request: at least 95 % of requests meet both

A term is `METRIC[_STAT]=NUMBER UNIT`:
- METRIC: ttft, tpot, itl, e2el (definitions in spsim/metrics.py);
- STAT: pNN (a percentile, 0 < NN <= 100, decimals allowed: p99.9), mean or median (= p50); no
  STAT: a bound every request should meet (vLLM's `--goodput` form), the per-request form;
- UNIT: s or ms, always written (`2` alone is refused: seconds or milliseconds?).
`attain=X` (a fraction, 0.9, or a percentage, 90%) is the share of requests that must meet the
per-request bounds for the run to meet the SLO (default 90 %, DistServe's SLO attainment).

One SLO serves both purposes the old flags mixed up:
- goodput (requests per second meeting their bounds, the summary's `request_goodput`): the
  per-request bound of each metric, else the bound of that metric's percentile term, else
  `--slo-ttft`/`--slo-tpot`; `--slo-ttft 2` is the term `ttft=2s` (the old flags keep working);
- pass/fail of a run (`SLO.evaluate`, what `plan` searches on): every percentile term holds, and
  the share of requests meeting every per-request bound is at least `attain`.
Requests rejected by the batcher (context window, KV capacity) never meet a per-request bound and
are left out of percentiles; `plan` reports them beside the rate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from .errors import SpsimError

METRICS = ("ttft", "tpot", "itl", "e2el")
UNITS = {"s": 1.0, "ms": 1e-3}
DEFAULT_ATTAIN = 0.9
_TERM = re.compile(r"^(?P<metric>[a-z0-9]+?)(?:_(?P<stat>p[0-9.]+|mean|median))?$")
_NUMBER = re.compile(r"^(?P<num>[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(?P<unit>[a-z]*)$")


@dataclass(frozen=True)
class Term:
    metric: str  # ttft, tpot, itl, e2el
    stat: str | None  # "p90", "p99.9", "mean"; None: a per-request bound
    bound_s: float

    @property
    def name(self) -> str:
        return self.metric if self.stat is None else f"{self.metric}_{self.stat}"

    @property
    def percentile(self) -> float | None:
        return float(self.stat[1:]) if self.stat and self.stat.startswith("p") else None

    def text(self) -> str:
        ms = self.bound_s * 1e3
        bound = f"{ms:g}ms" if ms < 1000 else f"{self.bound_s:g}s"
        return f"{self.name}={bound}"


@dataclass(frozen=True)
class SLO:
    terms: tuple[Term, ...]
    attain: float = DEFAULT_ATTAIN
    attain_given: bool = field(default=False, compare=False)

    # ------------------------------------------------------------------ parse / print
    @classmethod
    def parse(cls, text: str, option: str = "--slo") -> "SLO":
        """`ttft_p90=2s,tpot_p99=60ms` -> SLO. Errors name the option and the bad term."""
        if text is None or not str(text).strip():
            raise SpsimError(f"{option}: empty (expected e.g. ttft_p90=2s,tpot_p99=60ms)")
        terms: list[Term] = []
        attain, attain_given = DEFAULT_ATTAIN, False
        seen: set[str] = set()
        for raw in str(text).split(","):
            item = raw.strip()
            if not item:
                raise SpsimError(f"{option} {text!r}: an empty term (two commas, or a trailing one)")
            key, eq, val = item.partition("=")
            key, val = key.strip().lower(), val.strip().lower()
            where = f"{option}: term {item!r}"
            if not eq or not key or not val:
                raise SpsimError(f"{where}: expected NAME=VALUE, e.g. ttft_p90=2s or tpot=60ms")
            if key in seen:
                raise SpsimError(f"{where}: {key} given twice")
            seen.add(key)
            if key == "attain":
                attain, attain_given = _fraction(val, where), True
                continue
            terms.append(Term(*_key(key, where), _duration(val, where)))
        if not terms:
            raise SpsimError(f"{option} {text!r}: no latency term (expected e.g. ttft_p90=2s)")
        per_metric_request = {t.metric for t in terms if t.stat is None}
        if attain_given and not per_metric_request:
            raise SpsimError(f"{option} {text!r}: attain= applies to per-request terms (ttft=2s), and there are none")
        return cls(tuple(terms), attain, attain_given)

    @classmethod
    def from_flags(cls, ttft_s: float, tpot_s: float) -> "SLO":
        """The old `--slo-ttft/--slo-tpot`: per-request bounds."""
        return cls((Term("ttft", None, float(ttft_s)), Term("tpot", None, float(tpot_s))))

    def text(self) -> str:
        parts = [t.text() for t in self.terms]
        if self.attain_given:
            parts.append(f"attain={self.attain * 100:g}%")
        return ",".join(parts)

    def __str__(self) -> str:
        return self.text()

    # ------------------------------------------------------------------ derived bounds
    def per_request(self) -> list[Term]:
        return [t for t in self.terms if t.stat is None]

    def run_level(self) -> list[Term]:
        return [t for t in self.terms if t.stat is not None]

    def goodput_bound(self, metric: str) -> float | None:
        """The per-request bound goodput uses for `metric`: its per-request term, else its tightest
        run-level term's bound, else None (the caller's default)."""
        own = [t.bound_s for t in self.terms if t.metric == metric and t.stat is None]
        if own:
            return own[0]
        runs = [t.bound_s for t in self.terms if t.metric == metric]
        return min(runs) if runs else None

    # ------------------------------------------------------------------ evaluate
    def evaluate(self, lat: "Latencies") -> dict:
        """Whether a run meets the SLO, term by term, from its per-request latencies."""
        rows = []
        for t in self.run_level():
            v = lat.stat(t.metric, t.stat)
            rows.append({"term": t.text(), "metric": t.metric, "stat": t.stat, "bound_s": t.bound_s,
                         "measured_s": v, "met": v is not None and v <= t.bound_s,
                         "ratio": (v / t.bound_s) if v is not None else None})
        pr = self.per_request()
        attained = None
        if pr:
            attained = lat.attainment({t.metric: t.bound_s for t in pr})
            rows.append({"term": ",".join(t.text() for t in pr) + f" for {self.attain:.0%} of requests",
                         "metric": "+".join(t.metric for t in pr), "stat": "attain", "bound_s": None,
                         "measured_s": None, "attained": attained, "met": attained >= self.attain,
                         "ratio": (1 - attained) / max(1 - self.attain, 1e-9)})
        return {"slo": self.text(), "met": all(r["met"] for r in rows), "terms": rows, "attained": attained}


@dataclass
class Latencies:
    """Per-request latencies of a run in seconds (completed requests; TPOT: those with more than
    one output token, as spsim/metrics.py defines them), the run's ITL statistics, and the count
    of requests that did not complete (rejected)."""

    ttft: np.ndarray
    tpot: np.ndarray  # NaN for one-token outputs
    e2el: np.ndarray
    itl_stats: dict  # {"mean": s, "p50": s, "p90": s, "p99": s}
    not_completed: int = 0

    @classmethod
    def from_requests(cls, req, summary: dict | None = None) -> "Latencies":
        """From a run's per-request frame (spsim.metrics.PER_REQUEST_COLUMNS) and its summary."""
        done = req["rejected"].eq("") & req["finish_s"].notna()
        d = req[done]
        out = d["output_tokens"].to_numpy()
        first, fin, arr = (d[c].to_numpy(np.float64) for c in ("first_token_s", "finish_s", "arrival_s"))
        tpot = np.where(out > 1, (fin - first) / np.maximum(out - 1, 1), np.nan)
        itl = {}
        if summary is not None:
            itl = {k: (summary.get(f"{s}_itl_ms") / 1e3 if summary.get(f"{s}_itl_ms") is not None else None)
                   for k, s in (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99"))}
        return cls(first - arr, tpot, fin - arr, itl, int((~done).sum()))

    def stat(self, metric: str, stat: str) -> float | None:
        if metric == "itl":
            key = "p50" if stat == "median" else stat
            return self.itl_stats.get(key)
        v = getattr(self, metric)
        v = v[np.isfinite(v)]
        if len(v) == 0:
            return None
        if stat == "mean":
            return float(v.mean())
        p = 50.0 if stat == "median" else float(stat[1:])
        return float(np.percentile(v, p))

    def attainment(self, bounds: dict[str, float]) -> float:
        """Share of all requests (not completed ones count as missing) meeting every bound."""
        n = len(self.ttft) + self.not_completed
        if n == 0:
            return 0.0
        ok = np.ones(len(self.ttft), bool)
        for metric, b in bounds.items():
            if metric == "itl":
                continue  # ITL is per emission, not per request: run-level terms only (checked at parse)
            v = getattr(self, metric)
            ok &= ~(v > b)  # NaN (one-token TPOT) meets the bound
        return float(ok.sum() / n)


# ---------------------------------------------------------------------- term pieces
def _key(key: str, where: str) -> tuple[str, str | None]:
    m = _TERM.match(key)
    metric = m.group("metric") if m else key.split("_")[0]
    if metric not in METRICS:
        raise SpsimError(f"{where}: unknown metric {metric!r} (known: {', '.join(METRICS)})")
    if m is None:
        stat = key[len(metric) + 1:]
        raise SpsimError(f"{where}: unknown statistic {stat!r} (expected pNN such as p90 or p99.9, mean, or median)")
    stat = m.group("stat")
    if stat and stat.startswith("p"):
        try:
            p = float(stat[1:])
        except ValueError:
            raise SpsimError(f"{where}: bad percentile {stat!r} (expected e.g. p90 or p99.9)") from None
        if not 0 < p <= 100:
            raise SpsimError(f"{where}: percentile {stat!r} out of range (0 < p <= 100)")
        stat = f"p{p:g}"
    if metric == "itl" and stat not in ("mean", "median", "p50", "p90", "p99"):
        raise SpsimError(f"{where}: ITL is per emission, not per request: give itl_mean, itl_median, itl_p90 or itl_p99")
    return metric, stat


def _duration(val: str, where: str) -> float:
    m = _NUMBER.match(val)
    if not m:
        raise SpsimError(f"{where}: bad duration {val!r} (expected a number and a unit, e.g. 2s or 60ms)")
    unit = m.group("unit")
    if not unit:
        raise SpsimError(f"{where}: {val!r} has no unit: write {val}s or {val}ms")
    if unit not in UNITS:
        raise SpsimError(f"{where}: unknown unit {unit!r} (use s or ms)")
    v = float(m.group("num")) * UNITS[unit]
    if not (math.isfinite(v) and v > 0):
        raise SpsimError(f"{where}: the bound must be > 0")
    return v


def _fraction(val: str, where: str) -> float:
    pct = val.endswith("%")
    try:
        v = float(val[:-1] if pct else val)
    except ValueError:
        raise SpsimError(f"{where}: expected a fraction (0.9) or a percentage (90%)") from None
    v = v / 100 if pct else v
    if not (0 < v <= 1):
        raise SpsimError(f"{where}: must be in (0, 1] as a fraction or (0, 100%] as a percentage")
    return v


def resolve(slo_text: str | None, ttft_s: float, tpot_s: float, ttft_default: float, tpot_default: float) -> tuple[SLO | None, float, float]:
    """Reconcile `--slo` with `--slo-ttft/--slo-tpot` for goodput: (the parsed SLO or None, TTFT
    and TPOT bounds goodput uses). A metric set both ways is an error; the old flags keep working."""
    if not slo_text:
        return None, ttft_s, tpot_s
    slo = SLO.parse(slo_text)
    out = {}
    for metric, flag_v, default, flag in (("ttft", ttft_s, ttft_default, "--slo-ttft"),
                                          ("tpot", tpot_s, tpot_default, "--slo-tpot")):
        b = slo.goodput_bound(metric)
        if b is not None and flag_v != default and not math.isclose(b, flag_v):
            raise SpsimError(f"--slo sets {metric} and {flag} {flag_v:g} too: give it once (e.g. only --slo {metric}={flag_v:g}s)")
        out[metric] = b if b is not None else flag_v
    return slo, out["ttft"], out["tpot"]
