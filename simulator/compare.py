"""Compare policies on one trace: several seeds each, ratios against the first policy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from rich.table import Table

from .engine import SimConfig, simulate

# (summary key, label, higher is better)
FIGURES = [
    ("output_throughput", "out tok/s", True),
    ("request_goodput", "goodput req/s", True),
    ("mean_tpot_ms", "TPOT mean ms", False),
    ("p99_tpot_ms", "TPOT p99 ms", False),
    ("mean_ttft_ms", "TTFT mean ms", False),
    ("p99_ttft_ms", "TTFT p99 ms", False),
    ("mean_e2el_ms", "E2EL mean ms", False),
    ("tokens_per_verify", "tok/verify", True),
    ("draft_acceptance_rate", "accept rate", True),
]


def compare_policies(trace, base: SimConfig, specs: list[str], seeds: int, console=None) -> list[dict]:
    from rich.progress import Progress

    rows = []
    runs = [(spec, s) for spec in specs for s in range(seeds)]
    results: dict[str, list[dict]] = {spec: [] for spec in specs}
    prog = Progress(console=console, transient=True) if console else None
    if prog:
        prog.start()
        task = prog.add_task("comparing", total=len(runs))
    try:
        for spec, seed in runs:
            if prog:
                prog.update(task, description=f"{spec} seed {seed}")
            res = simulate(trace, base.with_(policy=spec, seed=seed))
            results[spec].append(res.summary)
            if prog:
                prog.advance(task)
    finally:
        if prog:
            prog.stop()
    ref = specs[0]
    ref_mean = {k: _mean([s[k] for s in results[ref]]) for k, _, _ in FIGURES}
    for spec in specs:
        row = {"policy": spec, "seeds": seeds, "upper_bound": spec.split(":")[0] == "oracle",
               "completed": _mean([s["completed"] for s in results[spec]]),
               "rejected": _mean([s["rejected"] for s in results[spec]])}
        for key, _, _ in FIGURES:
            vals = [s[key] for s in results[spec]]
            m = _mean(vals)
            row[key] = m
            row[key + "_std"] = _std(vals)
            r = ref_mean[key]
            row[key + "_vs_" + "ref"] = (m / r) if (m is not None and r not in (None, 0)) else None
        rows.append(row)
    return rows


def _mean(vals):
    v = [x for x in vals if x is not None]
    return float(np.mean(v)) if v else None


def _std(vals):
    v = [x for x in vals if x is not None]
    return float(np.std(v)) if len(v) > 1 else 0.0 if v else None


def _fmt(m, sd, ratio, show_ratio=True):
    if m is None:
        return "-"
    s = f"{m:,.3g}" if abs(m) < 10 else f"{m:,.0f}" if abs(m) >= 1000 else f"{m:,.1f}"
    if sd:
        s += f" ±{sd:.2g}"
    if show_ratio and ratio is not None:
        s += f"\n[dim]{ratio:.2f}x[/]"
    return s


def compare_table(rows: list[dict], title: str) -> Table:
    """Metrics as rows, policies as columns (stays readable with many metrics)."""
    t = Table(title=title, header_style="bold", show_lines=True)
    t.add_column("metric")
    for r in rows:
        t.add_column(r["policy"] + ("\n[dim](upper bound)[/]" if r["upper_bound"] else ""), justify="right")
    for key, label, hi in FIGURES:
        vals = [(r[key], i) for i, r in enumerate(rows) if r[key] is not None and not r["upper_bound"]]
        best = (max if hi else min)(vals)[1] if vals else None
        cells = []
        for i, r in enumerate(rows):
            c = _fmt(r[key], r[key + "_std"], r[key + "_vs_ref"], key not in ("tokens_per_verify", "draft_acceptance_rate"))
            cells.append(f"[bold green]{c}[/]" if best == i and len(rows) > 1 else c)
        t.add_row(label, *cells)
    t.caption = f"ratios against {rows[0]['policy']}; best non-oracle figure in green"
    return t


def write_report(out: Path, rows: list[dict], base: SimConfig) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps({"config": base.__dict__, "rows": rows}, indent=2, default=str) + "\n")
    pd.DataFrame(rows).to_csv(out / "compare.csv", index=False)
    names = [r["policy"] for r in rows]
    panels = [("output_throughput", "Output throughput (tok/s)"), ("mean_tpot_ms", "Mean TPOT (ms)"),
              ("p99_ttft_ms", "p99 TTFT (ms)"), ("tokens_per_verify", "Tokens per verification")]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[1] for p in panels])
    for i, (key, _) in enumerate(panels):
        vals = [r[key] or 0 for r in rows]
        err = [r[key + "_std"] or 0 for r in rows]
        fig.add_trace(go.Bar(x=names, y=vals, error_y=dict(type="data", array=err), showlegend=False,
                             marker_color=["#999" if r["upper_bound"] else "#3b7dd8" for r in rows]),
                      row=i // 2 + 1, col=i % 2 + 1)
    fig.update_layout(title=f"spsim compare: {base.replicas} x {base.model} on {base.gpu}", height=700)
    fig.write_html(out / "report.html", include_plotlyjs="cdn")
