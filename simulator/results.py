"""Turn a finished simulation's state into the shared metrics schema (spsim.metrics)."""

from __future__ import annotations

from spsim.metrics import RunResult, summarize_run


def summarize(table, replicas, cfg, cost, trace) -> RunResult:
    # output tokens per pass category where the replica counts them (else metrics estimates them)
    tok = [getattr(r, "cat_tokens", None) for r in replicas]
    res = summarize_run(table, [r.batcher for r in replicas], [r.cat_ns for r in replicas],
                        [r.cat_passes for r in replicas], cfg, cost, trace,
                        None if any(t is None for t in tok) else tok)
    res.summary["sim_events"] = {"segments": sum(r.segments for r in replicas)}
    return res
