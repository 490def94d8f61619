"""`spsim plan` (planning/): the rate and replica searches, the Pareto front, option parsing,
prices, and end to end: the same numbers from one job, two jobs and a rerun from the cache."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spsim.errors import SpsimError
from spsim.planning.pareto import pareto_front
from spsim.planning.prices import DEFAULT_PRICES, load_prices
from spsim.planning.search import SearchSettings, Searcher
from spsim.planning.space import int_list


class FakeProbe:
    def __init__(self, rate, replicas):
        self.rate, self.replicas = rate, replicas


def fake_searcher(capacity_per_replica, precision=0.05):
    """A searcher whose probes pass below `capacity_per_replica * replicas` (monotone)."""
    s = Searcher.__new__(Searcher)
    s.s = SearchSettings(precision=precision)
    s.n = s.w = 100  # no window phase
    s.calls = []

    def check(rate, replicas, n=None):
        s.calls.append((rate, replicas))
        return rate < capacity_per_replica * replicas, FakeProbe(rate, replicas)

    s.check = check
    return s


@settings(max_examples=200, deadline=None)
@given(cap=st.floats(0.01, 500), start=st.floats(0.05, 100), grow=st.sampled_from([1.25, 2.0]),
       precision=st.sampled_from([0.01, 0.05, 0.2]))
def test_max_rate_brackets_the_capacity(cap, start, grow, precision):
    s = fake_searcher(cap, precision)
    m = s.max_rate(1, start, grow)
    if m["status"] == "ok":
        assert m["lo"] < cap <= m["hi"]
        assert m["hi"] / m["lo"] <= 1 + precision + 1e-12
    else:  # the capacity lies beyond the 4,096x bracketing range
        assert m["status"] in ("above", "infeasible")
        assert cap / start >= 4096 * (1 - 1e-9) or start / cap > 4096 * (1 - 1e-9)
    # a probe at least as high as a failed one is never run again (bisection narrows)
    assert len(s.calls) == len(set(s.calls))


def test_max_rate_probe_count_is_logarithmic():
    s = fake_searcher(37.0)
    s.max_rate(1, 5.0, 2.0)
    # bracket 5 -> 40 (4 probes), then bisection of [20, 40) to 5 %: log2(ln 2 / ln 1.05) ~ 3.8
    assert len(s.calls) <= 4 + 4


@pytest.mark.parametrize("cap, target, per, expect", [(10.0, 35.0, 10.0, 4), (10.0, 35.0, 20.0, 4),
                                                      (10.0, 35.0, 5.0, 4), (10.0, 95.0, 10.0, None),
                                                      (10.0, 5.0, 10.0, 1)])
def test_fewest_replicas(cap, target, per, expect):
    s = fake_searcher(cap)
    f = s.fewest_replicas(target, per, 1, 8)
    assert f["replicas"] == expect


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=40))
def test_pareto_front(points):
    pts = [{"output_tok_s_per_gpu": float(x), "median_tpot_ms": float(y), "i": i} for i, (x, y) in enumerate(points)]
    front = pareto_front(pts)

    def dominates(a, b):
        return (a["output_tok_s_per_gpu"] >= b["output_tok_s_per_gpu"] and a["median_tpot_ms"] <= b["median_tpot_ms"]
                and (a["output_tok_s_per_gpu"], a["median_tpot_ms"]) != (b["output_tok_s_per_gpu"], b["median_tpot_ms"]))

    for f in front:
        assert not any(dominates(p, f) for p in pts)
    ids = {f["i"] for f in front}
    for p in pts:
        if p["i"] not in ids:
            assert any(dominates(f, p) or (f["output_tok_s_per_gpu"], f["median_tpot_ms"]) ==
                       (p["output_tok_s_per_gpu"], p["median_tpot_ms"]) for f in front)


def test_int_list():
    assert int_list("1..4", "--replicas") == [1, 2, 3, 4]
    assert int_list("1,2,8", "--replicas") == [1, 2, 8]
    for bad, words in (("0..3", ">= 1"), ("4..2", "empty range"), ("a", "not an integer"), ("1,1", "given twice")):
        with pytest.raises(SpsimError, match=words):
            int_list(bad, "--replicas")


def test_prices(tmp_path):
    assert load_prices(None)[0] == DEFAULT_PRICES
    p = tmp_path / "p.json"
    p.write_text('{\n  "h100": 2.5\n}\n')
    prices, _ = load_prices(p)
    assert prices["h100-sxm"] == 2.5 and prices["h200"] == DEFAULT_PRICES["h200"]
    p.write_text('{\n  "h200": 3,\n  "tpu-v9": 1\n}\n')
    with pytest.raises(SpsimError, match=r"p.json:3: tpu-v9: unknown GPU"):
        load_prices(p)
    p.write_text('{\n  "h200": -1\n}\n')
    with pytest.raises(SpsimError, match=r"p.json:2: h200: price must be a number > 0"):
        load_prices(p)


# ------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    from typer.testing import CliRunner

    from spsim.cli import app

    p = tmp_path_factory.mktemp("plan") / "t.jsonl"
    r = CliRunner().invoke(app, ["trace", "gen", str(p), "-n", "60", "--qps", "2", "--seed", "4",
                                 "--prompt", "uniform:low=500,high=6000", "--output", "uniform:low=10,high=60"])
    assert r.exit_code == 0, r.output
    return p


def plan(trace_file, out, *extra):
    from spsim.planning.run import PlanInputs, run_plan
    from spsim.simulator.engine import SimConfig

    kw = dict(trace=str(trace_file), trace_format=None, limit=None, skip_invalid=False,
              slo="ttft_p90=1s,tpot_p99=40ms", policies="ar,fixed-k:k=4", gpus="h200,h100-sxm",
              models="llama-3.1-8b", replicas="1..3", max_batch="256", draft_budget="2048", draft_kv="auto",
              tp="1", target_rate=None, precision=0.1, early_stop=True, prices=None, base=SimConfig(), jobs=1,
              ray=False, ray_address=None)
    kw.update(dict(extra))
    p = run_plan(PlanInputs.from_options(**kw), out=out)
    p.write(out)
    return p


NUMBERS = ["config", "status", "max_rate", "bracket_hi", "rate_per_gpu", "requests_per_usd", "fewest_replicas",
           "median_tpot_ms", "limiter", "why", "probes"]


def test_same_numbers_serial_pool_and_cache(trace_file, tmp_path):
    a = plan(trace_file, tmp_path / "a")
    b = plan(trace_file, tmp_path / "b", ("jobs", 2))
    ra, rb = pd.read_csv(tmp_path / "a" / "results.csv"), pd.read_csv(tmp_path / "b" / "results.csv")
    pd.testing.assert_frame_equal(ra[NUMBERS], rb[NUMBERS])
    assert a.meta["probes_simulated"] > 0 and a.meta["engine"] == "serial" and b.meta["engine"] == "pool(2)"
    assert (ra["status"] == "ok").all() and (ra["max_rate"] > 0).all()
    # a rerun on the same folder simulates nothing and gives the same table
    c = plan(trace_file, tmp_path / "a")
    assert c.meta["probes_simulated"] == 0 and c.meta["probes_cached"] == a.meta["probes_simulated"] + a.meta["probes_cached"]
    pd.testing.assert_frame_equal(ra[NUMBERS], pd.read_csv(tmp_path / "a" / "results.csv")[NUMBERS])
    # an interrupted plan (some probes never written, one file cut short) resumes with the same numbers
    files = sorted((tmp_path / "a" / "cache").glob("*.npz"))
    for f in files[::3]:
        f.unlink()
    files[1].write_bytes(files[1].read_bytes()[:100])
    d = plan(trace_file, tmp_path / "a")
    assert d.meta["probes_simulated"] == len(files[::3]) + 1
    pd.testing.assert_frame_equal(ra[NUMBERS], pd.read_csv(tmp_path / "a" / "results.csv")[NUMBERS])
    # outputs: a winner per objective with its reason, the Pareto front, the markdown
    doc = json.loads((tmp_path / "a" / "recommendation.json").read_text())
    objectives = {r["objective"]: r for r in doc["recommendation"]}
    assert set(objectives) == {"rate_per_gpu", "per_dollar", "fewest_gpus", "latency_at_target"}
    best = max(doc["results"], key=lambda r: r["rate_per_gpu"])
    assert objectives["rate_per_gpu"]["winner"] == best["config"]
    # what limits the winner: its own field, stated once in the outputs, not after every objective
    assert objectives["rate_per_gpu"]["why"] == best["why"] and "Limited by" not in objectives["rate_per_gpu"]["reason"]
    assert doc["pareto_front"] and all(p["met"] for p in doc["pareto_front"])
    assert "## Recommendation" in (tmp_path / "a" / "recommendation.md").read_text()
    # every configuration's highest rate met the SLO; the bracket's top did not
    probes = pd.read_csv(tmp_path / "a" / "probes.csv")
    for _, r in ra.iterrows():
        mine = probes[(probes["config"] == r["config"]) & (probes["kind"] == "full")]
        assert mine[mine["rate"] == r["max_rate"]]["met"].all()
        assert r["bracket_hi"] / r["max_rate"] <= 1.1 + 1e-9


def test_ray_gives_the_same_numbers(trace_file, tmp_path):
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("ray is not installed here (pip install 'spsim[ray]'): the Ray engine is untested on this machine")
    a = plan(trace_file, tmp_path / "a", ("policies", "ar,aspire"), ("gpus", "h200"))
    b = plan(trace_file, tmp_path / "b", ("policies", "ar,aspire"), ("gpus", "h200"), ("ray", True), ("jobs", 2))
    assert b.meta["engine"] == "ray"
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / "results.csv")[NUMBERS],
                                  pd.read_csv(tmp_path / "b" / "results.csv")[NUMBERS])


@pytest.mark.parametrize("args, words", [
    (["--slo", "ttft_p90=2"], "--slo: term 'ttft_p90=2'"),
    (["--slo", "ttft_p90=2s", "--gpus", "h900"], "unknown GPU 'h900'"),
    (["--slo", "ttft_p90=2s", "--replicas", "3..1"], "--replicas: empty range"),
    (["--slo", "ttft_p90=2s", "--policies", "ar,nope"], "nope"),
    (["--slo", "ttft_p90=2s", "--ray-address", "x:1"], "--ray-address needs --ray"),
    (["--slo", "ttft_p90=2s", "--window", "-5"], "--window must be >= 0"),
    (["--slo", "ttft_p90=2s", "--models", "llama-3.1-70b", "--gpus", "h100-sxm"], "configuration"),
])
def test_cli_errors(trace_file, args, words):
    r = subprocess.run([sys.executable, "-m", "spsim.cli", "plan", str(trace_file), *args], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert words in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
