"""The SLO grammar (spsim/slo.py): parsing, errors naming the bad term, evaluation, and its
reconciliation with --slo-ttft/--slo-tpot."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spsim.config import ServingConfig
from spsim.errors import SpsimError
from spsim.slo import SLO, Latencies, Term


def test_parse_percentile_form():
    slo = SLO.parse("ttft_p90=2s,tpot_p99=60ms")
    assert slo.terms == (Term("ttft", "p90", 2.0), Term("tpot", "p99", 0.06))
    assert slo.text() == "ttft_p90=2s,tpot_p99=60ms"
    assert slo.goodput_bound("ttft") == 2.0 and slo.goodput_bound("tpot") == 0.06
    assert slo.goodput_bound("e2el") is None


def test_parse_per_request_and_attain():
    slo = SLO.parse("ttft=1.5s, tpot=50ms, attain=95%")
    assert [t.stat for t in slo.terms] == [None, None]
    assert slo.attain == pytest.approx(0.95)
    assert SLO.parse("ttft=1s,attain=0.8").attain == pytest.approx(0.8)
    assert SLO.parse("e2el_median=10s,itl_p99=200ms").terms[0].stat == "median"


@pytest.mark.parametrize("text, words", [
    ("ttft_p90=2", ["'ttft_p90=2'", "no unit", "2s or 2ms"]),
    ("ttft_p90=2min", ["unknown unit 'min'"]),
    ("latency_p90=2s", ["unknown metric 'latency'"]),
    ("ttft_p190=2s", ["out of range"]),
    ("ttft_foo=2s", ["unknown statistic 'foo'"]),
    ("ttft_p90=2s,,tpot=1s", ["empty term"]),
    ("ttft_p90", ["expected NAME=VALUE"]),
    ("ttft=1s,ttft=2s", ["given twice"]),
    ("ttft_p90=0ms", ["must be > 0"]),
    ("ttft_p90=2s,attain=150%", ["attain=150%", "(0, 1]"]),
    ("ttft_p90=2s,attain=90%", ["per-request terms"]),
    ("itl=50ms", ["ITL is per emission"]),
    ("attain=90%", ["no latency term"]),
    ("", ["empty"]),
])
def test_errors_name_the_term(text, words):
    with pytest.raises(SpsimError) as e:
        SLO.parse(text)
    msg = str(e.value)
    assert msg.startswith("--slo") and "\n" not in msg
    for w in words:
        assert w in msg, msg


terms = st.builds(
    Term,
    st.sampled_from(["ttft", "tpot", "e2el"]),
    st.one_of(st.none(), st.sampled_from(["mean", "median"]),
              st.integers(1, 1000).map(lambda p: f"p{p / 10:g}")),
    st.one_of(st.integers(1, 10**6).map(lambda ms: ms / 1e3)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(terms, min_size=1, max_size=4, unique_by=lambda t: (t.metric, t.stat)))
def test_text_round_trips(ts):
    slo = SLO(tuple(ts))
    again = SLO.parse(slo.text())
    assert [(t.metric, t.stat) for t in again.terms] == [(t.metric, t.stat) for t in ts]
    for a, b in zip(again.terms, ts):
        assert a.bound_s == pytest.approx(b.bound_s, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="tfpoe_=0123456789.ms,%aix ", max_size=30))
def test_garbage_gives_one_line_errors(text):
    try:
        SLO.parse(text)
    except SpsimError as e:
        assert "\n" not in str(e) and str(e).startswith("--slo")


def _lat(ttft, tpot, rejected=0):
    return Latencies(np.asarray(ttft, float), np.asarray(tpot, float), np.asarray(ttft, float) + 1, {}, rejected)


def test_evaluate_percentile_and_attainment():
    lat = _lat(np.linspace(0.1, 1.0, 10), np.full(10, 0.05))
    assert SLO.parse("ttft_p50=600ms").evaluate(lat)["met"]
    assert not SLO.parse("ttft_p90=600ms").evaluate(lat)["met"]
    ev = SLO.parse("ttft=0.5s,attain=50%").evaluate(lat)
    assert ev["attained"] == pytest.approx(0.5) and ev["met"]
    assert not SLO.parse("ttft=0.5s,attain=51%").evaluate(lat)["met"]
    # rejected requests count as missing the per-request bounds
    assert SLO.parse("ttft=2s").evaluate(_lat(np.full(9, 0.1), np.full(9, 0.01), rejected=1))["attained"] == pytest.approx(0.9)


def test_latencies_from_request_frame():
    req = pd.DataFrame({"arrival_s": [0.0, 1.0, 2.0], "first_token_s": [0.5, 1.2, np.nan],
                        "finish_s": [1.5, 1.2, np.nan], "output_tokens": [11, 1, 5], "rejected": ["", "", "kv_capacity"]})
    lat = Latencies.from_requests(req)
    assert lat.ttft.tolist() == pytest.approx([0.5, 0.2])
    assert lat.tpot[0] == pytest.approx(0.1) and np.isnan(lat.tpot[1])
    assert lat.not_completed == 1


def test_config_reconciles_old_flags():
    c = ServingConfig(slo="ttft_p90=2s,tpot_p99=60ms").validate()
    assert (c.slo_ttft_s, c.slo_tpot_s) == (2.0, 0.06)
    c = ServingConfig(slo="ttft=1s", slo_tpot_s=0.05).validate()  # old flag for the other metric
    assert (c.slo_ttft_s, c.slo_tpot_s) == (1.0, 0.05)
    c.validate()  # validating twice keeps the bounds
    assert ServingConfig(slo_ttft_s=3.0).validate().slo_ttft_s == 3.0  # the old flags alone
    with pytest.raises(SpsimError, match="give it once"):
        ServingConfig(slo="ttft=1s", slo_ttft_s=3.0).validate()


def test_replay_cli_slo(tmp_path):
    from typer.testing import CliRunner

    from spsim.cli import app

    runner = CliRunner()
    p = tmp_path / "t.jsonl"
    assert runner.invoke(app, ["trace", "gen", str(p), "-n", "30", "--qps", "4", "--seed", "1",
                               "--prompt", "uniform:low=200,high=2000", "--output", "uniform:low=5,high=40"]).exit_code == 0
    import json

    r = runner.invoke(app, ["replay", str(p), "--policy", "ar", "--json", "--slo", "ttft_p90=10s,tpot_p99=1s"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["slo"]["met"] and s["goodput_slo"]["ttft_s"] == 10.0 and s["goodput_slo"]["tpot_s"] == 1.0
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "spsim.cli", "replay", str(p), "--slo", "tpot_p99=1us"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown unit 'us'" in r.stderr and "Traceback" not in r.stderr
    r = runner.invoke(app, ["replay", str(p), "--policy", "ar", "--slo-tpot", "0.0001", "--json"])  # old flag
    assert r.exit_code == 0 and json.loads(r.stdout)["request_goodput"] == 0
