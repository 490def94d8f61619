"""`spsim replay --report run.html`: one run as a self-contained HTML file (plotly.js inline, no
network): the summary table, TTFT and TPOT distributions, latency against arrival time, GPU time
by pass kind, and acceptance by draft position (where the run recorded each verification:
`spsim.simulator.positions`); the summary beside it as `NAME.csv` and `NAME.md`."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import SpsimError

PLOT_IDS = ("plot-latency-distributions", "plot-latency-over-time", "plot-gpu-time", "plot-acceptance-position")
ROWS = [("completed", "completed"), ("rejected", "rejected"), ("duration", "duration (s)"),
        ("request_throughput", "request throughput (req/s)"), ("request_goodput", "goodput (req/s)"),
        ("output_throughput", "output throughput (tok/s)"), ("mean_ttft_ms", "TTFT mean (ms)"),
        ("p90_ttft_ms", "TTFT p90 (ms)"), ("p99_ttft_ms", "TTFT p99 (ms)"), ("mean_tpot_ms", "TPOT mean (ms)"),
        ("p90_tpot_ms", "TPOT p90 (ms)"), ("p99_tpot_ms", "TPOT p99 (ms)"), ("draft_acceptance_rate", "draft acceptance rate"),
        ("num_drafts", "num_drafts (vLLM)"), ("num_draft_tokens", "num_draft_tokens (vLLM)"),
        ("num_accepted_tokens", "num_accepted_tokens (vLLM)"), ("mean_acceptance_length", "mean acceptance length (vLLM)"),
        ("preemptions", "preemptions"), ("memory_note", "memory"), ("overload_note", "overload")]


def write_run_report(path: Path, summary: dict, requests: pd.DataFrame, title: str) -> None:
    try:
        _write(Path(path), summary, requests, title)
    except OSError as e:
        raise SpsimError(f"--report {path}: cannot write ({e.strerror or e})") from None


def summary_rows(s: dict) -> list[dict]:
    rows = [{"metric": label, "value": s.get(k)} for k, label in ROWS if s.get(k) is not None]
    if s.get("slo"):
        rows.insert(5, {"metric": f"SLO {s['slo']['slo']}", "value": "met" if s["slo"]["met"] else "missed"})
    return rows


def _write(path: Path, s: dict, req: pd.DataFrame, title: str) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    done = req[req["rejected"].fillna("").eq("") & req["finish_s"].notna()]
    ttft = (done["first_token_s"] - done["arrival_s"]).to_numpy() * 1e3
    out = done["output_tokens"].to_numpy()
    tpot = np.where(out > 1, (done["finish_s"] - done["first_token_s"]).to_numpy() / np.maximum(out - 1, 1), np.nan) * 1e3
    figs = []
    f = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (ms)", "TPOT (ms)"))
    f.add_trace(go.Histogram(x=ttft, nbinsx=60, showlegend=False), row=1, col=1)
    f.add_trace(go.Histogram(x=tpot[np.isfinite(tpot)], nbinsx=60, showlegend=False), row=1, col=2)
    figs.append(("plot-latency-distributions", "TTFT and TPOT distributions", f))
    f = go.Figure()
    f.add_trace(go.Scattergl(x=done["arrival_s"], y=ttft, mode="markers", name="TTFT (ms)", marker=dict(size=3)))
    f.add_trace(go.Scattergl(x=done["arrival_s"], y=tpot, mode="markers", name="TPOT (ms)", marker=dict(size=3)))
    f.update_xaxes(title="arrival (s)")
    f.update_yaxes(type="log", title="ms")
    figs.append(("plot-latency-over-time", "Latency against arrival time (queueing shows as a rising TTFT)", f))
    pt = s.get("pass_time_s") or {}
    f = go.Figure(go.Bar(x=list(pt), y=list(pt.values())))
    f.update_yaxes(title="GPU seconds (all replicas)")
    figs.append(("plot-gpu-time", "GPU time by pass kind", f))
    f = go.Figure()
    acc, held = s.get("num_accepted_tokens_per_pos"), s.get("num_drafted_per_pos")
    if acc and held:
        f.add_trace(go.Scatter(x=list(range(1, len(held) + 1)), y=[a / h if h else None for a, h in zip(acc, held)],
                               mode="lines+markers", name="acceptance", text=[f"{h:,} verifications" for h in held]))
        f.update_yaxes(range=[0, 1.02], title="acceptance rate")
        f.update_xaxes(title="draft position")
    else:
        f.add_annotation(text="no drafts recorded (a policy without speculation, or oracle)", showarrow=False)
    figs.append(("plot-acceptance-position", "Acceptance by draft position", f))
    parts = []
    for i, (div, t, fig) in enumerate(figs):
        fig.update_layout(title=t, height=420, margin=dict(t=60, l=60, r=20, b=50))
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=div))
    rows = summary_rows(s)
    table = "".join(f"<tr><td>{html.escape(r['metric'])}</td><td>{html.escape(_fmt(r['value']))}</td></tr>" for r in rows)
    doc = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}} table{{border-collapse:collapse}}
td{{border:1px solid #ccc;padding:4px 8px;font-size:13px}}</style></head><body>
<h1>{html.escape(title)}</h1><p>Simulated with spsim (not measured on GPUs).</p>
<table id="table-summary">{table}</table>
{''.join(f'<div class="plot">{p}</div>' for p in parts)}
</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)
    pd.DataFrame(rows).to_csv(path.with_suffix(".csv"), index=False)
    path.with_suffix(".md").write_text(f"# {title}\n\n| metric | value |\n|---|---|\n"
                                       + "".join(f"| {r['metric']} | {_fmt(r['value'])} |\n" for r in rows))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}"
    return str(v)
