"""The plan's HTML report: one self-contained file (plotly.js inline, no network) with the
expected plots and tables, plus the tables as CSV and markdown."""

from __future__ import annotations

import re

import numpy as np

import pandas as pd
import pytest

from spsim.planning.report import PLOT_IDS, write_report


@pytest.fixture(scope="module")
def plan_out():
    return small_plan()


def small_plan():
    """A plan of ar and fixed-k:k=4 over 60 synthetic requests (about 1 s)."""
    from conftest import make_trace

    from spsim.planning.run import PlanInputs, run_plan
    from spsim.simulator.engine import SimConfig

    tr = make_trace(60, seed=5, span=30.0, prompt=(500, 8000), output=(10, 80))
    inp = PlanInputs(trace_name="test", trace=tr, configs=[], slo=None, base=SimConfig(), rmin=1, rmax=2,
                     target_rate=2.0, native_rate=59 / float(tr.arrival_s[-1]), settings=None, prices={}, prices_source="",
                     jobs=1)
    from spsim.planning.prices import load_prices
    from spsim.planning.search import SearchSettings
    from spsim.planning.space import expand
    from spsim.slo import SLO

    inp.configs = expand(["ar", "fixed-k:k=4"], ["h200"], ["llama-3.1-8b"], [256], [2048], ["auto"], [1])
    inp.slo = SLO.parse("ttft_p90=1s,tpot_p99=40ms")
    inp.settings = SearchSettings(precision=0.2)
    inp.prices, inp.prices_source = load_prices(None)
    return run_plan(inp)


def test_report_is_self_contained(plan_out, tmp_path):
    path = tmp_path / "plan.html"
    write_report(path, plan_out)
    text = path.read_text()
    # no script, stylesheet or image fetched from anywhere
    assert not re.search(r"<script[^>]+src=[\"']?https?:", text, re.I)
    assert not re.search(r"<link[^>]+href=[\"']?https?:", text, re.I)
    assert not re.search(r"<img[^>]+src=[\"']?https?:", text, re.I)
    assert text.count("plotly.js v") >= 1 and len(text) > 1_000_000  # the library itself is inline, once
    assert text.count("<script>/**\n* plotly.js v") == 1
    shown = [div for div in PLOT_IDS if re.search(rf'Plotly\.newPlot\(\s*"{div}"', text)]
    assert len(shown) >= 5, shown
    for div in set(PLOT_IDS) - set(shown):  # left out only as carrying no information, and said so
        assert div == "plot-slo-attainment" and 'id="plots-dropped"' in text and "SLO attainment" in text
    assert 'id="table-recommendation"' in text and 'id="table-results"' in text
    for r in plan_out.rows:
        assert r["config"] in text
    # acceptance by draft position has a curve for the speculative policy (fixed-k), none for ar
    m = re.search(r'Plotly\.newPlot\(\s*"plot-acceptance-position",\s*(\[.*?\]),\s*\{', text, re.S)
    assert m and '"name":"fixed-k:k=4"' in m.group(1) and '"name":"ar"' not in m.group(1)
    # tables as CSV and markdown beside it
    assert list(pd.read_csv(tmp_path / "plan.csv")["config"]) == [r["config"] for r in plan_out.rows]
    assert "## Recommendation" in (tmp_path / "plan.md").read_text()


def test_replay_report(tmp_path):
    from typer.testing import CliRunner

    from spsim.cli import app
    from spsim.html_report import PLOT_IDS as RUN_PLOTS

    runner = CliRunner()
    tr = tmp_path / "t.jsonl"
    assert runner.invoke(app, ["trace", "gen", str(tr), "-n", "40", "--qps", "4", "--seed", "2",
                               "--prompt", "uniform:low=2000,high=12000", "--output", "uniform:low=20,high=80"]).exit_code == 0
    path = tmp_path / "rep" / "run.html"
    r = runner.invoke(app, ["replay", str(tr), "--policy", "fixed-k:k=4", "--slo", "ttft_p90=2s,tpot_p99=60ms",
                            "--report", str(path), "--json"])
    assert r.exit_code == 0, r.output
    text = path.read_text()
    assert not re.search(r"<script[^>]+src=[\"']?https?:", text, re.I)
    for div in RUN_PLOTS:
        assert re.search(rf'Plotly\.newPlot\(\s*"{div}"', text), div
    m = re.search(r'Plotly\.newPlot\(\s*"plot-acceptance-position",\s*(\[.*?\]),\s*\{', text, re.S)
    assert m and '"name":"acceptance"' in m.group(1)  # the run recorded its verifications
    assert "SLO ttft_p90=2s,tpot_p99=60ms" in text and "num_drafts (vLLM)" in text
    assert (tmp_path / "rep" / "run.csv").exists() and (tmp_path / "rep" / "run.md").exists()


def plot_traces(text: str, div: str) -> list[dict]:
    """The traces of plot `div` in a report, with x and y as numpy arrays (plotly writes numpy
    arrays as base64 typed arrays)."""
    import base64
    import json

    import numpy as np

    m = re.search(rf'Plotly\.newPlot\(\s*"{div}",\s*(\[.*?\]),\s*\{{', text, re.S)
    assert m, div
    traces = json.loads(m.group(1))

    def arr(v):
        if isinstance(v, dict) and "bdata" in v:
            return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        return np.asarray(v if v is not None else [])

    for t in traces:
        t["x"], t["y"] = arr(t.get("x")), arr(t.get("y"))
    return traces


def check_draft_plot(text: str, names: list[str]) -> list[dict]:
    """The draft-length plot has real data: step lines of sampled requests, drafts held >= 1 at
    increasing times, for each speculative run named."""
    traces = plot_traces(text, "plot-draft-lengths")
    for name in names:
        mine = [t for t in traces if t["name"].startswith(f"{name} request ") or (not name and t["name"].startswith("request "))]
        assert mine, (name, [t["name"] for t in traces])
        for t in mine:
            assert len(t["x"]) == len(t["y"]) >= 1
            assert (t["y"] >= 1).all() and (np.diff(t["x"]) > 0).all()
            assert all(s.startswith("accepted ") for s in t["text"])
    return traces


def test_plan_report_draft_lengths(plan_out, tmp_path):
    path = tmp_path / "plan.html"
    write_report(path, plan_out)
    traces = check_draft_plot(path.read_text(), ["fixed-k:k=4"])
    assert not any(t["name"].startswith("ar request") for t in traces)
    # fixed-k:k=4 holds 4 drafts at a verification unless a request's end cuts the draft short
    ys = np.concatenate([t["y"] for t in traces])
    assert ys.max() == 4 and (ys == 4).mean() > 0.5


def test_replay_report_draft_lengths(tmp_path):
    from typer.testing import CliRunner

    from spsim.cli import app

    runner = CliRunner()
    tr = tmp_path / "t.jsonl"
    assert runner.invoke(app, ["trace", "gen", str(tr), "-n", "40", "--qps", "4", "--seed", "2",
                               "--prompt", "uniform:low=2000,high=12000", "--output", "uniform:low=20,high=80"]).exit_code == 0
    for policy in ("aspire", "oracle"):  # oracle: not on the step path, its draft lengths still recorded
        path = tmp_path / policy / "run.html"
        r = runner.invoke(app, ["replay", str(tr), "--policy", policy, "--concurrency", "8", "--report", str(path), "--json"])
        assert r.exit_code == 0, r.output
        check_draft_plot(path.read_text(), [""])


def test_compare_report(tmp_path):
    from typer.testing import CliRunner

    from spsim.cli import app
    from spsim.compare_report import PLOT_IDS as COMPARE_PLOT_IDS

    runner = CliRunner()
    tr = tmp_path / "t.jsonl"
    assert runner.invoke(app, ["trace", "gen", str(tr), "-n", "40", "--qps", "4", "--seed", "3",
                               "--prompt", "uniform:low=2000,high=12000", "--output", "uniform:low=20,high=80"]).exit_code == 0
    path = tmp_path / "cmp" / "cmp.html"
    r = runner.invoke(app, ["compare", str(tr), "-P", "ar,fixed-k:k=4,aspire", "--concurrency", "8", "--seeds", "2",
                            "--report", str(path)])
    assert r.exit_code == 0, r.output
    text = path.read_text()
    assert not re.search(r"<script[^>]+src=[\"']?https?:", text, re.I)
    assert text.count("<script>/**\n* plotly.js v") == 1
    for div in COMPARE_PLOT_IDS:
        assert re.search(rf'Plotly\.newPlot\(\s*"{div}"', text), div
    assert 'id="table-compare"' in text
    acc = plot_traces(text, "plot-acceptance-position")
    assert sorted(t["name"] for t in acc) == ["aspire", "fixed-k:k=4"]
    assert all(((t["y"] > 0) & (t["y"] <= 1)).all() for t in acc)
    check_draft_plot(text, ["fixed-k:k=4", "aspire"])
    boxes = plot_traces(text, "plot-latency-distributions")
    assert {t["name"] for t in boxes} == {"ar", "fixed-k:k=4", "aspire"}
    csv = pd.read_csv(path.with_suffix(".csv"))
    assert list(csv["policy"]) == ["ar", "fixed-k:k=4", "aspire"]
    assert "| policy |" in path.with_suffix(".md").read_text()
    # --report is checked before the runs: a folder that is a file fails at once, with one line
    bad = tmp_path / "file"
    bad.write_text("x")
    r = runner.invoke(app, ["compare", str(tr), "-P", "ar", "--report", str(bad / "x.html")])
    from spsim.errors import SpsimError

    assert isinstance(r.exception, SpsimError) and "--report" in str(r.exception) and "is not a folder" in str(r.exception)
    assert r.exception.exit_code == 2
