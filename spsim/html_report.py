"""Self-contained HTML reports (plotly.js inline once, no network) and the plots they share.

`spsim replay --report run.html`: one run: the summary table, TTFT and TPOT distributions,
latency against arrival time, GPU time by pass kind, acceptance by draft position (where the run
recorded each verification: `spsim.simulator.positions`) and per-request draft lengths over time
(a sample of requests: policies/draftlog.py); the summary beside it as `NAME.csv` and `NAME.md`.
`spsim compare` (spsim/compare_report.py) and `spsim plan --report` use the same page
(spsim/report_page.py) and plots."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import SpsimError
from .report_colours import PASS_KINDS, PolicyColours
from .report_numbers import readable
from .report_page import Dropped, write_page

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
    colours = PolicyColours([""])  # the run's one policy: one colour in every plot, as in compare's
    run = colours("")
    figs = []
    f = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (ms)", "TPOT (ms)"))
    f.add_trace(go.Histogram(x=ttft, nbinsx=60, showlegend=False, marker_color=run), row=1, col=1)
    f.add_trace(go.Histogram(x=tpot[np.isfinite(tpot)], nbinsx=60, showlegend=False, marker_color=run), row=1, col=2)
    figs.append(("plot-latency-distributions", "TTFT and TPOT distributions", f))
    f = go.Figure()
    f.add_trace(go.Scattergl(x=done["arrival_s"], y=ttft, mode="markers", name="TTFT (ms)", marker=dict(size=3, color=run)))
    f.add_trace(go.Scattergl(x=done["arrival_s"], y=tpot, mode="markers", name="TPOT (ms)",
                             marker=dict(size=3, color="#7f7f7f")))  # grey: the second series, no policy's colour
    f.update_xaxes(title="arrival (s)")
    f.update_yaxes(type="log", title="ms")
    figs.append(("plot-latency-over-time", "Latency against arrival time (queueing shows as a rising TTFT)", f))
    pt = s.get("pass_time_s") or {}
    f = go.Figure(go.Bar(x=list(pt), y=list(pt.values()), marker_color=[PASS_KINDS.get(k, "#999") for k in pt]))
    f.update_yaxes(title="GPU seconds (all replicas)")
    figs.append(("plot-gpu-time", "GPU time by pass kind", f))
    acc, held = s.get("num_accepted_tokens_per_pos"), s.get("num_drafted_per_pos")
    if acc and held:
        f = go.Figure(go.Scatter(x=list(range(1, len(held) + 1)), y=[a / h if h else None for a, h in zip(acc, held)],
                                 mode="lines+markers", name="acceptance", line=dict(color=run),
                                 text=[f"{h:,} verifications" for h in held]))
        f.update_yaxes(range=[0, 1.02], title="acceptance rate")
        f.update_xaxes(title="draft position")
    else:
        f = Dropped("no drafts recorded (a policy without speculation, or oracle)")
    figs.append(("plot-acceptance-position", "Acceptance by draft position", f))
    figs.append(("plot-draft-lengths", DRAFT_TITLE, draft_lengths_figure(go, [("", drafts)] if drafts else [],
                                                                         colours=colours)))
    rows = summary_rows(s)
    table = "".join(f"<tr><td>{html.escape(r['metric'])}</td><td>{html.escape(_fmt(r['value']))}</td></tr>" for r in rows)
    write_page(path, title, "<p>Simulated with spsim (not measured on GPUs).</p>"
               f'<table id="table-summary">{table}</table>', figs)
    pd.DataFrame(rows).to_csv(path.with_suffix(".csv"), index=False)
    path.with_suffix(".md").write_text(f"# {title}\n\n| metric | value |\n|---|---|\n"
                                       + "".join(f"| {r['metric']} | {_fmt(r['value'])} |\n" for r in rows))


DRAFT_TITLE = ("Draft length per verification over time, sampled requests (drafts held at each verification "
               "with drafts; hover: accepted)")


DASHES = ("solid", "dot", "dash", "longdash", "dashdot", "longdashdot")  # one per sampled request of a panel


def draft_lengths_figure(go, series: list[tuple[str, dict | None]], lines: int = DRAFT_LINES,
                         colours: PolicyColours | None = None):
    """Per-request draft lengths over time: for each (name, draft log records) the `lines` sampled
    requests with the most verifications, a step line of drafts held at each verification with
    drafts against its time (the records of `policies.draftlog.DraftLog`); one panel per name,
    titled with it. Lines are in the name's colour, one dash per request, and have no legend
    (hover names the request): a legend of every request repeated plotly's ten colours over 30
    entries. Dropped where no sampled request verified drafts."""
    from plotly.subplots import make_subplots

    have = [(name, rec) for name, rec in series if rec and len(rec["rid"])]
    if not have:
        return Dropped("no verification with drafts among the sampled requests (a policy without speculation, "
                       "or none recorded)")
    colours = colours or PolicyColours([n for n, _ in have])
    fig = make_subplots(rows=len(have), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[n for n, _ in have] if len(have) > 1 else None)
    for row, (name, rec) in enumerate(have, start=1):
        rid = np.asarray(rec["rid"])
        ids, counts = np.unique(rid, return_counts=True)
        top = ids[np.argsort(-counts, kind="stable")[:lines]]
        for i, r in enumerate(sorted(top.tolist())):
            m = rid == r
            d, a = np.asarray(rec["drafted"])[m], np.asarray(rec["accepted"])[m]
            fig.add_trace(go.Scatter(x=np.asarray(rec["t_s"])[m], y=d, mode="lines+markers", showlegend=False,
                                     line=dict(shape="hv", color=colours(name), dash=DASHES[i % len(DASHES)]),
                                     name=f"{name} request {r}" if name else f"request {r}", marker=dict(size=4),
                                     text=[f"accepted {x} of {y}" for x, y in zip(a, d)]),
                          row=row, col=1)
        fig.update_yaxes(title="drafts held" if len(have) > 1 else "drafts held at verification", rangemode="tozero",
                         row=row, col=1)
    fig.update_xaxes(title="simulated time (s)", row=len(have), col=1)
    fig.update_layout(height=max(420, 260 * len(have)))
    return fig


def _fmt(v) -> str:
    return readable(v)
