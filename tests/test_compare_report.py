"""`spsim compare`: a self-contained report, seed-free policies run once, counts stay ints, duplicate
policies run once, and the oracle is called what it is (a clairvoyant reference, not a bound)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spsim.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("tr") / "t.jsonl"
    r = runner.invoke(app, ["trace", "gen", str(p), "-n", "16", "--qps", "2", "--seed", "2",
                            "--prompt", "uniform:low=2000,high=12000", "--output", "uniform:low=20,high=60"])
    assert r.exit_code == 0, r.output
    return p


@pytest.fixture(scope="module")
def compared(trace_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    r = runner.invoke(app, ["compare", str(trace_file), "-P", "ar,fixed-k:k=4,oracle", "--seeds", "3",
                            "--concurrency", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return r, out


def test_report_opens_offline(compared):
    _, out = compared
    html = (out / "report.html").read_text()
    assert 'src="http' not in html  # no script loaded from the network
    assert "plotly.js v" in html and len(html) > 1_000_000  # the library itself is inline


def test_seed_free_policy_runs_once_and_shows_no_spread(compared):
    r, out = compared
    rows = {row["policy"]: row for row in json.loads((out / "compare.json").read_text())["rows"]}
    assert rows["ar"]["runs"] == 1 and rows["ar"]["seeds"] == 3
    assert rows["fixed-k:k=4"]["runs"] == 3
    assert rows["ar"]["mean_tpot_ms_std"] == 0.0
    ar_column = [line.split("│")[2] for line in r.stdout.splitlines() if line.count("│") >= 4]
    assert ar_column and not any("±" in c for c in ar_column)
    assert "e-1" not in r.stdout  # no spread at rounding noise (±5.7e-14)


def test_ar_does_not_depend_on_the_seed(trace_file):
    from conftest import strip
    from spsim.simulator.engine import SimConfig, simulate
    from spsim.traces import read_trace

    tr = read_trace(str(trace_file))
    a, b = (simulate(tr, SimConfig(policy="ar", seed=s, concurrency=4)).summary for s in (0, 7))
    a["config"].pop("seed"), b["config"].pop("seed")
    assert strip(a) == strip(b)


def test_counts_stay_ints(compared):
    _, out = compared
    doc = json.loads((out / "compare.json").read_text())
    for row in doc["rows"]:
        assert isinstance(row["completed"], int) and isinstance(row["rejected"], int)
    assert "16.0" not in (out / "compare.csv").read_text().splitlines()[1]


def test_oracle_is_a_clairvoyant_reference_not_an_upper_bound(compared):
    r, out = compared
    rows = {row["policy"]: row for row in json.loads((out / "compare.json").read_text())["rows"]}
    assert rows["oracle"]["clairvoyant"] and not rows["ar"]["clairvoyant"]
    assert "clairvoyant reference" in r.stdout and "upper bound" not in r.stdout
    assert "not a strict bound" in " ".join(r.stdout.split())  # the caption wraps


@pytest.mark.parametrize("policies,kept", [("ar,ar", ["ar"]),
                                           ("ar,fixed-k:k=4,fixed-k:k=4,stagger=True", ["ar", "fixed-k:k=4"])])
def test_duplicate_policies_run_once(trace_file, policies, kept):
    r = runner.invoke(app, ["compare", str(trace_file), "-P", policies, "--json", "--concurrency", "4"])
    assert r.exit_code == 0, r.output
    assert [row["policy"] for row in json.loads(r.stdout)] == kept
    assert "running it once" in r.stderr


def test_bad_policy_fails_before_any_run(trace_file, monkeypatch):
    import spsim.compare as compare
    from spsim.errors import SpsimError

    monkeypatch.setattr(compare, "simulate", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    r = runner.invoke(app, ["compare", str(trace_file), "-P", "ar,nope"])
    assert isinstance(r.exception, SpsimError) and "unknown policy 'nope'" in str(r.exception)


def test_spread_below_rounding_is_not_shown():
    from spsim.compare import _fmt

    assert "±" not in _fmt(25.4, 5.7e-14, None)
    assert "±" not in _fmt(2196.0, 0.3, None)
    assert "±" in _fmt(25.4, 0.8, None) and "±" in _fmt(0.934, 0.0077, None)
