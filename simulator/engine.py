"""Run a trace through replicas in simulated time and collect the metrics.

`simulate(trace, config)` wires everything: the cost model (clock), the acceptance model
(outcomes), one batcher + policy per replica, a router, and the arrival process in one of four
load modes: the trace's own times, rescaled to a QPS, offline (all at t=0), or a fixed number of
requests in flight (closed loop: a finish releases the next request).
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from spsim.build import arrival_times, build
from spsim.config import ServingConfig
from spsim.errors import SpsimError
from spsim.metrics import RunResult
from spsim.policies.request import RequestTable
from spsim.traces.trace import Trace

from .executor import SimExecutor
from .replica import Replica
from .results import summarize
from .router import ROUTERS
from .segment import FastPath


@dataclass
class SimConfig(ServingConfig):
    """The serving settings (`spsim.config`) plus how the simulator advances."""

    fast: bool = True  # advance many decode passes per event where results are identical


def simulate(trace: Trace, cfg: SimConfig, cost=None, acceptance=None, progress=None, watch=None,
             watch_every: float | None = None, draft_sample: int = 0) -> RunResult:
    """Replay `trace` under `cfg`. `progress(done, total)` is called now and then if given.

    `watch(table, replicas, now)`, if given, is called every `watch_every` simulated seconds (default:
    the last arrival / 400); when it returns a true value the run stops there and the summary is of
    the state so far, with `stopped_at` (simulated seconds) and `stopped_why` (the value returned).
    It reads the state only: a run it never stops gives the same results as one without it.

    `draft_sample` > 0 records the draft length of every verification with drafts of that many
    requests (sampled by id: policies/draftlog.py) in `extra["draft_lengths"]` (the same results)."""
    if len(trace) == 0:
        raise SpsimError("the trace has no requests")
    if cfg.router not in ROUTERS:
        raise SpsimError(f"unknown router {cfg.router!r} (known: {', '.join(ROUTERS)})")
    serving = build(cfg, prefix_cache=trace.prefix_indptr is not None, block_size=trace.block_size,
                    cost=cost, acceptance=acceptance)
    cost, acc = serving.cost, serving.acceptance
    arrivals = arrival_times(trace, cfg)
    table = RequestTable(trace.prompt_tokens, trace.output_tokens, arrivals)
    env = simpy.Environment()
    n = len(trace)
    state = {"next": 0, "released": 0}

    replicas: list[Replica] = []
    for i in range(cfg.replicas):
        b = serving.new_batcher(table, trace.prefix_indptr, trace.prefix_ids)
        fp = FastPath(b)
        ex = SimExecutor(cost, acc, table, serving.want_entropy, cfg.draft_budget, serving.method, fp.one_pass)
        # a profile measured on the overlapped runtime: its arrivals are seen a pass later (replica.py)
        replicas.append(Replica(env, i, b, fp, ex, fast=cfg.fast, lag=cost.overlapped))
    router = ROUTERS[cfg.router]()
    log = None
    if draft_sample:
        from spsim.policies.draftlog import DraftLog

        log = DraftLog(n, draft_sample)
        for r in replicas:
            r.batcher.draft_log = log

    def route(rid: int, now: float) -> None:
        r = replicas[router.pick(replicas)]
        serving.arrived(rid, table)
        r.arrive(rid, now)

    def arrival_process():
        while state["next"] < n:
            i = state["next"]
            if arrivals[i] > env.now:
                yield env.timeout(arrivals[i] - env.now)
            state["next"] = i + 1
            route(i, env.now)

    def on_done(rid, now):
        serving.done(rid)
        if not cfg.concurrency:
            return
        nxt = state["released"]
        if nxt < n:
            state["released"] = nxt + 1
            table.arrival[nxt] = now
            route(nxt, now)

    for r in replicas:
        r.batcher.on_done = on_done
    if cfg.concurrency:
        first = min(cfg.concurrency, n)
        state["released"] = first
        for rid in range(first):
            route(rid, 0.0)
    else:
        env.process(arrival_process())

    if progress is not None:
        # a read-only monitor: one event per simulated chunk, negligible next to the passes
        def done() -> int:
            return sum(r.batcher.finished for r in replicas) + int((table.reject > 0).sum())

        step = max(1.0, float(arrivals[-1]) / 200)

        def monitor():
            while done() < n:
                yield env.timeout(step)
                progress(done(), n)

        env.process(monitor())
    if watch is None:
        env.run()
        return _drafts(summarize(table, replicas, cfg, cost, trace), log)
    stop = env.event()
    every = watch_every if watch_every else max(1e-3, float(arrivals[-1]) / 400)

    def watcher():
        while sum(r.batcher.finished for r in replicas) + int((table.reject > 0).sum()) < n:
            yield env.timeout(every)
            why = watch(table, replicas, env.now)
            if why:
                stop.succeed(why)
                return
        stop.succeed(None)  # everything done: nothing is left to run after this instant

    env.process(watcher())
    why = env.run(until=stop)
    res = summarize(table, replicas, cfg, cost, trace)
    if why:
        res.summary["stopped_at"] = float(env.now)
        res.summary["stopped_why"] = why
    return _drafts(res, log)


def _drafts(res: RunResult, log) -> RunResult:
    if log is not None:
        res.extra["draft_lengths"] = {"sampled_ids": log.ids, **log.records()}
    return res
