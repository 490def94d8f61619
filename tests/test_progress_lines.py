"""Long runs whose output is not a terminal print plain progress lines on stderr (no live bar
there); short runs print none; progress never changes results."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import spsim.cli.simulator as sim_cli
from spsim.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("tr") / "t.jsonl"
    r = runner.invoke(app, ["trace", "gen", str(p), "-n", "30", "--qps", "2", "--seed", "4",
                            "--prompt", "uniform:low=1000,high=6000", "--output", "uniform:low=20,high=80"])
    assert r.exit_code == 0, r.output
    return p


@pytest.fixture
def long_run(monkeypatch):
    """Every run counts as long: lines from the start."""
    monkeypatch.setattr(sim_cli, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(sim_cli, "PROGRESS_GAP_S", 0.0)


def _progress(stderr: str, prefix: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(prefix)]


def test_replay_prints_progress_lines_when_not_a_terminal(trace_file, long_run):
    r = runner.invoke(app, ["replay", str(trace_file), "-p", "fixed-k:k=4"])
    assert r.exit_code == 0, r.output
    lines = _progress(r.stderr, "replay fixed-k:k=4: ")
    assert 2 <= len(lines) <= 12, r.stderr  # about every tenth, not every callback
    assert lines[-1].startswith("replay fixed-k:k=4: 30/30 requests (100%)")
    assert "s elapsed" in lines[0]


def test_replay_json_progress_goes_to_stderr(trace_file, long_run):
    r = runner.invoke(app, ["replay", str(trace_file), "-p", "ar", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["completed"] == 30
    assert _progress(r.stderr, "replay ar: ")


def test_compare_prints_progress_lines(trace_file, long_run):
    r = runner.invoke(app, ["compare", str(trace_file), "-P", "ar,fixed-k:k=4", "--seeds", "2"])
    assert r.exit_code == 0, r.output
    lines = _progress(r.stderr, "compare: run ")
    assert lines and lines[-1].startswith("compare: run 3/3 fixed-k:k=4 seed 1: 30/30 requests (100% of all runs)"), r.stderr


def test_compare_progress_says_which_figure_is_overall(trace_file, long_run):
    """`run 4/4 aspire seed 0: 584/1,000 requests (89%)` mixed one run's count with the share of
    all runs (issue 39, item 6)."""
    r = runner.invoke(app, ["compare", str(trace_file), "-P", "ar,fixed-k:k=4"])
    assert r.exit_code == 0, r.output
    lines = _progress(r.stderr, "compare: run ")
    assert all("% of all runs)" in line for line in lines), r.stderr
    assert lines[-1].startswith("compare: run 2/2 fixed-k:k=4 seed 0: 30/30 requests (100% of all runs)")
    last_of_first = [line for line in lines if "30/30" in line and "run 1/2" in line]
    assert last_of_first and "(50% of all runs)" in last_of_first[0], r.stderr


def test_short_runs_print_no_progress(trace_file):
    r = runner.invoke(app, ["replay", str(trace_file), "-p", "ar"])
    assert r.exit_code == 0 and not _progress(r.stderr, "replay ")


def test_lines_at_most_every_tenth_or_interval(monkeypatch):
    import io

    monkeypatch.setattr(sim_cli, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(sim_cli, "PROGRESS_GAP_S", 0.0)
    buf = io.StringIO()
    lines = sim_cli.ProgressLines("x", stream=buf)
    for done in range(1001):
        lines(done / 1000, f"{done}/1000")
    out = buf.getvalue().splitlines()
    assert len(out) == 11 and out[-1].startswith("x: 1000/1000 (100%)")
    monkeypatch.setattr(sim_cli, "PROGRESS_GAP_S", 60.0)  # lines close together: only the first and the last
    buf = io.StringIO()
    lines = sim_cli.ProgressLines("x", stream=buf)
    for done in range(1001):
        lines(done / 1000, f"{done}/1000")
    assert [line.split(" (")[0] for line in buf.getvalue().splitlines()] == ["x: 0/1000", "x: 1000/1000"]


@pytest.mark.parametrize("kw", [dict(policy="aspire", replicas=2), dict(policy="fixed-k:k=8", concurrency=6),
                                dict(policy="entropy", offline=True)])
def test_progress_monitor_does_not_change_results(trace_file, kw):
    from conftest import strip
    from spsim.simulator.engine import SimConfig, simulate
    from spsim.traces import read_trace

    tr = read_trace(str(trace_file))
    a = simulate(tr, SimConfig(**kw)).summary
    b = simulate(tr, SimConfig(**kw), progress=lambda done, total: None).summary
    assert strip(a) == strip(b)
