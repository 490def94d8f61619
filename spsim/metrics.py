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
- Decode phase (papers report decode-phase speedups at a fixed batch; compare those with these):
  decode-only passes are passes without a prefill chunk (categories mixed, draft, verify).
  `decode_time_per_token_ms` = GPU time in decode-only passes / output tokens they emitted (all
  requests together; at a fixed batch B a request's decode-phase TPOT is B times this, so ratios
  between policies at one batch are the papers' TPOT ratios); `decode_output_throughput` = those
  tokens per second of decode-only time per replica (replicas run side by side);
  `prefill_time_share` = GPU time in passes with a prefill chunk / all GPU time. Tokens emitted in
  decode-only passes are counted per pass where the executor reports them (`cat_tokens`);
  otherwise they are estimated as all output tokens emitted minus each request's first token
  (which its prefill pass samples): exact unless decoding requests ride in prefill passes, which
  the estimate counts as decode tokens (`decode_tokens_exact` says which).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .jsonlines import jsonable

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
        return json.dumps(self.summary, indent=2, default=jsonable) + "\n"


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
    s.update(vllm_spec_counters(spec_v, drafts, accepted))
    return s


def vllm_spec_counters(spec_verifies: int, drafts: int, accepted: int, per_pos: list[int] | None = None) -> dict:
    """The speculation counters under the names vLLM v1 exports (SpecDecodingStats, Prometheus
    `vllm:spec_decode_num_*`), so a simulated run can be held against a vLLM deployment's metrics:
    a draft is one request's drafts checked by one verification (vLLM: one proposal per request per
    step), so `num_drafts` = verifications with drafts; `mean_acceptance_length` = 1 + accepted /
    drafts (tokens emitted per verification with drafts, the target token included).
    `num_accepted_tokens_per_pos[i]`: verifications whose draft i (0-based) was accepted; it needs
    each verification's outcome, which only a recording run keeps (`spsim.simulator.positions`),
    else None."""
    return {"num_drafts": spec_verifies, "num_draft_tokens": drafts, "num_accepted_tokens": accepted,
            "num_accepted_tokens_per_pos": per_pos,
            "mean_acceptance_length": 1 + accepted / spec_verifies if spec_verifies else None}


CATEGORIES = ("prefill", "mixed", "draft", "verify")  # PassPlan.category


DECODE_CATEGORIES = ("mixed", "draft", "verify")


def decode_phase(table, ns: dict, cat_tokens: list[dict] | None, replicas: int) -> dict:
    """Decode-phase figures (definitions in the module doc) from GPU ns per pass category."""
    total = sum(ns.values())
    dec_ns = sum(ns[c] for c in DECODE_CATEGORIES)
    if cat_tokens is not None:
        tokens, exact = sum(d[c] for d in cat_tokens for c in DECODE_CATEGORIES), True
    else:
        emitted = int(np.asarray(table.committed).sum())
        firsts = int(np.isfinite(np.asarray(table.t_first)).sum())
        tokens, exact = max(emitted - firsts, 0), False
    dec_s = dec_ns / 1e9
    return {"decode_time_s": dec_s, "decode_tokens": tokens, "decode_tokens_exact": exact,
            "decode_time_per_token_ms": dec_s / tokens * 1e3 if tokens else None,
            "decode_output_throughput": tokens / (dec_s / replicas) if dec_s > 0 else None,
            "prefill_time_share": ns["prefill"] / total if total else None}


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


def summarize_run(table, batchers, cat_ns: list[dict], cat_passes: list[dict], cfg, cost, trace,
                  cat_tokens: list[dict] | None = None) -> RunResult:
    """The summary of a run in either world: the request table, each replica's batcher (emission
    gaps, KV pool), its GPU time (integer ns), passes and (where counted) output tokens emitted
    per pass category."""
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
    s.update(decode_phase(table, ns, cat_tokens, len(batchers)))
    caches = [b.pool.cache for b in batchers if b.pool.cache is not None]
    if caches:
        q = sum(c.queried_blocks for c in caches)
        s["prefix_cache_hit_rate"] = (sum(c.hit_blocks for c in caches) / q) if q else 0.0
        s["prefix_cache_hit_tokens"] = int(table.hit_tokens.sum())
    else:
        s["prefix_cache_hit_rate"] = None
    s["kv_capacity_pages"] = int(batchers[0].cfg.capacity_pages)
    s["kv_peak_pages"] = int(max(b.pool.peak for b in batchers))
    s.update(load_diagnostics(table, batchers, cfg, trace, s))
    if getattr(cfg, "slo", None):  # whether the run meets the --slo (spsim/slo.py)
        from .slo import SLO, Latencies

        s["slo"] = SLO.parse(cfg.slo).evaluate(Latencies.from_requests(req, s))
    s["config"] = {
        "policy": batchers[0].policy.spec, "replicas": cfg.replicas, "router": cfg.router,
        "seed": cfg.seed, "cost_model": cost.name,
        "model": cfg.model, "gpu": cfg.gpu, "tp": cfg.tp, "profile": cfg.profile or cost.source,
        "cost_heldout_error": cost.info.get("heldout_error"),
        # a profile measured on the overlapped runtime: arrivals wait a pass longer (simulator/replica.py)
        "overlapped_runtime": bool(cost.overlapped),
        # how the measured runtime pads graphed passes, priced (cost/padding.py); "none": not priced
        "padded_passes": cost.padding,
        "acceptance": cfg.acceptance, "load": cfg.load,
        "draft_kv": cfg.draft_kv, "draft_budget": cfg.draft_budget, "max_draft": cfg.max_draft,
        "max_batch": cfg.max_batch, "token_budget": cfg.token_budget, "page_size": cfg.page_size,
    }
    return RunResult(s, req)


# ---------------------------------------------------------------------------- diagnostics
# Keys that say what limited a run, read from the finished request table (no batcher hooks):
# the batch size reached against the one asked for, whether the queue kept growing, what the
# prefix cache could hold, and the rows the trace reader skipped. Warnings on the terminal are
# these notes.

OVERLOAD_GOODPUT_FRACTION = 0.05  # goodput below this share of throughput: "near zero"
OVERLOAD_WAIT_RATIO = 10.0  # last arrivals' mean TTFT this many times the first arrivals'
KV_NEAR_FULL = 0.9  # KV pages at this share of capacity: memory can be what holds requests back
MEMORY_HELD_BACK = 0.5  # requests held back by KV memory, time-averaged per replica


def _step_series(t_on: np.ndarray, t_off: np.ndarray, end: float):
    """Counts of intervals [t_on, t_off) over time: (times, counts after each time). Offs sort
    before ons at the same instant (a finish frees room for an admission at that time)."""
    on = np.isfinite(t_on)
    off = np.where(np.isfinite(t_off), t_off, end)[on]
    times = np.concatenate([t_on[on], off])
    delta = np.concatenate([np.ones(int(on.sum()), np.int64), -np.ones(len(off), np.int64)])
    order = np.lexsort((delta, times))
    return times[order], np.cumsum(delta[order])


def _running_and_demand(table, replica: int, end: float):
    """Per replica: peak requests running, peak requests routed there and unfinished, and the
    time-averaged number held back (waiting while the batch was below --max-batch is checked by the
    caller). Running is [first admission, finish): exact without preemptions, an upper bound with."""
    sel = table.replica == replica
    arrival, admit, finish = table.arrival[sel], table.t_admit[sel], table.t_finish[sel]
    ok = table.reject[sel] == 0
    arrival, admit, finish = arrival[ok], admit[ok], finish[ok]
    rt, rc = _step_series(admit, finish, end)
    dt, dc = _step_series(arrival, finish, end)
    return rt, rc, dt, dc


def _held_back(rt, rc, dt, dc, limit: int, end: float) -> float:
    """Integral over time of max(0, min(demand, limit) - running)."""
    if len(dt) == 0:
        return 0.0
    grid = np.unique(np.concatenate([rt, dt, [end]]))
    ri = np.searchsorted(rt, grid, side="right") - 1
    run = np.where(ri >= 0, rc[np.maximum(ri, 0)], 0) if len(rt) else np.zeros(len(grid), np.int64)
    dem_i = np.searchsorted(dt, grid, side="right") - 1
    dem = np.where(dem_i >= 0, dc[np.maximum(dem_i, 0)], 0)
    held = np.maximum(0, np.minimum(dem, limit) - run)[:-1]
    return float((held * np.diff(grid)).sum())


def load_diagnostics(table, batchers, cfg, trace, s: dict) -> dict:
    """Summary keys saying what limited the run (see the module's definitions above)."""
    d: dict = {}
    fin = table.t_finish[np.isfinite(table.t_finish)]
    end = float(fin.max()) if len(fin) else 0.0
    n_rep = len(batchers)
    max_batch = int(batchers[0].cfg.max_batch)
    cap = int(batchers[0].cfg.capacity_pages)
    concurrency = getattr(cfg, "concurrency", None)
    d["requested_concurrency"] = int(concurrency) if concurrency else None
    d["requested_max_batch"] = max_batch
    peaks, demands, held = [], [], []
    for r in range(n_rep):
        rt, rc, dt, dc = _running_and_demand(table, r, end)
        peaks.append(int(rc.max()) if len(rc) else 0)
        demands.append(int(dc.max()) if len(dc) else 0)
        held.append(_held_back(rt, rc, dt, dc, max_batch, end) / end if end > 0 else 0.0)
    d["peak_running_per_replica"] = peaks
    d["peak_running"] = max(peaks) if peaks else 0
    d["peak_outstanding_per_replica"] = demands
    d["held_back_by_memory_mean"] = float(np.mean(held)) if held else 0.0
    d["kv_peak_fraction"] = s["kv_peak_pages"] / cap if cap else None
    limited_by, note = None, None
    capped = [i for i in range(n_rep) if peaks[i] < min(max_batch, demands[i])]
    # held back while pages ran short: requests can also wait for prefill's token budget, which is
    # not memory (a plan run at 30 % of its pages was called memory-bound before this check)
    near_full = cap and s["kv_peak_pages"] >= KV_NEAR_FULL * cap
    if capped and ((d["held_back_by_memory_mean"] >= MEMORY_HELD_BACK and near_full) or s["preemptions"]):
        limited_by = "kv_memory"
        peak = d["peak_running"]
        bound = f" (an upper bound: {s['preemptions']:,} preemptions)" if s["preemptions"] else ""
        kv = f"KV pages peak {s['kv_peak_pages']:,} of {cap:,}"
        if concurrency:
            note = (f"KV memory caps the batch: at most {peak:,} requests ran at once per replica{bound}, not the "
                    f"{concurrency / n_rep:g} that --concurrency {concurrency} asks for (--max-batch {max_batch}); "
                    f"{kv}. The rest wait for memory, so a larger --concurrency gives the same throughput")
        else:
            note = (f"KV memory caps the batch: at most {peak:,} requests ran at once per replica{bound} while up "
                    f"to {max(demands):,} were waiting or running (--max-batch {max_batch} never reached); {kv}")
        note += "; more replicas, --tp or --kv-dtype fp8 hold more"
    elif any(peaks[i] >= max_batch and demands[i] > max_batch for i in range(n_rep)):
        limited_by = "max_batch"
    d["batch_limited_by"] = limited_by
    d["memory_note"] = note
    d.update(_overload(table, cfg, s))
    d.update(_prefix_note(table, batchers, cfg, trace, s, end))
    d["trace_skipped"] = {"rows": int(sum(trace.skipped.values())), "by_reason": dict(trace.skipped)}
    d["trace_warnings"] = {"rows": int(sum(trace.warnings.values())), "by_reason": dict(trace.warnings)}
    return d


def _overload(table, cfg, s: dict) -> dict:
    done = (table.reject == 0) & np.isfinite(table.t_finish) & np.isfinite(table.t_first)
    idx = np.flatnonzero(done)
    idx = idx[np.argsort(table.arrival[idx], kind="stable")]
    ttft = table.t_first[idx] - table.arrival[idx]
    n10 = max(1, len(idx) // 10)
    first = float(ttft[:n10].mean()) if len(idx) else None
    last = float(ttft[-n10:].mean()) if len(idx) else None
    thr = s["request_throughput"]
    frac = s["request_goodput"] / thr if thr else None
    d = {"ttft_first_decile_mean_ms": None if first is None else first * 1e3,
         "ttft_last_decile_mean_ms": None if last is None else last * 1e3,
         "goodput_fraction": frac}
    open_loop = not (getattr(cfg, "offline", False) or getattr(cfg, "concurrency", None))
    slo_ttft = s["goodput_slo"]["ttft_s"]
    growing = (open_loop and len(idx) >= 20 and last is not None
               and last > max(OVERLOAD_WAIT_RATIO * first, slo_ttft))
    low_goodput = frac is not None and len(idx) >= 20 and frac < OVERLOAD_GOODPUT_FRACTION
    d["overloaded"] = bool(growing)
    notes = []
    if growing:
        notes.append(f"overloaded: the queue keeps growing: the last 10% of arrivals waited {last:,.1f} s for "
                     f"their first token, the first 10% {first:,.1f} s; arrivals outpace service, so latency "
                     "figures depend on the trace's length (lower --qps, or add --replicas)")
    if low_goodput:
        slo = s["goodput_slo"]
        notes.append(f"goodput is {frac:.0%} of throughput: almost no request meets the SLO "
                     f"(TTFT <= {slo['ttft_s']:g} s, TPOT <= {slo['tpot_s'] * 1e3:g} ms; --slo-ttft/--slo-tpot)")
    d["overload_note"] = "; ".join(notes) if notes else None
    return d


def _prefix_note(table, batchers, cfg, trace, s: dict, end: float) -> dict:
    caches = [b.pool.cache for b in batchers if b.pool.cache is not None]
    if not caches or trace.prefix_indptr is None or not trace.block_size:
        return {"prefix_cache_repeat_fraction": None, "prefix_cache_room_pages": None, "prefix_cache_note": None}
    bs = int(trace.block_size)
    page = int(batchers[0].cfg.page_size)
    block_pages = max(1, bs // page)
    cap = int(batchers[0].cfg.capacity_pages)
    # the full prompt blocks the batcher looks up, in arrival order: a block seen before is a repeat
    # (the most an unbounded cache on one replica could hit)
    full = np.minimum(np.diff(trace.prefix_indptr), trace.prompt_tokens // bs)
    order = np.argsort(table.arrival, kind="stable")
    starts = trace.prefix_indptr[:-1][order]
    lens = full[order]
    rep = np.repeat(starts - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
    ids = trace.prefix_ids[np.arange(int(lens.sum())) + rep]
    uniq = len(np.unique(ids))
    repeat = 1 - uniq / len(ids) if len(ids) else 0.0
    # pages running requests held, time-averaged per replica (prompt from admission, output growing
    # linearly to the finish): what is left is the room cached blocks had beside them
    ok = (table.reject == 0) & np.isfinite(table.t_admit) & np.isfinite(table.t_finish)
    a, f1, f = table.t_admit[ok], table.t_first[ok], table.t_finish[ok]
    f1 = np.where(np.isfinite(f1), f1, f)
    tok_s = table.prompt[ok] * (f - a) + table.output[ok] * (f - f1) / 2
    held = float(tok_s.sum()) / page / end / len(batchers) if end > 0 else 0.0
    room = max(0.0, cap - held)
    hit = s.get("prefix_cache_hit_rate") or 0.0
    note = (f"prefix cache hit {hit:.1%} of prompt blocks; {repeat:.1%} of this run's blocks repeat an "
            f"earlier request's (the most an unbounded cache on one replica could hit). Cached blocks live "
            f"in the KV memory running requests leave free: about {room:,.0f} of {cap:,} pages per replica on "
            f"average ({room / block_pages:,.0f} blocks of {bs} tokens), against {uniq:,} distinct blocks in "
            f"this run; unreferenced blocks are evicted, least recently used first, whenever pages run short")
    if len(batchers) > 1:
        note += (f". With {len(batchers)} replicas and {getattr(cfg, 'router', 'the')} routing (not "
                 f"prefix-aware), a repeat hits only on the replica that cached it")
    return {"prefix_cache_repeat_fraction": repeat, "prefix_cache_room_pages": room, "prefix_cache_note": note}
