"""The sweep's results as one row per configuration (results.csv) and one per probe (probes.csv)."""

from __future__ import annotations

from .space import PlanConfig, varying


def result_rows(results: list[dict], prices: dict[str, float]) -> list[dict]:
    configs = [PlanConfig(**r["config"]) for r in results]
    vary = varying(configs)
    rows = []
    for cfg, r in zip(configs, results):
        gpus = r["replicas_at"] * cfg.tp
        price = prices.get(cfg.gpu)
        ok = r["ok"] or {}
        rate = r["max_rate"]
        row = {"config": cfg.label(vary), **r["config"], "clairvoyant": r["clairvoyant"], "status": r["status"],
               "max_rate": rate, "bracket_hi": r["bracket_hi"], "replicas_searched": r["replicas_at"],
               "gpus_searched": gpus, "rate_per_gpu": rate / gpus if rate else None,
               "goodput_per_gpu": (r["ok_goodput"] or 0) / gpus if rate else None,
               "output_tok_s_per_gpu": ok.get("output_throughput", 0) / gpus if rate else None,
               "usd_per_gpu_hour": price}
        row["requests_per_usd"] = row["rate_per_gpu"] * 3600 / price if rate and price else None
        row["mtok_per_usd"] = row["output_tok_s_per_gpu"] * 3600 / price / 1e6 if rate and price else None
        for t in (r["ok_eval"] or {}).get("terms", []):
            if t["stat"] == "attain":
                row["attained"] = t["attained"]
            else:
                row[f"{t['metric']}_{t['stat']}_ms"] = t["measured_s"] * 1e3 if t["measured_s"] is not None else None
        row["median_tpot_ms"] = ok.get("median_tpot_ms")
        row["draft_acceptance_rate"] = ok.get("draft_acceptance_rate")
        row["mean_acceptance_length"] = ok.get("mean_acceptance_length")
        f = r["fewest"]
        if f is not None:
            row["target_rate"] = f["target"]
            row["fewest_replicas"] = f["replicas"]
            row["gpus_for_target"] = f["replicas"] * cfg.tp if f["replicas"] else None
            row["usd_per_hour_for_target"] = row["gpus_for_target"] * price if f["replicas"] and price else None
            row["median_tpot_ms_at_target"] = f["summary"].get("median_tpot_ms") if f["replicas"] else None
        row["rejected"] = ok.get("rejected")
        row["limiter"] = r["limiter"]
        row["why"] = r["why"]
        row["why_head"], row["why_evidence"], row["remedy"] = r.get("why_head"), r.get("why_evidence"), r.get("remedy")
        row["probes"] = len(r["probes"])
        row["probes_simulated"] = sum(not p["cached"] for p in r["probes"])
        row["probes_full"] = sum(p["kind"] == "full" for p in r["probes"])
        row["probes_stopped"] = sum(bool(p.get("stopped")) for p in r["probes"])
        row["window_max_rate"] = r.get("window_lo")
        rows.append(row)
    _vs_ref(rows, configs)
    return rows


def _vs_ref(rows: list[dict], configs: list[PlanConfig]) -> None:
    """`rate_per_gpu_vs_ref`: each row's rate per GPU against the reference policy's (the first
    of --policies) on the same GPU, model and settings; None where either has no rate."""
    from dataclasses import replace

    by_cfg = dict(zip(configs, rows))
    for cfg, row in by_cfg.items():
        ref = by_cfg.get(replace(cfg, policy=configs[0].policy))
        row["reference"] = ref["config"] if ref else None
        row["rate_per_gpu_vs_ref"] = (row["rate_per_gpu"] / ref["rate_per_gpu"]
                                      if ref and row["rate_per_gpu"] and ref["rate_per_gpu"] else None)


def probe_rows(results: list[dict], labels: list[str]) -> list[dict]:
    rows = []
    for label, r in zip(labels, results):
        tp = r["config"]["tp"]
        for p in r["probes"]:
            s = p["summary"]
            rows.append({"config": label, **r["config"], "rate": p["rate"], "replicas": p["replicas"],
                         "requests": p["requests"], "kind": p["kind"], "met": p["met"], "cached": p["cached"],
                         "stopped": p.get("stopped"), "stopped_at_s": s.get("stopped_at"),
                         "wall_s": s.get("probe_wall_s"), "cpu_s": s.get("probe_cpu_s"), "goodput": p["goodput"], "attainment": p["attainment"],
                         "output_tok_s_per_gpu": (s.get("output_throughput") or 0) / (p["replicas"] * tp),
                         "request_throughput": s.get("request_throughput"),
                         "median_tpot_ms": s.get("median_tpot_ms"), "p99_tpot_ms": s.get("p99_tpot_ms"),
                         "p90_ttft_ms": s.get("p90_ttft_ms"), "p99_ttft_ms": s.get("p99_ttft_ms"),
                         **{f"measured {t['term']}": (t["measured_s"] if t["measured_s"] is not None else t["attained"])
                            for t in p["terms"]}})
    return rows


def markdown_table(rows: list[dict], cols: list[tuple[str, str]]) -> str:
    """A markdown table of `rows` with (key, header) columns; numbers rounded for reading."""
    out = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(_cell(r.get(k)) for k, _ in cols) + " |")
    return "\n".join(out) + "\n"


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v).replace("|", "/")
