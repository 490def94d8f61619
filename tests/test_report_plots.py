"""What a new user hit in the reports (issue 39, items 1 and 7): `compare --out` wrote four bar
charts and no table while `--report` wrote the full report; a policy changed colour from plot to
plot; the draft-length plot's title ran under plotly's toolbar and its legend repeated colours over
30 entries; `1.297e+04` in a table; a flat SLO-attainment line; the same limiting reason after
every objective; results tables without a winner or ratios. The browser's view of the same:
tests/test_report_browser.py."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from spsim.cli import app
from test_plan_report import plot_traces

runner = CliRunner()
NAMES = ["ar", "fixed-k:k=4", "aspire"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """compare with --out and --report at once (about 3 s)."""
    d = tmp_path_factory.mktemp("cmp")
    tr = d / "t.jsonl"
    assert runner.invoke(app, ["trace", "gen", str(tr), "-n", "40", "--qps", "4", "--seed", "3", "--prompt",
                               "uniform:low=2000,high=12000", "--output", "uniform:low=20,high=80"]).exit_code == 0
    r = runner.invoke(app, ["compare", str(tr), "-P", ",".join(NAMES), "--concurrency", "8", "--seeds", "2",
                            "--out", str(d / "out"), "--report", str(d / "cmp.html")])
    assert r.exit_code == 0, r.output
    return d


@pytest.fixture(scope="module")
def plan_out():
    from test_plan_report import small_plan

    return small_plan()


def test_compare_out_writes_the_full_report(compared):
    """Item 1: --out's report.html is the report --report writes, table and every plot."""
    from spsim.compare_report import PLOT_IDS

    page = (compared / "out" / "report.html").read_text()
    assert page == (compared / "cmp.html").read_text()
    assert 'id="table-compare"' in page and "x</span>" in page  # ratios in the table
    for div in PLOT_IDS:
        assert re.search(rf'Plotly\.newPlot\(\s*"{div}"', page), div
    assert (compared / "out" / "report.md").read_text() == (compared / "cmp.md").read_text()
    assert (compared / "out" / "compare.json").exists() and (compared / "out" / "report.csv").exists()


def _policy_colours(page: str, divs, names) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {n: set() for n in names}
    for div in divs:
        if not re.search(rf'Plotly\.newPlot\(\s*"{div}"', page):
            continue
        for t in plot_traces(page, div):
            marker, line = t.get("marker") or {}, t.get("line") or {}
            if t.get("type") == "bar" and isinstance(marker.get("color"), list):
                pairs = zip(t["x"].tolist(), marker["color"])
            else:
                pairs = [(t.get("name", "").rsplit(" request ", 1)[0], line.get("color") or marker.get("color"))]
            for name, colour in pairs:
                if name in seen:
                    seen[name].add(colour)
    return seen


def test_one_colour_per_policy_in_the_compare_report(compared):
    from spsim.compare_report import PLOT_IDS

    seen = _policy_colours((compared / "cmp.html").read_text(), PLOT_IDS, NAMES)
    assert all(len(c) == 1 and None not in c for c in seen.values()), seen
    assert len({next(iter(c)) for c in seen.values()}) == len(NAMES)


def test_one_colour_per_configuration_in_the_plan_report(plan_out, tmp_path):
    from spsim.planning.report import PLOT_IDS, write_report

    write_report(tmp_path / "plan.html", plan_out)
    names = [r["config"] for r in plan_out.rows]
    seen = _policy_colours((tmp_path / "plan.html").read_text(), PLOT_IDS, names)
    assert all(len(c) == 1 and None not in c for c in seen.values()), seen
    assert len({next(iter(c)) for c in seen.values()}) == len(names)


def test_plot_titles_are_headings_and_the_draft_plot_has_no_legend(compared):
    """Plotly's one-line title of the draft-length plot ran under its toolbar; its legend listed
    every sampled request in plotly's ten colours."""
    from spsim.compare_report import PLOT_IDS

    page = (compared / "cmp.html").read_text()
    for div in PLOT_IDS:
        m = re.search(rf'Plotly\.newPlot\(\s*"{div}",\s*\[.*?\],\s*(\{{.*?\}}),\s*\{{"responsive"', page, re.S)
        assert m and not (json.loads(m.group(1)).get("title") or {}).get("text"), div
        assert re.search(rf'<h3 class="plot-title" id="title-{div}">[^<]+</h3><div class="plot">', page), div
    draft = plot_traces(page, "plot-draft-lengths")
    assert len(draft) > 6 and all(t.get("showlegend") is False for t in draft)


def test_report_numbers_have_no_exponent():
    from spsim.html_report import _fmt
    from spsim.planning.recommend import _v

    assert _fmt(12970.4) == "12,970" and _fmt(25.3712) == "25.37" and _fmt(0.934) == "0.934"
    assert _v(24974.1) == "24,974" and _v(26.41) == "26.4"


def test_a_flat_attainment_plot_is_left_out():
    import plotly.graph_objects as go

    from spsim.planning.report import _attainment
    from spsim.report_colours import PolicyColours
    from spsim.report_page import Dropped

    def plan(att):
        probes = [{"config": "ar", "kind": "full", "rate": r, "replicas": 1, "attainment": a}
                  for r, a in zip((1.0, 2.0, 4.0), att)]
        return SimpleNamespace(probes=probes, rows=[{"config": "ar"}])

    flat = _attainment(plan([1.0, 0.995, 0.99]), go, PolicyColours(["ar"]))
    assert isinstance(flat, Dropped) and "99.0%-100.0%" in flat.why
    assert not isinstance(_attainment(plan([1.0, 0.9, 0.6]), go, PolicyColours(["ar"])), Dropped)


def test_a_limiting_reason_is_stated_once(plan_out, tmp_path):
    from spsim.planning.recommend import markdown
    from spsim.planning.report import write_report

    md = markdown(plan_out.recs, plan_out.rows, plan_out.meta)
    write_report(tmp_path / "plan.html", plan_out)
    page = (tmp_path / "plan.html").read_text()
    remedies = {r["remedy"] for r in plan_out.rows if r["remedy"]}
    assert remedies
    for remedy in remedies:
        assert md.count(remedy) == 1 and page.count(remedy) == 1, remedy
    assert "Limited by" not in md and "Limited by" not in page


def test_plan_table_marks_winners_with_ratios_at_80_columns(plan_out):
    from rich.console import Console

    from spsim.cli.planning import results_table

    con = Console(width=80, record=True, color_system=None)
    con.print(results_table(plan_out))
    text = con.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    win = next(r["winner"] for r in plan_out.recs if r["objective"] == "rate_per_gpu")
    row = next(r for r in plan_out.rows if r["config"] == win)
    assert f"*{row['rate_per_gpu']:.3g}" in text  # starred, whole (not folded)
    assert "1.00x" in text  # the reference against itself
    for r in plan_out.rows:
        if r["rate_per_gpu_vs_ref"] is not None:
            assert f"{r['rate_per_gpu_vs_ref']:.2f}x" in text


def test_compare_table_marks_winners_with_ratios(compared):
    page = (compared / "cmp.html").read_text()
    table = re.search(r'<table id="table-compare">.*?</table>', page, re.S).group(0)
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S) for r in rows]
    for col in range(1, 10):  # each figure column: one winner, starred and shaded
        assert sum(c[col].startswith("*") for c in cells) == 1, col
    assert table.count('class="num best"') == 9
    assert all("1.00x" in c[1] for c in cells[:1])  # the reference against itself
    assert "e+" not in table


def test_the_browser_check_fails_under_ci_where_chromium_is_missing(monkeypatch):
    from browser import need

    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing under CI"):
        need("chromium", True)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        need("chromium", True)
    need("chromium", False)  # present: nothing to say


def test_the_report_reuses_seed_0_for_acceptance_by_position(compared, monkeypatch):
    """A trace within the rerun's requests: seed 0 runs on the step path and the report reads its
    positions (no second run); its figures are the fast path's, and the plot the rerun's."""
    from spsim.compare_figures import FIGURES
    from spsim.simulator.engine import SimConfig
    from spsim.simulator.positions import simulate_with_positions
    from spsim.traces import read_trace

    tr = read_trace(str(compared / "t.jsonl"))
    fast = {r["policy"]: r for r in json.loads(runner.invoke(app, ["compare", str(compared / "t.jsonl"), "-P",
                                                                   ",".join(NAMES), "--concurrency", "8", "--seeds",
                                                                   "2", "--json"]).stdout)}
    step = {r["policy"]: r for r in json.loads((compared / "out" / "compare.json").read_text())["rows"]}
    for name in NAMES:
        for key, *_ in FIGURES:
            assert fast[name][key] == pytest.approx(step[name][key], rel=1e-12, abs=1e-12), (name, key)
    page = (compared / "cmp.html").read_text()
    for t in plot_traces(page, "plot-acceptance-position"):
        s = simulate_with_positions(tr, SimConfig(policy=t["name"], seed=0, concurrency=8)).summary
        want = [a / h if h else None for a, h in zip(s["num_accepted_tokens_per_pos"], s["num_drafted_per_pos"])]
        assert t["y"].tolist() == pytest.approx(want), t["name"]
    import spsim.compare_report as cr

    monkeypatch.setattr(cr, "_rerun", lambda *a: (_ for _ in ()).throw(AssertionError("reran")))
    r = runner.invoke(app, ["compare", str(compared / "t.jsonl"), "-P", "ar,fixed-k:k=4", "--concurrency", "8",
                            "--report", str(compared / "again.html")])
    assert r.exit_code == 0, r.output


def test_plan_table_keeps_its_numbers_at_80_columns_with_long_labels():
    """A label of policy, GPU, model and settings (70 characters) held on one line left the
    numeric columns no width at all at 80 columns: the table showed labels and empty cells."""
    from rich.console import Console

    from spsim.cli.planning import results_table

    rows = [{"config": f"{p} h200 llama-3.2-3b draft-budget=1024 max-batch=128", "policy": p.split(":")[0],
             "clairvoyant": False, "status": "ok", "max_rate": 1234.5, "rate_per_gpu": 617.25,
             "requests_per_usd": 2345678.0, "fewest_replicas": 12, "limiter": "verify_cost",
             "rate_per_gpu_vs_ref": 1.234} for p in ("ar", "aspire:ema=0.3", "fixed-k:k=4")]
    recs = [{"objective": "rate_per_gpu", "winner": rows[1]["config"]}]
    meta = {"trace": "t", "requests": 100, "slo": "ttft_p90=2s", "target_rate": 1500.0, "replicas_searched": 1,
            "precision": 0.05, "probes_simulated": 3, "probes_cached": 0, "wall_s": 2}
    con = Console(width=80, record=True, color_system=None)
    con.print(results_table(SimpleNamespace(rows=rows, recs=recs, meta=meta)))
    text = con.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for whole in ("1,234", "2,345,678", "1.23x", "*617", "verify_cost"):
        assert whole in text, whole
    assert text.count("2,345,678") == 3
    assert "1,500 req/s" in text and "e+" not in text  # the target rate was `1.5e+03`
