"""What one task of a sweep does: plan one configuration (its rate search, then its replica
search) and return plain data. The same function runs in-process, in a pool worker or on Ray."""

from __future__ import annotations

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
        "num_drafts", "num_draft_tokens", "num_accepted_tokens")


@dataclass(frozen=True)
class Job:
    cfg: PlanConfig
    start: float  # first rate probed (req/s, all replicas together)
    grow: float
    rmin: int
    rmax: int
    target: float | None  # req/s for the replica search
    settings: SearchSettings


def plan_config(bench: Bench, job: Job) -> dict:
    from spsim.policies.registry import parse_policy

    cfg = job.cfg
    srch = Searcher(bench, cfg, job.settings)
    m = srch.max_rate(job.rmin, job.start, job.grow)
    ok_p, fail_p = m["lo_probe"], m["hi_probe"]
    fail_eval = fail_p.evaluate(bench.slo) if fail_p is not None else None
    spec = parse_policy(cfg.policy).cls
    code, why = limiter(ok_p.summary if ok_p else None, fail_p.summary if fail_p else None, fail_eval, spec.speculative)
    out = {"config": dict(cfg.__dict__), "status": m["status"], "max_rate": m["lo"], "bracket_hi": m["hi"],
           "replicas_at": job.rmin, "speculative": bool(spec.speculative), "clairvoyant": bool(spec.oracle),
           "limiter": code, "why": why,
           "ok": _keep(ok_p.summary) if ok_p else None, "ok_eval": ok_p.evaluate(bench.slo) if ok_p else None,
           "ok_goodput": _goodput(bench, ok_p) if ok_p else None,
           "fail": _keep(fail_p.summary) if fail_p else None, "fail_eval": fail_eval, "fewest": None}
    # the max-rate run's latencies, for the report's distributions
    out["ok_latency"] = {"ttft": ok_p.lat.ttft, "tpot": ok_p.lat.tpot} if ok_p else None
    if job.target is not None:
        per = m["lo"] / job.rmin if m["lo"] else None
        f = srch.fewest_replicas(job.target, per, job.rmin, job.rmax)
        out["fewest"] = {"target": job.target, "replicas": f["replicas"], "tried": f["tried"],
                         "summary": _keep(f["probe"].summary), "eval": f["probe"].evaluate(bench.slo)}
    out["probes"] = [{"rate": p["rate"], "replicas": p["replicas"], "requests": p["requests"], "kind": p["kind"],
                      "met": p["met"], "cached": p["cached"], "summary": _keep(p["summary"]), "goodput": p["goodput"],
                      "attainment": p["attainment"],
                      "terms": [{k: t.get(k) for k in ("term", "measured_s", "ratio", "attained")}
                                for t in p["eval"]["terms"]]} for p in srch.probes]
    return out


def _keep(s: dict) -> dict:
    return {k: s.get(k) for k in KEEP}


def _goodput(bench: Bench, p) -> float:
    return p.goodput(bench.slo, bench.base.slo_ttft_s, bench.base.slo_tpot_s)
