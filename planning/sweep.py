"""Run a plan's configurations: in this process (--jobs 1), a local process pool (the default,
--jobs N), or Ray (--ray: a local `ray.init()`, or an existing cluster with --ray-address).

Configurations run in two waves: anchors (the first configuration on each GPU x model x TP; one
task each: rate search, then replica search), then the rest, each starting its search from its
anchor's answers (planning/search.py) and split in two tasks, its rate search and its replica
search (which starts from the anchor's fewest replicas), so two workers share the long ones
evenly; the replica tasks go first (multi-replica probes are the longest). Within a wave
tasks are independent and each depends only on the plan's inputs, so the results are identical
whatever the engine or the job count; the order of the results is the plan's, not the order they
finish in. Probes are cached on disk as they finish (planning/cache.py): an interrupted sweep
resumes where it stopped.
"""

from __future__ import annotations

import os
from typing import Callable

from spsim.errors import SpsimError

from .probe import Bench
from .search import SearchSettings
from .space import PlanConfig
from .worker import Job, merge, plan_config

_BENCH: Bench | None = None  # a pool worker's copy, set once by its initializer


def _init(bench: Bench) -> None:
    global _BENCH
    _BENCH = bench


def _pool_task(job: Job) -> dict:
    return plan_config(_BENCH, job)


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def waves(configs: list[PlanConfig]) -> tuple[list[int], dict[int, int]]:
    """Indices of the anchors, and each other configuration's anchor index."""
    first: dict[tuple, int] = {}
    anchor_of: dict[int, int] = {}
    for i, c in enumerate(configs):
        if c.hardware() in first:
            anchor_of[i] = first[c.hardware()]
        else:
            first[c.hardware()] = i
    return list(first.values()), anchor_of


def run_sweep(bench: Bench, configs: list[PlanConfig], settings: SearchSettings, rmin: int, rmax: int,
              target: float | None, native_rate: float, jobs: int = 1, ray: bool = False,
              ray_address: str | None = None, on_done: Callable[[int, dict], None] | None = None) -> list[dict]:
    anchors, anchor_of = waves(configs)
    start = native_rate * rmin
    results: dict[int, dict] = {}
    runner = _RayRunner(bench, jobs, ray_address) if ray else _PoolRunner(bench, jobs)
    try:
        first = {i: Job(configs[i], start, settings.grow_anchor, rmin, rmax, target, settings) for i in anchors}
        for i, res in runner.run(first):
            results[i] = res
            if on_done:
                on_done(i, res)
        rest, parts = {}, {}
        for i, a in sorted(anchor_of.items()):
            ans, wlo = results[a]["max_rate"], results[a].get("window_lo")
            s, g = (wlo or ans, settings.grow_near) if ans else (start, settings.grow_anchor)
            ratio = results[a].get("window_ratio")
            job = Job(configs[i], s, g, rmin, rmax, target, settings, ratio=ratio,
                      part="rate" if target is not None else "both")
            if target is not None:
                fa = (results[a].get("fewest") or {}).get("replicas")
                rest[(i, "replicas")] = Job(configs[i], s, g, rmin, rmax, target, settings, part="replicas",
                                            per_replica_guess=ans / rmin if ans else None, replica_start=fa)
            rest[(i, job.part)] = job
        rest = dict(sorted(rest.items(), key=lambda kv: kv[0][1] != "replicas"))  # replica tasks first
        for key, res in runner.run(rest):
            i, part = key
            parts.setdefault(i, {})[part] = res
            if len(parts[i]) == (2 if target is not None else 1):
                results[i] = merge(parts[i]["rate"], parts[i]["replicas"]) if target is not None else parts[i]["both"]
                if on_done:
                    on_done(i, results[i])
    finally:
        runner.close()
    return [results[i] for i in range(len(configs))]


class _PoolRunner:
    def __init__(self, bench: Bench, jobs: int):
        self.bench, self.jobs, self.pool = bench, max(1, jobs), None

    def run(self, tasks: dict[int, Job]):
        if self.jobs == 1 or len(tasks) <= 1:
            for i, job in tasks.items():
                yield i, plan_config(self.bench, job)
            return
        if self.pool is None:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(self.jobs, mp_context=mp.get_context("fork"), initializer=_init,
                                            initargs=(self.bench,))
        from concurrent.futures import as_completed

        futs = {self.pool.submit(_pool_task, job): i for i, job in tasks.items()}
        try:
            for f in as_completed(futs):
                yield futs[f], f.result()
        except BaseException:
            for f in futs:
                f.cancel()
            raise

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


class _RayRunner:
    def __init__(self, bench: Bench, jobs: int, address: str | None):
        try:
            import ray
        except ImportError:
            raise SpsimError("--ray needs Ray (pip install 'spsim[ray]' or pip install ray)") from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            kw = {"address": address} if address else {"num_cpus": max(1, jobs)}
            ray.init(include_dashboard=False, log_to_driver=False, **kw)
        self.bench_ref = ray.put(bench)
        self.remote = ray.remote(plan_config)

    def run(self, tasks: dict[int, Job]):
        ray = self.ray
        refs = {self.remote.remote(self.bench_ref, job): i for i, job in tasks.items()}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for r in done:
                yield refs[r], ray.get(r)

    def close(self):
        if self.started:
            self.ray.shutdown()
