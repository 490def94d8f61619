"""Turn a finished simulation's state into the shared metrics schema (spsim.metrics)."""

from __future__ import annotations

from spsim.metrics import RunResult, summarize_run


def summarize(table, replicas, cfg, cost, trace) -> RunResult:
    res = summarize_run(table, [r.batcher for r in replicas], [r.cat_ns for r in replicas],
                        [r.cat_passes for r in replicas], cfg, cost, trace)
    res.summary["sim_events"] = {"segments": sum(r.segments for r in replicas)}
    return res
