"""The winner per objective, with the reason: recommendation.json and recommendation.md.

Objectives: the highest rate per GPU under the SLO, the most requests per dollar, the fewest GPUs
for the target rate (ties: cheaper, then faster), and the lowest median TPOT at the target rate
on those fewest GPUs. `oracle` (clairvoyant) is never a winner; it is listed as a reference.
"""

from __future__ import annotations

OBJECTIVES = [
    # (key, title, row field, higher is better, unit)
    ("rate_per_gpu", "highest request rate per GPU under the SLO", "rate_per_gpu", True, "req/s per GPU"),
    ("per_dollar", "most requests per dollar under the SLO", "requests_per_usd", True, "requests per USD"),
    ("fewest_gpus", "fewest GPUs for the target rate", "gpus_for_target", False, "GPUs"),
    ("latency_at_target", "lowest median TPOT at the target rate (on the fewest replicas)",
     "median_tpot_ms_at_target", False, "ms"),
]


def recommend(rows: list[dict], precision: float = 0.0) -> list[dict]:
    """`precision`: the rate search's; winners of rate-based objectives closer than it to the
    runner-up are called a tie (the search cannot tell them apart)."""
    out = []
    for key, title, field, hi, unit in OBJECTIVES:
        cand = [r for r in rows if r.get(field) is not None and not r["clairvoyant"]]
        if not cand:
            out.append({"objective": key, "title": title, "winner": None,
                        "reason": _none_reason(rows, field)})
            continue
        if key == "fewest_gpus":
            cand.sort(key=lambda r: (r[field], r.get("usd_per_hour_for_target") or 0, -(r["rate_per_gpu"] or 0)))
        else:
            cand.sort(key=lambda r: -r[field] if hi else r[field])
        w = cand[0]
        ru = cand[1] if len(cand) > 1 else None
        reason = f"{_v(w[field])} {unit[:-1] if unit == 'GPUs' and w[field] == 1 else unit}"
        if ru is not None:
            rel = (w[field] / ru[field]) if ru[field] else None
            if key != "fewest_gpus":
                reason += f" against {_v(ru[field])} for {ru['config']}" + (f" ({rel:.2f}x)" if rel else "")
                if key in ("rate_per_gpu", "per_dollar") and rel and rel < 1 + precision:
                    reason += f": a tie within the search's {precision:.0%} precision"
        if key == "fewest_gpus":
            n = w['fewest_replicas']
            reason += f" ({n} replica{'' if n == 1 else 's'} x TP {w['tp']} at {w['target_rate']:.3g} req/s)"
            tied = [r["config"] for r in cand[1:] if r[field] == w[field]]
            if tied:
                reason += (f"; tied on GPUs with {', '.join(tied)}, chosen for its lower cost per hour, then its "
                           "higher rate per GPU")
        reason += f". Limited by {w['why']}"
        out.append({"objective": key, "title": title, "winner": w["config"], "value": w[field], "unit": unit,
                    "runner_up": ru["config"] if ru else None, "runner_up_value": ru[field] if ru else None,
                    "limiter": w["limiter"], "reason": reason,
                    "settings": {k: w[k] for k in ("policy", "gpu", "model", "max_batch", "draft_budget", "draft_kv", "tp")}})
    return out


def _none_reason(rows, field) -> str:
    if field in ("gpus_for_target", "median_tpot_ms_at_target") and any(r.get("target_rate") for r in rows):
        return "no configuration meets the SLO at the target rate within the replica range"
    return "no configuration meets the SLO at any rate tried"


def _v(x) -> str:
    return f"{x:,.3g}" if isinstance(x, float) else str(x)


def markdown(recs: list[dict], rows: list[dict], meta: dict) -> str:
    from .tables import markdown_table

    lines = [f"# spsim plan: {meta['trace']}", "",
             f"SLO `{meta['slo']}`; {meta['requests']:,} requests; rates searched at {meta['replicas_searched']} "
             f"replica{'' if meta['replicas_searched'] == 1 else 's'} to a relative precision of {meta['precision']:.0%}; prices: {meta['prices_source']}.", "",
             *([meta["costs"][:1].upper() + meta["costs"][1:] + ".", ""] if meta.get("costs") else []),
             "## Recommendation", ""]
    for r in recs:
        lines.append(f"- **{r['title']}**: " + (f"`{r['winner']}`: {r['reason']}" if r["winner"] else r["reason"]))
    lines += ["", "## Configurations", ""]
    cols = [("config", "configuration"), ("status", "status"), ("max_rate", "max req/s"), ("rate_per_gpu", "req/s per GPU"),
            ("output_tok_s_per_gpu", "out tok/s per GPU"), ("requests_per_usd", "req per USD"),
            ("fewest_replicas", "replicas for target"), ("median_tpot_ms", "TPOT p50 ms"), ("limiter", "limited by")]
    lines.append(markdown_table(rows, cols))
    lines += ["## What limits each configuration", ""]
    lines += [f"- `{r['config']}`: {r['why']}" for r in rows]
    return "\n".join(lines) + "\n"
