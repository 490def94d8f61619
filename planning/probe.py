"""One probe: a configuration simulated at one request rate on some replicas, over the trace's
first `n` requests, and whether it meets the SLO.

The rate rescales the trace's arrival times exactly as `spsim replay --qps` does (the whole
trace's native rate to the asked one); a probe over the first n requests keeps those n requests'
rescaled times, so a short probe is the start of the long one (the window phase of the search).

With `watch`, the run stops as soon as the SLO can no longer be met (planning/stop.py): the probe
is `stopped` (it fails, with the reason) and its summary is of the run up to there. A finished
run's record does not depend on the SLO and is cached under the key of its settings; a stopped
one is cached under that key and the SLO it was stopped for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from spsim import __version__
from spsim.slo import SLO, Latencies

from .cache import ProbeCache
from .space import PlanConfig, digest

SCHEMA = 2  # bump when a probe's record changes meaning
# settings that do not change a simulated run (goodput is recomputed from the SLO here)
NOT_IN_KEY = ("slo", "slo_ttft_s", "slo_tpot_s", "qps", "offline", "concurrency")


@dataclass
class Bench:
    """What every probe of a plan shares; sent to each worker once."""

    trace: object  # spsim.traces.trace.Trace
    trace_fp: str  # hash of the trace's content
    base: object  # SimConfig: the settings not swept
    slo: SLO
    cache: ProbeCache

    def key(self, cfg: PlanConfig, rate: float, replicas: int, n: int) -> str:
        serving = {k: v for k, v in cfg.serving(self.base).__dict__.items() if k not in NOT_IN_KEY}
        serving["replicas"] = replicas
        return digest({"schema": SCHEMA, "spsim": __version__, "trace": self.trace_fp, "n": n,
                       "rate": repr(float(rate)), "serving": serving})

    def stop_key(self, key: str) -> str:
        return digest({"probe": key, "stopped_for": self.slo.text()})

    def arrivals(self, rate: float) -> np.ndarray:
        arr = np.asarray(self.trace.arrival_s, np.float64)
        span = arr[-1] - arr[0]
        native = (len(arr) - 1) / span
        return (arr - arr[0]) * (native / rate)


def trace_fingerprint(trace) -> str:
    import hashlib

    h = hashlib.sha256()
    for a in (trace.arrival_s, trace.prompt_tokens, trace.output_tokens, trace.prefix_indptr, trace.prefix_ids,
              trace.slo_ttft_s, trace.slo_tpot_s):
        h.update(b"-" if a is None else np.ascontiguousarray(a).tobytes())
    h.update(str(trace.block_size).encode())
    return h.hexdigest()[:20]


@dataclass
class Probe:
    rate: float
    replicas: int
    n: int  # requests simulated (the trace's first n)
    summary: dict
    lat: Latencies
    cached: bool = False
    stopped: str | None = None  # why the run was stopped early (the SLO could no longer be met)

    def evaluate(self, slo: SLO) -> dict:
        ev = slo.evaluate(self.lat)
        if self.stopped is None:
            return ev
        # a stopped run fails; its latencies are of the requests finished before the stop
        term = self.stopped.split(":", 1)[0]
        for t in ev["terms"]:
            t["partial"] = True
            if t["term"] == term or (t["stat"] == "attain" and term.startswith("attain=")):
                t.update(met=False, ratio=None, certain=self.stopped)
        ev["met"] = False
        ev["stopped"] = self.stopped
        return ev

    def attainment(self, slo: SLO, default_ttft: float, default_tpot: float) -> float:
        """Share of requests meeting the per-request bounds goodput uses (spsim/slo.py)."""
        b = {"ttft": slo.goodput_bound("ttft") or default_ttft, "tpot": slo.goodput_bound("tpot") or default_tpot}
        return self.lat.attainment(b)

    def goodput(self, slo: SLO, default_ttft: float, default_tpot: float) -> float:
        """Requests per second meeting those bounds."""
        dur = self.summary["duration"]
        total = len(self.lat.ttft) + self.lat.not_completed
        return self.attainment(slo, default_ttft, default_tpot) * total / dur if dur > 0 else 0.0


def run_probe(bench: Bench, cfg: PlanConfig, rate: float, replicas: int, n: int, watch: bool = False) -> Probe:
    """Simulate (or read from the cache) `cfg` at `rate` req/s on `replicas` replicas over the
    trace's first n requests; with `watch`, stop once the SLO can no longer be met."""
    from .stop import SLOWatch

    key = bench.key(cfg, rate, replicas, n)
    keys = [key]
    w = SLOWatch(bench.slo, bench.trace.output_tokens[:n]) if watch else None
    if w is not None and w.active:
        keys.append(bench.stop_key(key))  # a record stopped for this SLO serves it too
    for k in keys:
        got = bench.cache.get(k)
        if got is not None:
            meta, arrays = got
            return Probe(rate, replicas, n, meta["summary"], _lat(arrays, meta), cached=True,
                         stopped=meta.get("stopped"))
    from spsim.simulator.engine import simulate

    tr = bench.trace.take(np.arange(n))
    tr = replace(tr, arrival_s=bench.arrivals(rate)[:n])
    sim_cfg = cfg.serving(bench.base).with_(replicas=replicas, qps=None, offline=False, concurrency=None, slo=None)
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(tr, sim_cfg, watch=w if w is not None and w.active else None)
    s = {k: v for k, v in res.summary.items() if k not in ("config", "stopped_why")}
    # what the probe cost (kept with a cached record): wall time, and CPU time (the wall time on a
    # machine shared with other work overstates it)
    s["probe_wall_s"], s["probe_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    stopped = res.summary.get("stopped_why")
    lat = Latencies.from_requests(res.requests, s)
    meta = {"summary": s, "itl": lat.itl_stats, "not_completed": lat.not_completed, "rate": rate,
            "replicas": replicas, "n": n, "config": cfg.__dict__, "stopped": stopped}
    k = keys[-1] if stopped else key
    bench.cache.put(k, meta, {"ttft": lat.ttft, "tpot": lat.tpot, "e2el": lat.e2el})
    # the record as a rerun reads it back, so a fresh run and a cached one give the same numbers
    meta, arrays = bench.cache.get(k) or (_roundtrip(meta), {"ttft": lat.ttft, "tpot": lat.tpot, "e2el": lat.e2el})
    return Probe(rate, replicas, n, meta["summary"], _lat(arrays, meta), stopped=stopped)


def _lat(arrays: dict, meta: dict) -> Latencies:
    return Latencies(arrays["ttft"], arrays["tpot"], arrays["e2el"], meta["itl"], meta["not_completed"])


def _roundtrip(meta: dict) -> dict:
    import json

    from spsim.jsonlines import jsonable

    return json.loads(json.dumps(meta, default=jsonable))
