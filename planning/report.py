"""The plan's HTML report: one self-contained file (the page of spsim/report_page.py), with the
recommendation, the results table (each objective's winner marked, rate per GPU against the
reference policy), what limits each configuration (each reason once), throughput-latency curves
per configuration with the Pareto front, SLO attainment against request rate (left out where it
is the same at every rate), TTFT and TPOT distributions at each configuration's highest rate, GPU
time by pass kind, acceptance by draft position, and sampled requests' draft lengths over time;
one colour per configuration in every plot. Next to it, the tables as CSV and markdown
(`NAME.csv`, `NAME.md`).

Acceptance by draft position needs each verification's outcome, which the sweep's fast runs do
not keep: the report reruns each speculative configuration (not `oracle`) at its highest rate on
the step path over the trace's first POSITION_REQUESTS requests (simulator/positions.py); the same
reruns record a sample of requests' draft lengths (policies/draftlog.py).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from spsim.errors import SpsimError
from spsim.report_numbers import readable

from .recommend import markdown
from .tables import markdown_table

POSITION_REQUESTS = 300
PLOT_IDS = ("plot-throughput-latency", "plot-slo-attainment", "plot-latency-distributions", "plot-gpu-time",
            "plot-acceptance-position", "plot-draft-lengths")


def write_report(path: Path, plan) -> None:
    try:
        _write(Path(path), plan)
    except OSError as e:
        raise SpsimError(f"--report {path}: cannot write ({e.strerror or e})") from None


def _write(path: Path, plan) -> None:
    import plotly.graph_objects as go

    from spsim.html_report import DRAFT_TITLE, draft_lengths_figure
    from spsim.report_colours import PolicyColours
    from spsim.report_page import write_page

    colours = PolicyColours([r["config"] for r in plan.rows])
    reruns = _reruns(plan)
    figs = [("plot-throughput-latency", "Throughput against latency (runs meeting the SLO: filled; Pareto front: line)",
             _throughput_latency(plan, go, colours)),
            ("plot-slo-attainment", "SLO attainment against request rate", _attainment(plan, go, colours)),
            ("plot-latency-distributions", "TTFT and TPOT at each configuration's highest rate",
             _distributions(plan, go, colours)),
            ("plot-gpu-time", "GPU time by pass kind at each configuration's highest rate", _gpu_time(plan, go)),
            ("plot-acceptance-position", f"Acceptance by draft position (first {POSITION_REQUESTS} requests at each "
             "configuration's highest rate)", _positions(plan, go, reruns, colours))]
    figs.append(("plot-draft-lengths", f"{DRAFT_TITLE} (first {POSITION_REQUESTS} requests at each configuration's "
                 "highest rate)", draft_lengths_figure(go, [(k, v.extra.get("draft_lengths")) for k, v in reruns.items()],
                                                      colours=colours)))
    m = plan.meta
    rec_rows = [{"objective": r["title"], "winner": r["winner"] or "-", "reason": r["reason"]} for r in plan.recs]
    body = f"""<p>SLO <code>{html.escape(m['slo'])}</code>; {m['requests']:,} requests; highest rates searched at
{m['replicas_searched']} replica{'' if m['replicas_searched'] == 1 else 's'} to a relative precision of {m['precision']:.0%}; fewest replicas for
{readable(m['target_rate'], 3)} req/s within {m['replica_range'][0]}..{m['replica_range'][1]}; prices:
{html.escape(m['prices_source'])}. Simulated with spsim (not measured on GPUs); {html.escape(m.get('costs', ''))}.</p>
<h2>Recommendation</h2>
{_html_table(rec_rows, [("objective", "objective"), ("winner", "winner"), ("reason", "reason")], "table-recommendation")}
<h2>Configurations</h2>
{_results_table(plan)}
<h2>What limits each configuration</h2>
{_limits_html(plan.rows)}
<h2>Plots</h2>"""
    write_page(path, f"spsim plan: {m['trace']}", body, figs, height=460)
    pd.DataFrame(plan.rows).to_csv(path.with_suffix(".csv"), index=False)
    path.with_suffix(".md").write_text(markdown(plan.recs, plan.rows, plan.meta))


RESULT_COLS = [("config", "configuration"), ("status", "status"), ("max_rate", "max req/s"),
               ("rate_per_gpu", "req/s per GPU (x ref)"), ("output_tok_s_per_gpu", "out tok/s per GPU"),
               ("requests_per_usd", "req per USD"), ("fewest_replicas", "replicas for target"),
               ("median_tpot_ms", "TPOT p50 ms"), ("limiter", "limited by")]


def _results_table(plan) -> str:
    """The configurations, each objective's winner starred and shaded, rate per GPU against the
    reference policy's."""
    from .marks import marked

    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in RESULT_COLS)
    body = []
    text = ("config", "status", "limiter")
    for line in marked(plan.rows, plan.recs, [k for k, _ in RESULT_COLS]):
        body.append("<tr>" + "".join(
            f'<td class="{"" if k in text else "num"}{" best" if b else ""}">{"*" if b else ""}{html.escape(t)}'
            + (f'<br><span class="ratio">{x}</span>' if x else "") + "</td>" for k, (t, x, b) in line.items()) + "</tr>")
    ref = plan.rows[0]["policy"] if plan.rows else "-"
    return (f'<table id="table-results"><tr>{head}</tr>{"".join(body)}</table>'
            f"<p>* winner of the objective (see the recommendation); x ref: rate per GPU against "
            f"{html.escape(ref)} on the same GPU, model and settings.</p>")


def _limits_html(rows) -> str:
    from .limits import stated_once

    items = []
    for g in stated_once(rows):
        who = html.escape(", ".join(g["configs"]))
        if g["code"] == "none":
            items.append(f"<li>nothing tried ({who}): {html.escape(g['evidence'][0][1])}</li>")
            continue
        ev = "".join(f"<li>{html.escape(', '.join(cs))}: {html.escape(e)}</li>" for cs, e in g["evidence"])
        items.append(f"<li><b>{html.escape(g['head'])}</b> ({who})"
                     + (f": {html.escape(g['remedy'])}" if g["remedy"] else "") + f"<ul>{ev}</ul></li>")
    return f'<ul id="limits">{"".join(items)}</ul>'


def _html_table(rows, cols, table_id) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(k)))}</td>" for k, _ in cols) + "</tr>" for r in rows)
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def _cell(v) -> str:
    md = markdown_table([{"v": v}], [("v", "v")])
    return md.splitlines()[2].strip("| ").strip()


def _full(plan):
    return [p for p in plan.probes if p["kind"] == "full" and not p.get("stopped")]  # runs to the end


def _throughput_latency(plan, go, colours):
    fig = go.Figure()
    probes = pd.DataFrame(_full(plan))
    for label in [r["config"] for r in plan.rows]:
        d = probes[probes["config"] == label].sort_values("rate") if len(probes) else probes
        if not len(d):
            continue
        fig.add_trace(go.Scatter(x=d["output_tok_s_per_gpu"], y=d["median_tpot_ms"], mode="lines+markers", name=label,
                                 marker=dict(symbol=["circle" if m else "circle-open" for m in d["met"]], size=8),
                                 line=dict(color=colours(label)), marker_color=colours(label),
                                 text=[f"{readable(r, 3)} req/s" for r in d["rate"]]))
    if plan.front:
        f = pd.DataFrame(plan.front).sort_values("output_tok_s_per_gpu")
        fig.add_trace(go.Scatter(x=f["output_tok_s_per_gpu"], y=f["median_tpot_ms"], mode="lines", name="Pareto front",
                                 line=dict(color="black", dash="dot")))
    fig.update_xaxes(title="output tokens/s per GPU")
    fig.update_yaxes(title="median TPOT (ms)")
    return fig


FLAT = 0.02  # attainment within 2 percentage points over every run: a flat line on the plot's 0..1 axis


def _attainment(plan, go, colours):
    """Share of requests meeting goodput's bounds against the rate; dropped where it is the same at
    every rate tried (the README's plan drew a flat line at 1.0: goodput's per-request bounds held
    for every request while the SLO's percentiles gave out)."""
    from spsim.report_page import Dropped

    probes = pd.DataFrame(_full(plan))
    lo, hi = (probes["attainment"].min(), probes["attainment"].max()) if len(probes) else (None, None)
    if lo is not None and hi - lo < FLAT:
        share = f"{lo:.1%}" if hi - lo < 0.0005 else f"{lo:.1%}-{hi:.1%}"
        return Dropped(f"{share} of requests met goodput's per-request bounds at every rate run to the end "
                       "(the SLO's percentile terms decided each rate)")
    fig = go.Figure()
    for label in [r["config"] for r in plan.rows]:
        d = probes[probes["config"] == label].sort_values("rate") if len(probes) else probes
        if not len(d):
            continue
        fig.add_trace(go.Scatter(x=d["rate"] / d["replicas"], y=d["attainment"], mode="lines+markers", name=label,
                                 line=dict(color=colours(label))))
    fig.update_xaxes(title="request rate per replica (req/s)", type="log")
    fig.update_yaxes(title="share of requests meeting goodput's bounds", range=[0, 1.02])
    return fig


def _distributions(plan, go, colours):
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (ms)", "TPOT (ms)"))
    for row, res in zip(plan.rows, plan.results):
        lat = res.get("ok_latency")
        if not lat:
            continue
        for col, key in ((1, "ttft"), (2, "tpot")):
            v = np.asarray(lat[key], float) * 1e3
            v = v[np.isfinite(v)]
            fig.add_trace(go.Box(y=v, name=row["config"], boxpoints=False, showlegend=False,
                                 marker_color=colours(row["config"])), row=1, col=col)
    fig.update_yaxes(type="log")
    return fig


def _gpu_time(plan, go):
    fig = go.Figure()
    labels = [r["config"] for r in plan.rows]
    from spsim.report_colours import PASS_KINDS

    for kind, grey in PASS_KINDS.items():
        vals = []
        for res in plan.results:
            pt = (res.get("ok") or {}).get("pass_time_s") or {}
            tot = sum(pt.values()) or 1.0
            vals.append(pt.get(kind, 0.0) / tot)
        fig.add_trace(go.Bar(x=labels, y=vals, name=kind, marker_color=grey))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title="share of GPU time", tickformat=".0%")
    return fig


def _reruns(plan) -> dict:
    """Each speculative configuration (not `oracle`) at its highest rate on the step path over the
    trace's first POSITION_REQUESTS requests, recording every verification and a sample of draft
    lengths: {configuration label: RunResult}."""
    from dataclasses import replace

    from spsim.policies.draftlog import DEFAULT_SAMPLE
    from spsim.simulator.positions import simulate_with_positions

    from .probe import Bench, trace_fingerprint
    from .space import PlanConfig

    inp = plan.inputs
    n = min(POSITION_REQUESTS, len(inp.trace))
    bench = Bench(inp.trace, trace_fingerprint(inp.trace), inp.base, inp.slo, None)
    out = {}
    for row, res in zip(plan.rows, plan.results):
        if not res["speculative"] or res["clairvoyant"] or not res["max_rate"]:
            continue
        cfg = PlanConfig(**res["config"])
        tr = replace(inp.trace.take(np.arange(n)), arrival_s=bench.arrivals(res["max_rate"])[:n])
        sim_cfg = cfg.serving(inp.base).with_(replicas=res["replicas_at"], qps=None, offline=False, concurrency=None,
                                              slo=None)
        out[row["config"]] = simulate_with_positions(tr, sim_cfg, draft_sample=DEFAULT_SAMPLE)
    return out


def _positions(plan, go, reruns: dict, colours):
    """Acceptance rate of draft position i: verifications whose draft i was accepted / those that
    held a draft i."""
    fig = go.Figure()
    for label, run in reruns.items():
        s = run.summary
        acc, held = s["num_accepted_tokens_per_pos"], s["num_drafted_per_pos"]
        if not held:
            continue
        rate = [a / h if h else None for a, h in zip(acc, held)]
        fig.add_trace(go.Scatter(x=list(range(1, len(rate) + 1)), y=rate, mode="lines+markers", name=label,
                                 line=dict(color=colours(label)), text=[f"{h:,} verifications held this draft" for h in held]))
    fig.update_xaxes(title="draft position (1 = first draft after a verification)")
    fig.update_yaxes(title="acceptance rate", range=[0, 1.02])
    if not fig.data:
        from spsim.report_page import Dropped

        return Dropped("no speculative configuration with a rate meeting the SLO")
    return fig
