"""What one task of a sweep does: plan one configuration (its rate search, its replica search, or
both) and return plain data. The same function runs in-process, in a pool worker or on Ray; the
two parts of a configuration can run as separate tasks (`part`) and be merged (`merge`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .limits import limiter
from .probe import Bench
from .search import SearchSettings, Searcher
from .space import PlanConfig

# summary keys a probe row keeps for tables, Pareto and reports
KEEP = ("duration", "completed", "rejected", "request_throughput", "output_throughput", "total_token_throughput",
        "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
        "p90_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "draft_acceptance_rate", "mean_acceptance_length",
        "tokens_per_verify", "prefill_time_share", "pass_time_s", "peak_running", "kv_peak_pages",
        "kv_capacity_pages", "preemptions", "memory_note", "overload_note", "overloaded", "requested_max_batch",
        "num_drafts", "num_draft_tokens", "num_accepted_tokens", "stopped_at", "probe_wall_s", "probe_cpu_s")


@dataclass(frozen=True)
class Job:
    cfg: PlanConfig
    start: float  # first rate probed (req/s, all replicas together)
    grow: float | None  # bracketing factor of the first phase (None: gallop from a neighbour's answer)
    rmin: int
    rmax: int
    target: float | None  # req/s for the replica search
    settings: SearchSettings
    ratio: float | None = None  # the anchor's whole-trace answer over its window answer
    part: str = "both"  # "rate", "replicas" or "both"
    per_replica_guess: float | None = None  # for part="replicas": where the replica search starts
    replica_start: int | None = None  # a neighbour's fewest replicas: the whole-trace search starts there


def plan_config(bench: Bench, job: Job) -> dict:
    import time

    c0 = time.process_time()
    out = _plan_config(bench, job)
    out["task_cpu_s"] = time.process_time() - c0  # what the task cost (for benchmarks; not a result)
    return out


def _plan_config(bench: Bench, job: Job) -> dict:
    if job.part == "replicas":
        return _replicas_part(bench, job)
    from spsim.policies.registry import parse_policy

    cfg = job.cfg
    srch = Searcher(bench, cfg, job.settings)
    m = srch.max_rate(job.rmin, job.start, job.grow, job.ratio)
    ok_p, fail_p = m["lo_probe"], m["hi_probe"]
    fail_eval = fail_p.evaluate(bench.slo) if fail_p is not None else None
    spec = parse_policy(cfg.policy).cls
    lim = limiter(ok_p.summary if ok_p else None, fail_p.summary if fail_p else None, fail_eval, spec.speculative)
    out = {"config": dict(cfg.__dict__), "status": m["status"], "max_rate": m["lo"], "bracket_hi": m["hi"],
           "replicas_at": job.rmin, "speculative": bool(spec.speculative), "clairvoyant": bool(spec.oracle),
           "limiter": lim.code, "why": lim.sentence,
           "why_head": lim.head, "why_evidence": lim.evidence, "remedy": lim.remedy, "window_lo": m.get("window_lo"), "window_hi": m.get("window_hi"),
           "window_ratio": (math.sqrt(m["lo"] * m["hi"] / (m["window_lo"] * m["window_hi"]))
                            if m["status"] == "ok" and m.get("window_lo") and m.get("window_hi") else None),
           "ok": _keep(ok_p.summary) if ok_p else None, "ok_eval": ok_p.evaluate(bench.slo) if ok_p else None,
           "ok_goodput": _goodput(bench, ok_p) if ok_p else None,
           "fail": _keep(fail_p.summary) if fail_p else None, "fail_eval": fail_eval, "fewest": None}
    # the max-rate run's latencies, for the report's distributions
    out["ok_latency"] = {"ttft": ok_p.lat.ttft, "tpot": ok_p.lat.tpot} if ok_p else None
    if job.target is not None and job.part == "both":
        per = m["lo"] / job.rmin if m["lo"] else None
        out["fewest"] = _fewest(bench, srch, job, per)
    out["probes"] = _probe_rows(srch)
    return out


def _fewest(bench: Bench, srch: Searcher, job: Job, per: float | None) -> dict:
    f = srch.fewest_replicas(job.target, per, job.rmin, job.rmax, job.replica_start)
    return {"target": job.target, "replicas": f["replicas"], "tried": f["tried"], "tried_window": f["tried_window"],
            "summary": _keep(f["probe"].summary), "eval": f["probe"].evaluate(bench.slo)}


def _replicas_part(bench: Bench, job: Job) -> dict:
    srch = Searcher(bench, job.cfg, job.settings)
    return {"fewest": _fewest(bench, srch, job, job.per_replica_guess), "probes": _probe_rows(srch)}


def merge(rate: dict, replicas: dict) -> dict:
    """A configuration's rate part with its replica part (probes in the order rate, replicas)."""
    out = dict(rate)
    out["fewest"] = replicas["fewest"]
    out["task_cpu_s"] = [rate.get("task_cpu_s"), replicas.get("task_cpu_s")]
    out["probes"] = rate["probes"] + replicas["probes"]
    return out


def _probe_rows(srch: Searcher) -> list[dict]:
    return [{"rate": p["rate"], "replicas": p["replicas"], "requests": p["requests"], "kind": p["kind"],
             "met": p["met"], "cached": p["cached"], "stopped": p["stopped"], "summary": _keep(p["summary"]),
             "goodput": p["goodput"], "attainment": p["attainment"],
             "terms": [{k: t.get(k) for k in ("term", "measured_s", "ratio", "attained", "certain")}
                       for t in p["eval"]["terms"]]} for p in srch.probes]


def _keep(s: dict) -> dict:
    return {k: s.get(k) for k in KEEP}


def _goodput(bench: Bench, p) -> float:
    return p.goodput(bench.slo, bench.base.slo_ttft_s, bench.base.slo_tpot_s)
