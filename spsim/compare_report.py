"""`spsim compare`'s report, the one page both `--out DIR` (DIR/report.html) and `--report FILE`
write: the comparison table (winner of each figure marked, ratios against the reference policy),
bars of the main figures with their seed spread, TTFT and TPOT per request, GPU time by pass kind,
acceptance by draft position (a step-path rerun of each speculative policy over the first
POSITION_REQUESTS requests, seed 0) and sampled requests' draft lengths over time (seed 0); the
table beside it as `NAME.csv` and `NAME.md`. One colour per policy in every plot."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from .compare_figures import FIGURES, best_row
from .errors import SpsimError
from .html_report import DRAFT_TITLE, draft_lengths_figure
from .report_colours import PASS_KINDS, PolicyColours
from .report_numbers import readable
from .report_page import Dropped, write_page

PLOT_IDS = ("plot-compare-figures", "plot-latency-distributions", "plot-gpu-time", "plot-acceptance-position",
            "plot-draft-lengths")
POSITION_REQUESTS = 300  # the step-path rerun behind acceptance by draft position (first requests)
TABLE_FIGURES = ("output_throughput", "request_goodput", "mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p99_ttft_ms",
                 "tokens_per_verify", "draft_acceptance_rate", "prefill_time_share")
COLS = [f for f in FIGURES if f[0] in TABLE_FIGURES]


def write_compare_report(paths, rows: list[dict], details: dict, trace, base, title: str) -> None:
    """Write the report to each of `paths` (a path or a list: `--out`'s and `--report`'s), the
    figures built once."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    import plotly.graph_objects as go

    figs = _figures(go, rows, details, trace, base)
    body = _intro(rows, trace, base) + table_html(rows)
    for path in paths:
        try:
            write_page(path, title, body, figs)
            pd.DataFrame(table_records(rows)).to_csv(path.with_suffix(".csv"), index=False)
            path.with_suffix(".md").write_text(f"# {title}\n\n{table_markdown(rows)}")
        except OSError as e:
            raise SpsimError(f"{path}: cannot write ({e.strerror or e})") from None


def _intro(rows, trace, base) -> str:
    ref = rows[0]["policy"]
    return (f"<p>{len(trace):,} requests; {base.replicas} x {base.model} on {base.gpu}; ratios against {html.escape(ref)} "
            "(the reference, first in --policies); the best figure of each column is starred and shaded. "
            "Simulated with spsim (not measured on GPUs)"
            + ("; oracle is a clairvoyant reference, never marked best" if any(r["clairvoyant"] for r in rows) else "")
            + ".</p>")


def _cells(rows: list[dict]) -> list[list[tuple[str, str | None, bool]]]:
    """Per row, per figure column: (value, ratio text or None, best)."""
    best = {key: best_row(rows, key, hi) for key, _, hi, _ in COLS}
    out = []
    for i, r in enumerate(rows):
        line = []
        for key, _, _, ratio in COLS:
            v = r.get(key)
            x = r.get(key + "_vs_ref") if ratio else None
            line.append(("-" if v is None else readable(v), None if x is None else f"{x:.2f}x", best[key] == i))
        out.append(line)
    return out


def table_html(rows: list[dict]) -> str:
    head = "<tr><th>policy</th>" + "".join(f"<th>{html.escape(label)}</th>" for _, label, _, _ in COLS) + \
        "<th>completed</th><th>rejected</th></tr>"
    body = []
    for r, cells in zip(rows, _cells(rows)):
        name = html.escape(r["policy"]) + (" <small>(clairvoyant reference)</small>" if r["clairvoyant"] else "")
        tds = "".join(f'<td class="num{" best" if b else ""}">{"*" if b else ""}{html.escape(v)}'
                      + (f'<br><span class="ratio">{x}</span>' if x else "") + "</td>" for v, x, b in cells)
        body.append(f"<tr><td>{name}</td>{tds}<td class=\"num\">{r['completed']:,}</td>"
                    f"<td class=\"num\">{r['rejected']:,}</td></tr>")
    return f'<table id="table-compare">{head}{"".join(body)}</table>'


def table_markdown(rows: list[dict]) -> str:
    heads = ["policy"] + [label for _, label, _, _ in COLS] + ["completed", "rejected"]
    md = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r, cells in zip(rows, _cells(rows)):
        vals = [("*" if b else "") + v + (f" ({x})" if x else "") for v, x, b in cells]
        md.append("| " + " | ".join([r["policy"], *vals, f"{r['completed']:,}", f"{r['rejected']:,}"]) + " |")
    return "\n".join(md) + f"\n\nRatios against {rows[0]['policy']}; * best figure.\n"


def table_records(rows: list[dict]) -> list[dict]:
    """The table as CSV rows: raw figures, each ratio in its own column, the winner named per figure."""
    best = {key: best_row(rows, key, hi) for key, _, hi, _ in COLS}
    out = []
    for i, r in enumerate(rows):
        rec = {"policy": r["policy"], "clairvoyant": r["clairvoyant"]}
        for key, label, _, ratio in COLS:
            rec[label] = r.get(key)
            if ratio:
                rec[f"{label} x ref"] = r.get(key + "_vs_ref")
        rec["best in"] = "; ".join(label for key, label, _, _ in COLS if best[key] == i)
        rec["completed"], rec["rejected"] = r["completed"], r["rejected"]
        out.append(rec)
    return out


def _figures(go, rows, details, trace, base) -> list:
    from plotly.subplots import make_subplots

    names = [r["policy"] for r in rows]
    colours = PolicyColours(names)
    panels = [("output_throughput", "Output throughput (tok/s)"), ("mean_tpot_ms", "Mean TPOT (ms)"),
              ("p99_ttft_ms", "p99 TTFT (ms)"), ("tokens_per_verify", "Tokens per verification")]
    f = make_subplots(rows=2, cols=2, subplot_titles=[p[1] for p in panels])
    for i, (key, _) in enumerate(panels):
        f.add_trace(go.Bar(x=names, y=[r[key] or 0 for r in rows], showlegend=False, marker_color=colours.of(names),
                           error_y=dict(type="data", array=[r[key + "_std"] or 0 for r in rows])),
                    row=i // 2 + 1, col=i % 2 + 1)
    figs = [("plot-compare-figures", "Main figures per policy (mean over seeds, error bars: spread)", f)]
    f = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (ms)", "TPOT (ms)"))
    for name in names:
        d = (details or {}).get(name)
        if d is None:
            continue
        for col, key in ((1, "ttft"), (2, "tpot")):
            v = np.asarray(d[key], float) * 1e3
            f.add_trace(go.Box(y=v[np.isfinite(v)], name=name, boxpoints=False, showlegend=False,
                               marker_color=colours(name)), row=1, col=col)
    f.update_yaxes(type="log")
    figs.append(("plot-latency-distributions", "TTFT and TPOT per request (seed 0)", f))
    f = go.Figure()
    for kind, grey in PASS_KINDS.items():
        vals = []
        for name in names:
            pt = ((details or {}).get(name) or {}).get("summary", {}).get("pass_time_s") or {}
            vals.append(pt.get(kind, 0.0) / (sum(pt.values()) or 1.0))
        f.add_trace(go.Bar(x=names, y=vals, name=kind, marker_color=grey))
    f.update_layout(barmode="stack")
    f.update_yaxes(title="share of GPU time", tickformat=".0%")
    figs.append(("plot-gpu-time", "GPU time by pass kind (seed 0)", f))
    figs.append(("plot-acceptance-position", f"Acceptance by draft position (first {POSITION_REQUESTS} requests, "
                 "seed 0)", _positions(go, names, trace, base, colours, details or {})))
    figs.append(("plot-draft-lengths", DRAFT_TITLE + ", seed 0",
                 draft_lengths_figure(go, [(n, ((details or {}).get(n) or {}).get("draft_lengths")) for n in names],
                                      colours=colours)))
    return figs


def _positions(go, names, trace, base, colours, details: dict):
    """Acceptance by draft position: seed 0's own where it ran on the step path over the whole
    trace (spsim/compare.py), else a step-path rerun over the first POSITION_REQUESTS."""
    from spsim.policies.registry import parse_policy
    from spsim.simulator.positions import simulate_with_positions

    fig = go.Figure()
    head = trace.take(np.arange(min(POSITION_REQUESTS, len(trace))))
    for name in names:
        cls = parse_policy(name).cls
        if not cls.speculative or cls.oracle:
            continue
        acc, held = (details.get(name) or {}).get("positions") or _rerun(simulate_with_positions, head, base, name)
        if not held:
            continue
        fig.add_trace(go.Scatter(x=list(range(1, len(held) + 1)), y=[a / h if h else None for a, h in zip(acc, held)],
                                 mode="lines+markers", name=name, line=dict(color=colours(name)),
                                 text=[f"{h:,} verifications held this draft" for h in held]))
    fig.update_xaxes(title="draft position (1 = first draft after a verification)")
    fig.update_yaxes(title="acceptance rate", range=[0, 1.02])
    if not fig.data:
        return Dropped("no speculative policy drafted (oracle reads the acceptance model: not recorded)")
    return fig


def _rerun(simulate_with_positions, head, base, name):
    s = simulate_with_positions(head, base.with_(policy=name, seed=0)).summary
    return s["num_accepted_tokens_per_pos"], s["num_drafted_per_pos"]
