"""The winner per objective, with the reason: recommendation.json and recommendation.md.

Objectives: the highest rate per GPU under the SLO, the most requests per dollar, the fewest GPUs
for the target rate (ties: cheaper, then faster), and the lowest median TPOT at the target rate
on those fewest GPUs. `oracle` (clairvoyant) is never a winner; it is listed as a reference.
"""

from __future__ import annotations

from spsim.report_numbers import readable

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
            reason += f" ({n} replica{'' if n == 1 else 's'} x TP {w['tp']} at {readable(w['target_rate'], 3)} req/s)"
            tied = [r["config"] for r in cand[1:] if r[field] == w[field]]
            if tied:
                reason += (f"; tied on GPUs with {', '.join(tied)}, chosen for its lower cost per hour, then its "
                           "higher rate per GPU")
        # what limits the winner is stated once, with every configuration's (limits.stated_once), not
        # after each objective: the README's plan said the same sentence four times
        out.append({"objective": key, "title": title, "winner": w["config"], "value": w[field], "unit": unit,
                    "runner_up": ru["config"] if ru else None, "runner_up_value": ru[field] if ru else None,
                    "limiter": w["limiter"], "why": w["why"], "reason": reason,
                    "settings": {k: w[k] for k in ("policy", "gpu", "model", "max_batch", "draft_budget", "draft_kv", "tp")}})
    return out


def _none_reason(rows, field) -> str:
    if field in ("gpus_for_target", "median_tpot_ms_at_target") and any(r.get("target_rate") for r in rows):
        return "no configuration meets the SLO at the target rate within the replica range"
    return "no configuration meets the SLO at any rate tried"


def _v(x) -> str:
    return readable(x, 3)  # 24,974 requests per USD, not 2.5e+04


def markdown(recs: list[dict], rows: list[dict], meta: dict) -> str:
    lines = [f"# spsim plan: {meta['trace']}", "",
             f"SLO `{meta['slo']}`; {meta['requests']:,} requests; rates searched at {meta['replicas_searched']} "
             f"replica{'' if meta['replicas_searched'] == 1 else 's'} to a relative precision of {meta['precision']:.0%}; prices: {meta['prices_source']}.", "",
             *([meta["costs"][:1].upper() + meta["costs"][1:] + ".", ""] if meta.get("costs") else []),
             "## Recommendation", ""]
    for r in recs:
        lines.append(f"- **{r['title']}**: " + (f"`{r['winner']}`: {r['reason']}" if r["winner"] else r["reason"]))
    lines += ["", "## Configurations", ""]
    lines.append(results_markdown(rows, recs, meta))
    lines += ["## What limits each configuration", ""]
    lines += limits_markdown(rows)
    return "\n".join(lines) + "\n"


MD_COLS = [("config", "configuration"), ("status", "status"), ("max_rate", "max req/s"),
           ("rate_per_gpu", "req/s per GPU (x ref)"), ("output_tok_s_per_gpu", "out tok/s per GPU"),
           ("requests_per_usd", "req per USD"), ("fewest_replicas", "replicas for target"),
           ("median_tpot_ms", "TPOT p50 ms"), ("limiter", "limited by")]


def results_markdown(rows: list[dict], recs: list[dict], meta: dict) -> str:
    from .marks import marked

    cells = marked(rows, recs, [k for k, _ in MD_COLS])
    out = ["| " + " | ".join(h for _, h in MD_COLS) + " |", "|" + "---|" * len(MD_COLS)]
    for line in cells:
        out.append("| " + " | ".join(("*" if b else "") + t + (f" ({x})" if x else "") for t, x, b in line.values())
                   + " |")
    ref = rows[0]["policy"] if rows else "-"
    return "\n".join(out) + f"\n\n\\* winner of the objective; x ref: rate per GPU against {ref} on the same settings.\n"


def limits_markdown(rows: list[dict]) -> list[str]:
    from .limits import stated_once

    lines = []
    for g in stated_once(rows):
        if g["code"] == "none":
            lines.append(f"- none ({', '.join(g['configs'])}): {g['evidence'][0][1]}")
            continue
        lines.append(f"- **{g['head']}** ({', '.join(g['configs'])})" + (f": {g['remedy']}" if g["remedy"] else ""))
        lines += [f"  - {', '.join(cs)}: {e}" for cs, e in g["evidence"]]
    return lines + [""]
