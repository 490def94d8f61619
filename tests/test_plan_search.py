"""The plan's search strategy at scale: the exact early stop (a probe stops only once its SLO can
no longer be met, and a run it never stops is the same run), the window phase (the answer and the
bracket's top are whole-trace probes, to the stated precision, wherever the window's answer is),
the replica search through the window, and stopped probes in the cache."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spsim.planning.search import SearchSettings, Searcher, window_size
from spsim.planning.stop import SLOWatch
from spsim.slo import SLO, Latencies


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    from typer.testing import CliRunner

    from spsim.cli import app
    from spsim.traces import read_trace

    p = tmp_path_factory.mktemp("search") / "t.jsonl"
    r = CliRunner().invoke(app, ["trace", "gen", str(p), "-n", "160", "--qps", "4", "--seed", "7",
                                 "--prompt", "uniform:low=500,high=9000", "--output", "uniform:low=5,high=120"])
    assert r.exit_code == 0, r.output
    return read_trace(str(p))


def _at(tr, rate):
    arr = np.asarray(tr.arrival_s, float)
    native = (len(arr) - 1) / (arr[-1] - arr[0])
    return replace(tr, arrival_s=(arr - arr[0]) * (native / rate))


SLOS = ["ttft_p90=1s,tpot_p99=40ms", "ttft_p50=300ms", "tpot_mean=25ms", "e2el_p90=4s",
        "ttft=1s,tpot=40ms,attain=80%", "tpot_p99.9=30ms"]


@pytest.mark.parametrize("slo_text", SLOS)
@pytest.mark.parametrize("policy", ["ar", "fixed-k:k=4"])
def test_watch_stops_only_runs_that_fail_and_changes_nothing_else(trace, slo_text, policy):
    from spsim.simulator.engine import SimConfig, simulate

    slo = SLO.parse(slo_text)
    cfg = SimConfig().with_(policy=policy, gpu="h100-sxm", replicas=1)
    outcomes = set()
    for rate in (1.0, 3.0, 6.0, 12.0, 30.0):
        tr = _at(trace, rate)
        full = simulate(tr, cfg)
        ev = slo.evaluate(Latencies.from_requests(full.requests, full.summary))
        w = SLOWatch(slo, tr.output_tokens)
        watched = simulate(tr, cfg, watch=w, watch_every=0.5)
        assert w.checks > 0
        why = watched.summary.get("stopped_why")
        if why:
            assert not ev["met"], f"stopped at {rate} req/s ({why}) but the whole run meets {slo_text}"
            assert watched.summary["stopped_at"] <= full.summary["duration"] + float(tr.arrival_s[0]) + 1.0
            outcomes.add("stopped")
        else:
            a = {k: v for k, v in full.summary.items() if k != "config"}
            b = {k: v for k, v in watched.summary.items() if k != "config"}
            assert a == b
            pd.testing.assert_frame_equal(full.requests, watched.requests)
            outcomes.add("met" if ev["met"] else "failed late")
    # the rates span both sides of the SLO for most SLOs: the watch stopped something
    if slo_text in ("ttft_p90=1s,tpot_p99=40ms", "ttft=1s,tpot=40ms,attain=80%", "e2el_p90=4s"):
        assert "stopped" in outcomes, outcomes


def test_watch_stops_early_when_clearly_overloaded(trace):
    from spsim.simulator.engine import SimConfig, simulate

    tr = _at(trace, 40.0)
    cfg = SimConfig().with_(policy="ar", gpu="h100-sxm", replicas=1)
    full = simulate(tr, cfg)
    w = SLOWatch(SLO.parse("ttft_p90=500ms"), tr.output_tokens)
    res = simulate(tr, cfg, watch=w, watch_every=0.2)
    assert "ttft_p90=500ms" in res.summary["stopped_why"]
    assert res.summary["stopped_at"] < 0.6 * full.summary["duration"]
    assert res.summary["completed"] < full.summary["completed"]


def test_percentile_rule_is_sufficient_and_at_most_one_request_late():
    """`need` requests over the bound force numpy's percentile over it whatever the others are;
    with two fewer the percentile can stay under (the rule is late by one request at most: where
    q/100 * (n - 1) is an integer up to float error it counts one more, to be safe)."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 99, 100, 101, 1000):
        for q in (50.0, 90.0, 99.0, 99.9):
            need = n - max(0, math.floor(q / 100.0 * (n - 1) - 1e-9))
            assert 1 <= need <= n
            for _ in range(20):
                v = np.concatenate([rng.uniform(0, 1, n - need), rng.uniform(1.0001, 2, need)])
                assert np.percentile(v, q) > 1.0
            if need >= 2:
                v2 = np.concatenate([np.zeros(n - need + 2), np.full(need - 2, 2.0)])
                assert np.percentile(v2, q) <= 1.0


# ------------------------------------------------------------------ the window phase (fake probes)
class FakeProbe:
    def __init__(self, rate, replicas, n):
        self.rate, self.replicas, self.n = rate, replicas, n


def fake(cap_full, cap_window, n=1000, w=100, precision=0.05):
    """Probes pass below a capacity per replica that differs between the window and the trace."""
    s = Searcher.__new__(Searcher)
    s.s = SearchSettings(precision=precision)
    s.n, s.w = n, w
    s.calls = []

    def check(rate, replicas, n=None):
        n = s.n if n is None else n
        s.calls.append((rate, replicas, n))
        cap = cap_full if n == s.n else cap_window
        return rate < cap * replicas ** 1.1, FakeProbe(rate, replicas, n)  # pooling: more than linear

    s.check = check
    return s


@settings(max_examples=300, deadline=None)
@given(cap=st.floats(0.05, 300), bias=st.floats(0.3, 3.0), start=st.floats(0.1, 50),
       ratio=st.one_of(st.none(), st.floats(0.3, 3.0)), precision=st.sampled_from([0.02, 0.05, 0.2]),
       grow=st.sampled_from([2.0, None]), window=st.booleans())
def test_window_then_whole_trace_brackets_the_whole_trace_capacity(cap, bias, start, ratio, precision, grow, window):
    s = fake(cap, cap * bias, precision=precision)
    if not window:
        s.w = s.n
    m = s.max_rate(1, start, grow, ratio)
    if m["status"] == "ok":
        assert m["lo"] < cap <= m["hi"]
        assert m["hi"] / m["lo"] <= (1 + precision) * (1 + 1e-9)
        assert m["lo_probe"].n == s.n and m["hi_probe"].n == s.n  # both ends are whole-trace probes
    else:
        assert m["status"] in ("above", "infeasible")
    full = [c for c in s.calls if c[2] == s.n]
    assert len(full) == len(set(full))  # no whole-trace probe run twice


def test_a_good_window_estimate_costs_two_whole_trace_probes():
    s = fake(10.0, 14.0)
    # the anchor's ratio says the whole trace holds 10/14 of the window's rate
    m = s.max_rate(1, 3.0, 2.0, ratio=10.0 / 14.0)
    assert m["lo"] < 10.0 <= m["hi"]
    assert len([c for c in s.calls if c[2] == s.n]) <= 2
    assert m["window_lo"] < 14.0 <= m["window_hi"]


@pytest.mark.parametrize("cap_w, cap_f, target", [(10.0, 10.0, 35.0), (14.0, 10.0, 35.0), (7.0, 10.0, 35.0),
                                                  (10.0, 10.0, 120.0), (10.0, 10.0, 5.0), (20.0, 5.0, 30.0),
                                                  (3.0, 5.0, 30.0)])
def test_fewest_replicas_through_the_window(cap_w, cap_f, target):
    s = fake(cap_f, cap_w)
    f = s.fewest_replicas(target, cap_w, 1, 8)
    expect = next((r for r in range(1, 9) if target < cap_f * r ** 1.1), None)
    assert f["replicas"] == expect
    if expect is not None:
        assert f["probe"].n == s.n  # decided on the whole trace, not the window
    assert any(c[2] == s.n for c in s.calls)


@pytest.mark.parametrize("start", [1, 3, 4, 5, 8])
def test_fewest_replicas_from_a_neighbours_answer(start):
    s = fake(10.0, 14.0)
    f = s.fewest_replicas(35.0, 10.0, 1, 8, start=start)
    assert f["replicas"] == next(r for r in range(1, 9) if 35.0 < 10.0 * r ** 1.1)
    assert all(c[2] == s.n for c in s.calls)  # no window phase
    assert s.calls[0][1] == start


def test_window_size():
    assert window_size(19366, None) == 2420
    assert window_size(1500, None) == 1500  # too short for a window phase
    assert window_size(60, 30) == 30 and window_size(60, 31) == 60 and window_size(60, 0) == 60


# ------------------------------------------------------------------ end to end with a window
def test_plan_with_window_answers_from_whole_trace_probes(tmp_path, trace):
    from spsim.planning.run import PlanInputs, run_plan
    from spsim.simulator.engine import SimConfig
    from spsim.traces.io import write_trace

    p = tmp_path / "t.jsonl"
    write_trace(trace, p)
    kw = dict(trace=str(p), trace_format=None, limit=None, skip_invalid=False, slo="ttft_p90=1s,tpot_p99=40ms",
              policies="ar,fixed-k:k=4", gpus="h100-sxm", models="llama-3.1-8b", replicas="1..4",
              max_batch="256", draft_budget="2048", draft_kv="auto", tp="1", target_rate=12.0, precision=0.05,
              early_stop=True, prices=None, base=SimConfig(), jobs=1, ray=False, ray_address=None, window=40)
    plan = run_plan(PlanInputs.from_options(**kw), out=tmp_path / "out")
    assert plan.meta["window"] == 40
    probes = pd.DataFrame(plan.probes)
    assert set(probes["kind"]) == {"window", "full"}
    assert (probes[probes["kind"] == "window"]["requests"] == 40).all()
    assert plan.meta["probes_stopped"] > 0
    for r, res in zip(plan.rows, plan.results):
        mine = probes[(probes["config"] == r["config"]) & (probes["kind"] == "full") & (probes["replicas"] == 1)]
        assert r["status"] == "ok"
        assert mine[np.isclose(mine["rate"], r["max_rate"])]["met"].all()
        top = mine[np.isclose(mine["rate"], r["bracket_hi"])]
        assert len(top) and not top["met"].any()
        assert r["bracket_hi"] / r["max_rate"] <= 1.05 * (1 + 1e-9)
        assert res["window_lo"] is not None
        if r["fewest_replicas"] is not None:
            at = probes[(probes["config"] == r["config"]) & (probes["kind"] == "full") & (probes["rate"] == 12.0)]
            assert at[at["replicas"] == r["fewest_replicas"]]["met"].all()
            below = at[at["replicas"] == r["fewest_replicas"] - 1]
            assert r["fewest_replicas"] == 1 or (len(below) and not below["met"].any())
    # stopped probes are cached for this SLO; a rerun simulates nothing and gives the same table
    again = run_plan(PlanInputs.from_options(**kw), out=tmp_path / "out")
    assert again.meta["probes_simulated"] == 0
    assert [r["max_rate"] for r in again.rows] == [r["max_rate"] for r in plan.rows]
    # another SLO does not read a record stopped for this one as a finished run
    kw["slo"] = "ttft_p90=5s,tpot_p99=80ms"
    other = run_plan(PlanInputs.from_options(**kw), out=tmp_path / "out")
    assert other.meta["probes_simulated"] > 0
    assert all(not p.get("stopped") or "80ms" in p["stopped"] or "5s" in p["stopped"] for p in other.probes)
