"""Metrics: one schema for both worlds (simulated and measured).

Per request: id, arrival, first token, finish, prompt and output tokens, drafts, verifies,
accepted, preemptions, rejection reason. Summary keys follow vLLM's `bench serve`
(`duration`, `completed`, `request_throughput`, `mean_ttft_ms`, ...) plus rejections, speculation
statistics and time per pass category. Definitions (one each):

- TTFT: first token - arrival. TPOT: (finish - first token) / (output tokens - 1), requests with
  more than one output token. ITL: gap between successive emissions of a request; a verification
  emits several tokens at once and counts as one gap. E2EL: finish - arrival.
- `draft_acceptance_rate` = accepted drafts / drafted tokens (drafts discarded at a verification
  count as drafted).
- A verification is any pass in which a request runs full attention on its `drafted + 1` query
  tokens; with zero drafts it is a plain autoregressive step and still counts.
  `mean_accepted_per_verify` = accepted drafts / verifications (target token not counted);
  `tokens_per_verify` = that + 1; `drafts_per_verify` = drafted tokens / verifications.
  `spec_*` variants count only verifications that had at least one draft.
- Goodput: completed requests meeting both SLOs (the trace's own where given, else the run's) per
  second of `duration`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

PER_REQUEST_COLUMNS = [
    "id", "replica", "arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens",
    "drafts", "verifies", "spec_verifies", "accepted", "preemptions", "recomputes", "prefix_hit_tokens", "rejected",
]
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
STATS = (("mean", np.mean), ("median", np.median), ("std", np.std),
         ("p90", lambda a: np.percentile(a, 90)), ("p99", lambda a: np.percentile(a, 99)))


@dataclass
class RunResult:
    summary: dict
    requests: pd.DataFrame
    extra: dict = field(default_factory=dict)

    def summary_json(self) -> str:
        return json.dumps(self.summary, indent=2, default=_jsonable) + "\n"


def _jsonable(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    raise TypeError(type(o))


def _f(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else x


def latency_stats(name: str, values_s: np.ndarray) -> dict:
    v = np.asarray(values_s, np.float64) * 1e3
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return {f"{s}_{name}": None for s, _ in STATS}
    return {f"{s}_{name}": _f(fn(v)) for s, fn in STATS}


def summarize_requests(req: pd.DataFrame, itl_s: np.ndarray, slo_ttft_s: np.ndarray, slo_tpot_s: np.ndarray,
                       default_slo: tuple[float, float]) -> dict:
    """The shared summary from a per-request frame and the emission gaps."""
    done = req["rejected"].eq("") & req["finish_s"].notna()
    d = req[done]
    finish = d["finish_s"].to_numpy()
    duration = float(finish.max()) if len(d) else 0.0
    ttft = (d["first_token_s"] - d["arrival_s"]).to_numpy()
    out = d["output_tokens"].to_numpy()
    multi = out > 1
    tpot = ((d["finish_s"] - d["first_token_s"]).to_numpy()[multi] / (out[multi] - 1))
    e2el = (d["finish_s"] - d["arrival_s"]).to_numpy()
    s_ttft = np.where(np.isnan(slo_ttft_s[done.to_numpy()]), default_slo[0], slo_ttft_s[done.to_numpy()])
    s_tpot = np.where(np.isnan(slo_tpot_s[done.to_numpy()]), default_slo[1], slo_tpot_s[done.to_numpy()])
    tpot_all = np.where(multi, (d["finish_s"] - d["first_token_s"]).to_numpy() / np.maximum(out - 1, 1), 0.0)
    good = int(((ttft <= s_ttft) & (tpot_all <= s_tpot)).sum())
    tin, tout = int(d["prompt_tokens"].sum()), int(out.sum())
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    rej = req.loc[~req["rejected"].eq(""), "rejected"].value_counts()
    drafts, verifies, accepted = int(req["drafts"].sum()), int(req["verifies"].sum()), int(req["accepted"].sum())
    spec_v = int(req["spec_verifies"].sum())
    s = {
        "duration": duration,
        "completed": int(done.sum()),
        "total_input_tokens": tin,
        "total_output_tokens": tout,
        "request_throughput": per_s(len(d)),
        "request_goodput": per_s(good),
        "goodput_slo": {"ttft_s": default_slo[0], "tpot_s": default_slo[1], "per_request_slo_from_trace":
                        bool(np.isfinite(slo_ttft_s).any() or np.isfinite(slo_tpot_s).any())},
        "output_throughput": per_s(tout),
        "total_token_throughput": per_s(tin + tout),
    }
    for name, vals in (("ttft_ms", ttft), ("tpot_ms", tpot), ("itl_ms", itl_s), ("e2el_ms", e2el)):
        s.update(latency_stats(name, vals))
    s["rejected"] = int((~req["rejected"].eq("")).sum())
    s["rejected_reasons"] = {str(k): int(v) for k, v in sorted(rej.items())}
    s["incomplete"] = int((req["rejected"].eq("") & req["finish_s"].isna()).sum())
    s["preemptions"] = int(req["preemptions"].sum())
    s["drafted_tokens"] = drafts
    s["verifications"] = verifies
    s["accepted_drafts"] = accepted
    s["draft_acceptance_rate"] = accepted / drafts if drafts else None
    s["mean_accepted_per_verify"] = accepted / verifies if verifies else None
    s["tokens_per_verify"] = (accepted / verifies + 1) if verifies else None
    s["drafts_per_verify"] = drafts / verifies if verifies else None
    s["spec_verifications"] = spec_v
    s["spec_mean_accepted_per_verify"] = accepted / spec_v if spec_v else None
    s["spec_drafts_per_verify"] = drafts / spec_v if spec_v else None
    return s


CATEGORIES = ("prefill", "mixed", "draft", "verify")  # PassPlan.category


def request_frame(table, ids: np.ndarray) -> pd.DataFrame:
    from spsim.policies.request import REJECT_REASONS

    t = table
    df = pd.DataFrame({
        "id": ids, "replica": t.replica, "arrival_s": t.arrival, "first_token_s": t.t_first,
        "finish_s": t.t_finish, "prompt_tokens": t.prompt, "output_tokens": t.output,
        "drafts": t.drafts, "verifies": t.verifies, "spec_verifies": t.spec_verifies, "accepted": t.accepted,
        "preemptions": t.preemptions, "recomputes": t.recomputes, "prefix_hit_tokens": t.hit_tokens,
        "rejected": np.asarray(REJECT_REASONS, dtype=object)[t.reject],
    })
    return df[PER_REQUEST_COLUMNS]


def summarize_run(table, batchers, cat_ns: list[dict], cat_passes: list[dict], cfg, cost, trace) -> RunResult:
    """The summary of a run in either world: the request table, each replica's batcher (emission
    gaps, KV pool), its GPU time (integer ns) and passes per pass category."""
    req = request_frame(table, np.asarray(trace.ids, dtype=object))
    gaps = [g for b in batchers for g in b.itl]
    itl = np.concatenate(gaps) if gaps else np.zeros(0)
    n = len(trace)
    nan = np.full(n, np.nan)
    slo_ttft = trace.slo_ttft_s if trace.slo_ttft_s is not None else nan
    slo_tpot = trace.slo_tpot_s if trace.slo_tpot_s is not None else nan
    s = summarize_requests(req, itl, slo_ttft, slo_tpot, (cfg.slo_ttft_s, cfg.slo_tpot_s))
    ns = {c: sum(d[c] for d in cat_ns) for c in CATEGORIES}
    s["pass_time_s"] = {c: ns[c] / 1e9 for c in CATEGORIES}
    s["passes"] = {c: sum(d[c] for d in cat_passes) for c in CATEGORIES}
    caches = [b.pool.cache for b in batchers if b.pool.cache is not None]
    if caches:
        q = sum(c.queried_blocks for c in caches)
        s["prefix_cache_hit_rate"] = (sum(c.hit_blocks for c in caches) / q) if q else 0.0
        s["prefix_cache_hit_tokens"] = int(table.hit_tokens.sum())
    else:
        s["prefix_cache_hit_rate"] = None
    s["kv_capacity_pages"] = int(batchers[0].cfg.capacity_pages)
    s["kv_peak_pages"] = int(max(b.pool.peak for b in batchers))
    s["config"] = {
        "policy": batchers[0].policy.spec, "replicas": cfg.replicas, "router": cfg.router,
        "seed": cfg.seed, "cost_model": getattr(cost, "name", type(cost).__name__),
        "model": cfg.model, "gpu": cfg.gpu, "tp": cfg.tp, "profile": cfg.profile,
        "acceptance": cfg.acceptance, "load": cfg.load,
        "draft_kv": cfg.draft_kv, "draft_budget": cfg.draft_budget, "max_draft": cfg.max_draft,
        "max_batch": cfg.max_batch, "token_budget": cfg.token_budget, "page_size": cfg.page_size,
    }
    return RunResult(s, req)

