"""The plan's HTML report: one self-contained file (plotly.js inline, no network) with the
expected plots and tables, plus the tables as CSV and markdown."""

from __future__ import annotations

import re

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
    for div in PLOT_IDS:
        assert f'id="{div}"' in text, div
        assert re.search(rf'Plotly\.newPlot\(\s*"{div}"', text), div
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
