"""Turn a finished simulation's state into the shared metrics schema (spsim.metrics)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from spsim.metrics import PER_REQUEST_COLUMNS, RunResult, summarize_requests
from spsim.policies.request import REJECT_REASONS, RequestTable

from .replica import CATEGORIES


def request_frame(table: RequestTable, ids: np.ndarray) -> pd.DataFrame:
    t = table
    df = pd.DataFrame({
        "id": ids, "replica": t.replica, "arrival_s": t.arrival, "first_token_s": t.t_first,
        "finish_s": t.t_finish, "prompt_tokens": t.prompt, "output_tokens": t.output,
        "drafts": t.drafts, "verifies": t.verifies, "spec_verifies": t.spec_verifies, "accepted": t.accepted,
        "preemptions": t.preemptions, "recomputes": t.recomputes, "prefix_hit_tokens": t.hit_tokens,
        "rejected": np.asarray(REJECT_REASONS, dtype=object)[t.reject],
    })
    return df[PER_REQUEST_COLUMNS]


def summarize(table: RequestTable, replicas, cfg, cost, trace) -> RunResult:
    req = request_frame(table, np.asarray(trace.ids, dtype=object))
    itl = np.concatenate([g for r in replicas for g in r.batcher.itl]) if any(r.batcher.itl for r in replicas) else np.zeros(0)
    n = len(trace)
    nan = np.full(n, np.nan)
    slo_ttft = trace.slo_ttft_s if trace.slo_ttft_s is not None else nan
    slo_tpot = trace.slo_tpot_s if trace.slo_tpot_s is not None else nan
    s = summarize_requests(req, itl, slo_ttft, slo_tpot, (cfg.slo_ttft_s, cfg.slo_tpot_s))
    ns = {c: sum(r.cat_ns[c] for r in replicas) for c in CATEGORIES}
    s["pass_time_s"] = {c: ns[c] / 1e9 for c in CATEGORIES}
    s["passes"] = {c: sum(r.cat_passes[c] for r in replicas) for c in CATEGORIES}
    s["sim_events"] = {"segments": sum(r.segments for r in replicas)}
    caches = [r.batcher.pool.cache for r in replicas if r.batcher.pool.cache is not None]
    if caches:
        q = sum(c.queried_blocks for c in caches)
        s["prefix_cache_hit_rate"] = (sum(c.hit_blocks for c in caches) / q) if q else 0.0
        s["prefix_cache_hit_tokens"] = int(table.hit_tokens.sum())
    else:
        s["prefix_cache_hit_rate"] = None
    s["kv_capacity_pages"] = int(replicas[0].batcher.cfg.capacity_pages)
    s["kv_peak_pages"] = int(max(r.batcher.pool.peak for r in replicas))
    s["config"] = {
        "policy": replicas[0].batcher.policy.spec, "replicas": cfg.replicas, "router": cfg.router,
        "seed": cfg.seed, "cost_model": getattr(cost, "name", type(cost).__name__),
        "model": cfg.model, "gpu": cfg.gpu, "tp": cfg.tp, "profile": cfg.profile,
        "acceptance": cfg.acceptance, "load": ("offline" if cfg.offline else f"concurrency={cfg.concurrency}"
                                               if cfg.concurrency else f"qps={cfg.qps}" if cfg.qps else "trace"),
        "draft_kv": cfg.draft_kv, "draft_budget": cfg.draft_budget, "max_draft": cfg.max_draft,
        "max_batch": cfg.max_batch, "token_budget": cfg.token_budget, "page_size": cfg.page_size,
    }
    return RunResult(s, req)
