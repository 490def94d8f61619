"""Self-contained HTML reports (plotly.js inline once, no network) and the plots they share.

`spsim replay --report run.html`: one run: the summary table, TTFT and TPOT distributions,
latency against arrival time, GPU time by pass kind, acceptance by draft position (where the run
recorded each verification: `spsim.simulator.positions`) and per-request draft lengths over time
(a sample of requests: policies/draftlog.py); the summary beside it as `NAME.csv` and `NAME.md`.
`spsim compare --report cmp.html` (`write_compare_report`) and `spsim plan --report` use the same
page and plots."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import SpsimError

PLOT_IDS = ("plot-latency-distributions", "plot-latency-over-time", "plot-gpu-time", "plot-acceptance-position",
            "plot-draft-lengths")
DRAFT_LINES = 6  # sampled requests drawn per run in the draft-length plot (the most verified ones)
ROWS = [("completed", "completed"), ("rejected", "rejected"), ("duration", "duration (s)"),
        ("request_throughput", "request throughput (req/s)"), ("request_goodput", "goodput (req/s)"),
        ("output_throughput", "output throughput (tok/s)"), ("mean_ttft_ms", "TTFT mean (ms)"),
        ("p90_ttft_ms", "TTFT p90 (ms)"), ("p99_ttft_ms", "TTFT p99 (ms)"), ("mean_tpot_ms", "TPOT mean (ms)"),
        ("p90_tpot_ms", "TPOT p90 (ms)"), ("p99_tpot_ms", "TPOT p99 (ms)"), ("draft_acceptance_rate", "draft acceptance rate"),
        ("num_drafts", "num_drafts (vLLM)"), ("num_draft_tokens", "num_draft_tokens (vLLM)"),
        ("num_accepted_tokens", "num_accepted_tokens (vLLM)"), ("mean_acceptance_length", "mean acceptance length (vLLM)"),
        ("preemptions", "preemptions"), ("memory_note", "memory"), ("overload_note", "overload")]


def write_run_report(path: Path, summary: dict, requests: pd.DataFrame, title: str,
                     draft_lengths: dict | None = None) -> None:
    try:
        _write(Path(path), summary, requests, title, draft_lengths)
    except OSError as e:
        raise SpsimError(f"--report {path}: cannot write ({e.strerror or e})") from None


def summary_rows(s: dict) -> list[dict]:
    rows = [{"metric": label, "value": s.get(k)} for k, label in ROWS if s.get(k) is not None]
    if s.get("slo"):
        rows.insert(5, {"metric": f"SLO {s['slo']['slo']}", "value": "met" if s["slo"]["met"] else "missed"})
    return rows


def _write(path: Path, s: dict, req: pd.DataFrame, title: str, drafts: dict | None) -> None:
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
    figs.append(("plot-draft-lengths", DRAFT_TITLE, draft_lengths_figure(go, [("", drafts)] if drafts else [])))
    rows = summary_rows(s)
    table = "".join(f"<tr><td>{html.escape(r['metric'])}</td><td>{html.escape(_fmt(r['value']))}</td></tr>" for r in rows)
    write_page(path, title, "<p>Simulated with spsim (not measured on GPUs).</p>"
               f'<table id="table-summary">{table}</table>', figs)
    pd.DataFrame(rows).to_csv(path.with_suffix(".csv"), index=False)
    path.with_suffix(".md").write_text(f"# {title}\n\n| metric | value |\n|---|---|\n"
                                       + "".join(f"| {r['metric']} | {_fmt(r['value'])} |\n" for r in rows))


STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1200px} table{border-collapse:collapse;margin:1em 0}"
         " td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top} th{background:#f3f3f3}")
DRAFT_TITLE = ("Draft length per verification over time, sampled requests (drafts held at each verification "
               "with drafts; hover: accepted)")


def write_page(path: Path, title: str, body_html: str, figs: list[tuple[str, str, object]], height: int = 420) -> None:
    """One HTML file: the title, `body_html` (tables), then each (div id, title, plotly figure);
    plotly.js goes in once, inline, so the file opens with no network."""
    parts = []
    for i, (div, t, fig) in enumerate(figs):
        fig.update_layout(title=t, height=max(height, fig.layout.height or 0), margin=dict(t=60, l=60, r=20, b=50))
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=div))
    doc = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style></head><body>
<h1>{html.escape(title)}</h1>
{body_html}
{''.join(f'<div class="plot">{p}</div>' for p in parts)}
</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)


def draft_lengths_figure(go, series: list[tuple[str, dict | None]], lines: int = DRAFT_LINES):
    """Per-request draft lengths over time: for each (name, draft log records) the `lines` sampled
    requests with the most verifications, a step line of drafts held at each verification with
    drafts against its time (the records of `policies.draftlog.DraftLog`); one panel per name."""
    from plotly.subplots import make_subplots

    have = [(name, rec) for name, rec in series if rec and len(rec["rid"])]
    if not have:
        fig = go.Figure()
        fig.add_annotation(text="no verification with drafts among the sampled requests (a policy without "
                           "speculation, or none recorded)", showarrow=False)
        return fig
    fig = make_subplots(rows=len(have), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[n for n, _ in have] if len(have) > 1 else None)
    for row, (name, rec) in enumerate(have, start=1):
        rid = np.asarray(rec["rid"])
        ids, counts = np.unique(rid, return_counts=True)
        top = ids[np.argsort(-counts, kind="stable")[:lines]]
        for r in sorted(top.tolist()):
            m = rid == r
            d, a = np.asarray(rec["drafted"])[m], np.asarray(rec["accepted"])[m]
            fig.add_trace(go.Scatter(x=np.asarray(rec["t_s"])[m], y=d, mode="lines+markers", line=dict(shape="hv"),
                                     name=f"{name} request {r}" if name else f"request {r}", marker=dict(size=4),
                                     legendgroup=name or None, text=[f"accepted {x} of {y}" for x, y in zip(a, d)]),
                          row=row, col=1)
        fig.update_yaxes(title="drafts held" if len(have) > 1 else "drafts held at verification", rangemode="tozero",
                         row=row, col=1)
    fig.update_xaxes(title="simulated time (s)", row=len(have), col=1)
    fig.update_layout(height=max(420, 260 * len(have)))
    return fig


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}"
    return str(v)


# ---------------------------------------------------------------------------------------- compare
COMPARE_PLOT_IDS = ("plot-compare-figures", "plot-latency-distributions", "plot-gpu-time", "plot-acceptance-position",
                    "plot-draft-lengths")
POSITION_REQUESTS = 300  # the step-path rerun behind acceptance by draft position (first requests)
COMPARE_COLS = [("policy", "policy"), ("output_throughput", "out tok/s"), ("output_throughput_vs_ref", "x ref"),
                ("request_goodput", "goodput req/s"), ("mean_tpot_ms", "TPOT mean ms"), ("p99_tpot_ms", "TPOT p99 ms"),
                ("mean_ttft_ms", "TTFT mean ms"), ("p99_ttft_ms", "TTFT p99 ms"), ("tokens_per_verify", "tok/verify"),
                ("draft_acceptance_rate", "accept rate"), ("prefill_time_share", "prefill GPU share"),
                ("completed", "completed"), ("rejected", "rejected")]


def write_compare_report(path: Path, rows: list[dict], details: dict, trace, base, title: str) -> None:
    """`spsim compare --report`: the comparison table, bars of the main figures with their seed
    spread, TTFT and TPOT distributions, GPU time by pass kind, acceptance by draft position (a
    step-path rerun of each speculative policy over the first POSITION_REQUESTS requests, seed 0)
    and sampled requests' draft lengths over time (seed 0); `NAME.csv`/`NAME.md` beside it."""
    try:
        _write_compare(Path(path), rows, details, trace, base, title)
    except OSError as e:
        raise SpsimError(f"--report {path}: cannot write ({e.strerror or e})") from None


def _write_compare(path: Path, rows, details, trace, base, title) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = [r["policy"] for r in rows]
    panels = [("output_throughput", "Output throughput (tok/s)"), ("mean_tpot_ms", "Mean TPOT (ms)"),
              ("p99_ttft_ms", "p99 TTFT (ms)"), ("tokens_per_verify", "Tokens per verification")]
    f = make_subplots(rows=2, cols=2, subplot_titles=[p[1] for p in panels])
    for i, (key, _) in enumerate(panels):
        f.add_trace(go.Bar(x=names, y=[r[key] or 0 for r in rows], showlegend=False,
                           error_y=dict(type="data", array=[r[key + "_std"] or 0 for r in rows]),
                           marker_color=["#999" if r["clairvoyant"] else "#3b7dd8" for r in rows]),
                    row=i // 2 + 1, col=i % 2 + 1)
    figs = [("plot-compare-figures", "Main figures per policy (mean over seeds, bars: spread)", f)]
    f = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (ms)", "TPOT (ms)"))
    for name in names:
        d = details.get(name)
        if d is None:
            continue
        for col, key in ((1, "ttft"), (2, "tpot")):
            v = np.asarray(d[key], float) * 1e3
            f.add_trace(go.Box(y=v[np.isfinite(v)], name=name, boxpoints=False, showlegend=False), row=1, col=col)
    f.update_yaxes(type="log")
    figs.append(("plot-latency-distributions", "TTFT and TPOT per request (seed 0)", f))
    f = go.Figure()
    for kind in ("prefill", "mixed", "draft", "verify"):
        vals = []
        for name in names:
            pt = (details.get(name) or {}).get("summary", {}).get("pass_time_s") or {}
            vals.append(pt.get(kind, 0.0) / (sum(pt.values()) or 1.0))
        f.add_trace(go.Bar(x=names, y=vals, name=kind))
    f.update_layout(barmode="stack")
    f.update_yaxes(title="share of GPU time", tickformat=".0%")
    figs.append(("plot-gpu-time", "GPU time by pass kind (seed 0)", f))
    figs.append(("plot-acceptance-position", f"Acceptance by draft position (first {POSITION_REQUESTS} requests, "
                 "seed 0)", _compare_positions(go, names, trace, base)))
    figs.append(("plot-draft-lengths", DRAFT_TITLE + ", seed 0",
                 draft_lengths_figure(go, [(n, (details.get(n) or {}).get("draft_lengths")) for n in names])))
    table = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for _, h in COMPARE_COLS) + "</tr>" + "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(k)) if r.get(k) is not None else '-')}</td>"
                         for k, _ in COMPARE_COLS) + "</tr>" for r in rows)
    intro = (f"<p>{len(trace):,} requests; {base.replicas} x {base.model} on {base.gpu}; ratios (x ref) against "
             f"{html.escape(names[0])}. Simulated with spsim (not measured on GPUs)"
             + ("; oracle is a clairvoyant reference" if any(r["clairvoyant"] for r in rows) else "") + ".</p>")
    write_page(path, title, intro + f'<table id="table-compare">{table}</table>', figs)
    pd.DataFrame([{h: r.get(k) for k, h in COMPARE_COLS} for r in rows]).to_csv(path.with_suffix(".csv"), index=False)
    md = ["| " + " | ".join(h for _, h in COMPARE_COLS) + " |", "|" + "---|" * len(COMPARE_COLS)]
    md += ["| " + " | ".join(_fmt(r.get(k)) if r.get(k) is not None else "-" for k, _ in COMPARE_COLS) + " |"
           for r in rows]
    path.with_suffix(".md").write_text(f"# {title}\n\n" + "\n".join(md) + "\n")


def _compare_positions(go, names, trace, base):
    from spsim.policies.registry import parse_policy
    from spsim.simulator.positions import simulate_with_positions

    fig = go.Figure()
    head = trace.take(np.arange(min(POSITION_REQUESTS, len(trace))))
    for name in names:
        cls = parse_policy(name).cls
        if not cls.speculative or cls.oracle:
            continue
        s = simulate_with_positions(head, base.with_(policy=name, seed=0)).summary
        acc, held = s["num_accepted_tokens_per_pos"], s["num_drafted_per_pos"]
        if not held:
            continue
        fig.add_trace(go.Scatter(x=list(range(1, len(held) + 1)), y=[a / h if h else None for a, h in zip(acc, held)],
                                 mode="lines+markers", name=name, text=[f"{h:,} verifications held this draft" for h in held]))
    fig.update_xaxes(title="draft position (1 = first draft after a verification)")
    fig.update_yaxes(title="acceptance rate", range=[0, 1.02])
    if not fig.data:
        fig.add_annotation(text="no speculative policy (oracle reads the acceptance model: not recorded)", showarrow=False)
    return fig
