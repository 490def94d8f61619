"""Summary statistics of a trace (what `spsim trace stats` prints)."""

from __future__ import annotations

import numpy as np

from .trace import Trace


def _lengths(x: np.ndarray) -> dict:
    if len(x) == 0:
        return {k: None for k in ("min", "p50", "mean", "p90", "p99", "max")}
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {"min": int(x.min()), "p50": float(p50), "mean": float(x.mean()), "p90": float(p90),
            "p99": float(p99), "max": int(x.max())}


def stats(trace: Trace) -> dict:
    """count, span (s), QPS (= count / span), prompt and output length percentiles, skipped rows."""
    n = len(trace)
    span = float(trace.arrival_s[-1] - trace.arrival_s[0]) if n else 0.0
    out = {
        "count": n,
        "span_s": span,
        "qps": n / span if span > 0 else None,
        "prompt_tokens": _lengths(trace.prompt_tokens),
        "output_tokens": _lengths(trace.output_tokens),
        "total_prompt_tokens": int(trace.prompt_tokens.sum()),
        "total_output_tokens": int(trace.output_tokens.sum()),
        "skipped": dict(trace.skipped),
        "skipped_total": int(sum(trace.skipped.values())),
        "warnings": dict(trace.warnings),
        "warnings_total": int(sum(trace.warnings.values())),
        "source_format": trace.meta.get("source_format"),
    }
    if trace.prefix_indptr is not None:
        ids = np.sort(trace.prefix_ids)  # sort-based count: numpy's hash unique is slow here
        unique = int(len(ids) > 0) + int((ids[1:] != ids[:-1]).sum())
        out["prefix"] = {
            "block_size": trace.block_size,
            "blocks": int(len(ids)),
            "unique_blocks": unique,
            # share of prefix blocks already seen earlier in the trace: an upper bound on the
            # prefix-cache hit rate with an unbounded cache
            "repeat_fraction": float(1 - unique / len(ids)) if len(ids) else 0.0,
        }
    if trace.slo_ttft_s is not None:
        out["slo_requests"] = int((~np.isnan(trace.slo_ttft_s) | ~np.isnan(trace.slo_tpot_s)).sum())
    if trace.extra:
        out["extra_columns"] = sorted(trace.extra)
    return out
