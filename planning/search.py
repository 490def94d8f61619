"""The searches a plan runs for one configuration.

Highest rate meeting the SLO (`max_rate`), at the plan's smallest replica count:
1. Bracket: probe a start rate; while it passes multiply by `grow` (by 2 after NEAR_STEPS steps),
   while it fails divide, until one rate passes and the next fails (no failure below MAX_RANGE
   (4,096) times the start is reported as `above`, no pass above 1/4,096 of it as `infeasible`).
2. Bisect geometrically (the midpoint sqrt(lo * hi)) until hi / lo <= 1 + precision: the answer
   is lo, the highest rate probed that passes; the true limit lies in [lo, hi) as far as meeting
   the SLO is monotone in the rate.
3. Early stop: a probe first simulates its first quarter of requests (at least HEAD_MIN); if that
   misses a term by CLEAR_FAIL (1.5x the bound, or twice the allowed share of requests for
   attain=) the probe fails without the rest. The start of a rescaled trace is its least loaded
   part (the queue starts empty), so a start that misses by half again rarely recovers.
4. Reuse: a configuration's start is the answer of its anchor, the first configuration on the
   same GPUs and model (grow 1.25 from there, 2 from the trace's native rate for anchors).
   Anchors run first; which configuration is an anchor depends on the plan only, so results are
   the same whatever the job count or engine.

Fewest replicas for a target rate (`fewest_replicas`): start at ceil(target / rate per replica),
probe the target rate there, then step down while it passes or up until it does, within the
plan's replica range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .probe import Bench, Probe, run_probe
from .space import PlanConfig

HEAD_FRACTION = 0.25
HEAD_MIN = 100
CLEAR_FAIL = 1.5  # a head probe over this ratio of a latency bound fails the probe
CLEAR_FAIL_ATTAIN = 2.0  # ... or missing twice the share of requests attain= allows
MAX_RANGE = 4096.0  # bracketing gives up this far from the start
NEAR_STEPS = 3  # steps of `grow` before the bracketing doubles (a neighbour's answer may be far off)


@dataclass(frozen=True)
class SearchSettings:
    precision: float = 0.05  # relative width of the final bracket
    grow_anchor: float = 2.0
    grow_near: float = 1.25
    early_stop: bool = True


class Searcher:
    """Runs the probes of one configuration and remembers them (for tables and reports)."""

    def __init__(self, bench: Bench, cfg: PlanConfig, settings: SearchSettings):
        self.bench, self.cfg, self.s = bench, cfg, settings
        self.n = len(bench.trace)
        self.head = max(HEAD_MIN, int(self.n * HEAD_FRACTION)) if settings.early_stop else self.n
        self.probes: list[dict] = []  # one row per probe run (heads included)

    def check(self, rate: float, replicas: int) -> tuple[bool, Probe]:
        """Whether `rate` meets the SLO on `replicas`: the head first where it is shorter, the
        whole trace unless the head clearly fails."""
        slo = self.bench.slo
        if self.head < self.n:
            hp = run_probe(self.bench, self.cfg, rate, replicas, self.head)
            ev = hp.evaluate(slo)
            self._row(hp, ev, "head")
            if _clearly_fails(ev):
                return False, hp
        p = run_probe(self.bench, self.cfg, rate, replicas, self.n)
        ev = p.evaluate(slo)
        self._row(p, ev, "full")
        return ev["met"], p

    def _row(self, p: Probe, ev: dict, kind: str) -> None:
        s = p.summary
        b = self.bench
        self.probes.append({"rate": p.rate, "replicas": p.replicas, "requests": p.n, "kind": kind, "met": ev["met"],
                            "cached": p.cached, "eval": ev, "summary": s,
                            "goodput": p.goodput(b.slo, b.base.slo_ttft_s, b.base.slo_tpot_s),
                            "attainment": p.attainment(b.slo, b.base.slo_ttft_s, b.base.slo_tpot_s)})

    def max_rate(self, replicas: int, start: float, grow: float) -> dict:
        lo = hi = None
        lo_p = hi_p = None
        rate = start
        ok, p = self.check(rate, replicas)
        if ok:
            lo, lo_p = rate, p
            for g in _steps(grow):
                rate *= g
                ok, p = self.check(rate, replicas)
                if not ok:
                    hi, hi_p = rate, p
                    break
                lo, lo_p = rate, p
            if hi is None:
                return {"status": "above", "lo": lo, "hi": None, "lo_probe": lo_p, "hi_probe": None}
        else:
            hi, hi_p = rate, p
            for g in _steps(grow):
                rate /= g
                ok, p = self.check(rate, replicas)
                if ok:
                    lo, lo_p = rate, p
                    break
                hi, hi_p = rate, p
            if lo is None:
                return {"status": "infeasible", "lo": None, "hi": hi, "lo_probe": None, "hi_probe": hi_p}
        while hi / lo > 1 + self.s.precision:
            mid = math.sqrt(lo * hi)
            ok, p = self.check(mid, replicas)
            if ok:
                lo, lo_p = mid, p
            else:
                hi, hi_p = mid, p
        return {"status": "ok", "lo": lo, "hi": hi, "lo_probe": lo_p, "hi_probe": hi_p}

    def fewest_replicas(self, target: float, per_replica: float | None, rmin: int, rmax: int) -> dict:
        """The fewest replicas in [rmin, rmax] meeting the SLO at `target` req/s."""
        guess = rmin if not per_replica else min(rmax, max(rmin, math.ceil(target / per_replica)))
        results: dict[int, tuple[bool, Probe]] = {}

        def at(r):
            if r not in results:
                results[r] = self.check(target, r)
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


def _clearly_fails(ev: dict) -> bool:
    for t in ev["terms"]:
        if t["ratio"] is None:
            return True  # nothing measured (nothing completed)
        if t["ratio"] > (CLEAR_FAIL_ATTAIN if t["stat"] == "attain" else CLEAR_FAIL):
            return True
    return False
