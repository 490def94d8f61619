"""The searches a plan runs for one configuration.

Highest rate meeting the SLO (`max_rate`), at the plan's smallest replica count, in two phases:
1. Window: the same search over the trace's first `window` requests (their arrival times
   rescaled as the whole trace's are), which costs a fraction of a whole-trace probe:
   bracket (probe a start rate; while it passes multiply by `grow`, by 2 after NEAR_STEPS steps;
   while it fails divide; no failure within MAX_RANGE (4,096) times the start is `above`, no pass
   within 1/4,096 of it `infeasible`), then bisect geometrically (sqrt(lo * hi)) until
   hi / lo <= 1 + precision. Its answer is only a starting point: the start of a trace is not
   the whole trace (its queue starts empty; the whole trace has its own bursts).
2. Whole trace: start at the middle of the window's bracket, sqrt(lo * hi), times `ratio` (the
   same middle of the anchor's whole-trace bracket over that of its window bracket; the anchor is
   the first configuration on the same hardware: neighbours differ from the window alike), gallop away from it by (1 + precision), (1 + precision)^2, ^4, ...
   until one rate passes and the next fails, and bisect to hi / lo <= 1 + precision. The answer
   is lo, a whole-trace probe that met the SLO, and hi a whole-trace probe that did not: the
   precision is that of a search on the whole trace alone (as far as meeting the SLO is
   monotone in the rate); the window only decides where the whole-trace probes go.
Early stop (exact): a probe stops as soon as its SLO can no longer be met (planning/stop.py),
and fails; it would have failed run to the end, so this changes no answer, only the time.
Reuse: the window search of a configuration starts from its anchor's window answer and gallops
from it as the whole-trace phase does (neighbours on the same hardware are usually within a few
per cent); anchors start from the trace's native rate (grow 2). Anchors run first; which
configuration is an anchor depends on the plan only, so results are the same whatever the job
count or engine.

Fewest replicas for a target rate (`fewest_replicas`), within the plan's replica range: for an
anchor, on the window, start at ceil(target / rate per replica) and step down while it passes or
up until it does; then on the whole trace, start at the window's answer and do the same. Its
neighbours start on the whole trace at the anchor's answer (no window phase). The answer passes
on the whole trace and one replica fewer fails on it (or is below the range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .probe import Bench, Probe, run_probe
from .space import PlanConfig

WINDOW_MIN = 1000  # requests: no window phase for traces shorter than twice this
WINDOW_DIV = 8  # the window is this fraction of the trace (at least WINDOW_MIN requests)
MAX_RANGE = 4096.0  # bracketing gives up this far from the start
NEAR_STEPS = 3  # steps of `grow` before the bracketing doubles (a neighbour's answer may be far off)
TOL = 1e-9


@dataclass(frozen=True)
class SearchSettings:
    precision: float = 0.05  # relative width of the final bracket
    grow_anchor: float = 2.0
    grow_near: float | None = None  # None: gallop by (1 + precision)^(2^k) from a neighbour's answer
    early_stop: bool = True  # stop a probe once its SLO cannot be met (exact)
    window: int | None = None  # requests of the window phase; None: auto; 0: no window phase


def window_size(n: int, window: int | None) -> int:
    """Requests in the window phase (n: no window phase)."""
    if window == 0:
        return n
    w = window if window is not None else max(WINDOW_MIN, n // WINDOW_DIV)
    return w if 2 * w <= n else n


class Searcher:
    """Runs the probes of one configuration and remembers them (for tables and reports)."""

    def __init__(self, bench: Bench, cfg: PlanConfig, settings: SearchSettings):
        self.bench, self.cfg, self.s = bench, cfg, settings
        self.n = len(bench.trace)
        self.w = window_size(self.n, settings.window)
        self.probes: list[dict] = []  # one row per probe run

    def check(self, rate: float, replicas: int, n: int | None = None) -> tuple[bool, Probe]:
        """Whether `rate` meets the SLO on `replicas` over the trace's first `n` requests (all)."""
        n = self.n if n is None else n
        p = run_probe(self.bench, self.cfg, rate, replicas, n, watch=self.s.early_stop)
        ev = p.evaluate(self.bench.slo)
        self._row(p, ev, "full" if n == self.n else "window")
        return ev["met"], p

    def _row(self, p: Probe, ev: dict, kind: str) -> None:
        s = p.summary
        b = self.bench
        self.probes.append({"rate": p.rate, "replicas": p.replicas, "requests": p.n, "kind": kind, "met": ev["met"],
                            "cached": p.cached, "stopped": p.stopped, "eval": ev, "summary": s,
                            "goodput": p.goodput(b.slo, b.base.slo_ttft_s, b.base.slo_tpot_s),
                            "attainment": p.attainment(b.slo, b.base.slo_ttft_s, b.base.slo_tpot_s)})

    def max_rate(self, replicas: int, start: float, grow: float, ratio: float | None = None) -> dict:
        """The highest rate meeting the SLO on the whole trace (module docstring). `ratio`: the
        anchor's whole-trace answer over its window answer (None: 1)."""
        window = None
        if self.w < self.n:
            window = self.search(replicas, start, _steps(grow) if grow else _gallop(self.s.precision), self.w)
            if window["status"] == "ok":
                start = math.sqrt(window["lo"] * window["hi"]) * (ratio or 1.0)
                steps = _gallop(self.s.precision)
            else:  # beyond the window's range: search the whole trace as the window did
                steps = _steps(grow or 2.0)
        else:
            steps = _steps(grow) if grow else _gallop(self.s.precision)
        m = self.search(replicas, start, steps, self.n)
        m["window_lo"] = window["lo"] if window else None
        m["window_hi"] = window["hi"] if window else None
        return m

    def search(self, replicas: int, start: float, steps: list[float], n: int) -> dict:
        """Bracket from `start` by `steps`, then bisect to the precision, over the first n requests."""
        lo = hi = None
        lo_p = hi_p = None
        rate = start
        ok, p = self.check(rate, replicas, n)
        if ok:
            lo, lo_p = rate, p
            for g in steps:
                rate *= g
                ok, p = self.check(rate, replicas, n)
                if not ok:
                    hi, hi_p = rate, p
                    break
                lo, lo_p = rate, p
            if hi is None:
                return {"status": "above", "lo": lo, "hi": None, "lo_probe": lo_p, "hi_probe": None}
        else:
            hi, hi_p = rate, p
            for g in steps:
                rate /= g
                ok, p = self.check(rate, replicas, n)
                if ok:
                    lo, lo_p = rate, p
                    break
                hi, hi_p = rate, p
            if lo is None:
                return {"status": "infeasible", "lo": None, "hi": hi, "lo_probe": None, "hi_probe": hi_p}
        while hi / lo > (1 + self.s.precision) * (1 + TOL):
            mid = math.sqrt(lo * hi)
            ok, p = self.check(mid, replicas, n)
            if ok:
                lo, lo_p = mid, p
            else:
                hi, hi_p = mid, p
        return {"status": "ok", "lo": lo, "hi": hi, "lo_probe": lo_p, "hi_probe": hi_p}

    def fewest_replicas(self, target: float, per_replica: float | None, rmin: int, rmax: int,
                        start: int | None = None) -> dict:
        """The fewest replicas in [rmin, rmax] meeting the SLO at `target` req/s on the whole trace:
        first on the window (from ceil(target / per_replica)), then on the whole trace from the
        window's answer; with `start` (a neighbour's answer), on the whole trace from there."""
        guess = rmin if not per_replica else min(rmax, max(rmin, math.ceil(target / per_replica)))
        tried_w: list[int] = []
        if start is not None:
            guess = min(rmax, max(rmin, start))
        elif self.w < self.n:
            fw = self._fewest(target, guess, rmin, rmax, self.w)
            tried_w = fw["tried"]
            if fw["replicas"] is not None:
                guess = fw["replicas"]
        f = self._fewest(target, guess, rmin, rmax, self.n)
        f["tried_window"] = tried_w
        return f

    def _fewest(self, target: float, guess: int, rmin: int, rmax: int, n: int) -> dict:
        results: dict[int, tuple[bool, Probe]] = {}

        def at(r):
            if r not in results:
                results[r] = self.check(target, r, n)
            return results[r][0]

        r = guess
        if at(r):
            while r - 1 >= rmin and at(r - 1):
                r -= 1
            return {"replicas": r, "probe": results[r][1], "tried": sorted(results)}
        while r + 1 <= rmax:
            r += 1
            if at(r):
                return {"replicas": r, "probe": results[r][1], "tried": sorted(results)}
        return {"replicas": None, "probe": results[r][1], "tried": sorted(results)}


def _steps(grow: float) -> list[float]:
    """Bracketing factors: `grow` NEAR_STEPS times, then doubling, up to MAX_RANGE in all."""
    out, total = [], 1.0
    while total * (1 + 1e-9) < MAX_RANGE:
        g = min(grow if len(out) < NEAR_STEPS else max(grow, 2.0), MAX_RANGE / total)
        out.append(g)
        total *= g
    return out


def _gallop(precision: float) -> list[float]:
    """Whole-trace steps away from a window's estimate: (1 + p), (1 + p)^2, (1 + p)^4, ... up to
    MAX_RANGE in all (a bracket as narrow as the precision when the estimate is close)."""
    out, total, g = [], 1.0, 1.0 + precision
    while total * (1 + TOL) < MAX_RANGE:
        step = min(g, MAX_RANGE / total)
        out.append(step)
        total *= step
        g *= g
    return out
