"""Calibration points from a simulated run (`spsim replay --calibration-points`, calibration/
trace_points.py): each priced pass becomes the point that builds the same plan; the chosen points
stand for the run's GPU time; the file reads back, bad lines named; the run's results do not change;
`spsim calibrate --points` measures them beside the design (CPU, tiny model)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from spsim.calibration.design import Point
from spsim.calibration.trace_points import Recorded, choose, plan_point, read_points, write_points
from spsim.cli import app
from spsim.errors import InputError, SpsimError
from spsim.plan import DraftMethod, PassPlan

runner = CliRunner()
VQ = int(DraftMethod.VERIFY_QUEST)


def _plan(pre=(), dr=(), ver=(), method=VQ, budget=1024):
    a = lambda xs, i: np.asarray([x[i] for x in xs], np.int64)  # noqa: E731
    n0, n1 = len(pre), len(pre) + len(dr)
    ids = np.arange(n1 + len(ver))
    return PassPlan(prefill_ids=ids[:n0], prefill_tokens=a(pre, 1), prefill_context=a(pre, 0),
                    prefill_last=np.ones(n0, bool), draft_ids=ids[n0:n1], draft_context=a(dr, 0),
                    draft_budget=budget, draft_method=method, draft_pos=a(dr, 1),
                    verify_ids=ids[n1:], verify_query=a(ver, 1), verify_context=a(ver, 0))


def test_a_pass_becomes_the_point_that_plans_it_again():
    plan = _plan(pre=((300, 64),), dr=((5000, 2), (900, 0)), ver=((7000, 5),))
    p = plan_point(plan, VQ, speculative=True)
    assert (p.group, p.method, p.budget) == ("prefill", VQ, 1024)
    again = p.plan()
    for f in ("prefill_tokens", "prefill_context", "draft_context", "draft_pos", "verify_query", "verify_context",
              "draft_method", "draft_budget"):
        assert np.array_equal(getattr(again, f), getattr(plan, f)), f
    assert plan_point(_plan(dr=((5000, 2),), ver=((7000, 5),)), VQ, True).group == "mixed"
    assert plan_point(_plan(dr=((5000, 2),)), VQ, True).group == "draft"
    # a plain decode: `ar` in an ar run (the sweep's static), `verify` in a speculative one
    dec = _plan(ver=((7000, 1), (300, 1)))
    assert (plan_point(dec, VQ, False).group, plan_point(dec, VQ, False).method) == ("ar", int(DraftMethod.STATIC))
    assert (plan_point(dec, VQ, True).group, plan_point(dec, VQ, True).method) == ("verify", VQ)


def test_choose_keeps_the_costly_kinds_each_by_its_median_pass():
    passes = []
    for i in range(30):  # many cheap decodes of one kind, a few costly mixed passes of another
        passes.append(Recorded(Point("verify", VQ, verifies=((4000 + i, 1),) * 4), 0.005 + i * 1e-5))
    for i, t in enumerate((0.020, 0.030, 0.025)):
        passes.append(Recorded(Point("mixed", VQ, drafts=((8000 + i, 1),) * 30, verifies=((8000, 5),) * 8), t))
    passes.append(Recorded(Point("prefill", VQ, prefill=((0, 4096),)), 0.2))
    pts, how = choose(passes, 3)
    assert len(pts) == 3 and how["passes"] == 34 and how["buckets"] == 3 and how["time_share"] == pytest.approx(1.0)
    mixed = next(p for p in pts if p.group == "mixed")
    assert mixed.drafts[0][0] == 8002  # the median-time pass of its bucket (0.025 s)
    decode = next(p for p in pts if p.group == "verify")
    assert decode.verifies[0][0] == 4015
    one, how1 = choose(passes, 1)
    assert [p.group for p in one] == ["prefill"] and how1["time_share"] == pytest.approx(0.2 / sum(r.seconds for r in passes))
    assert choose(passes, 3)[0] == pts  # deterministic
    with pytest.raises(SpsimError):
        choose(passes, 0)


def test_first_drafts_are_a_kind_of_their_own():
    """A pass of a run's first drafts (they select pages) and one of later drafts at the same counts
    and contexts fall in different buckets, so a run of both is measured with both."""
    later = [Recorded(Point("draft", VQ, drafts=((30000 + i, 2),) * 40), 0.010) for i in range(9)]
    first = [Recorded(Point("draft", VQ, drafts=((30000 + i, 0),) * 40), 0.016) for i in range(3)]
    pts, how = choose(later + first, 4)
    assert how["buckets"] == 2 and len(pts) == 2
    assert sorted(p.drafts[0][1] for p in pts) == [0, 2]


def test_points_file_round_trips_and_bad_lines_are_named(tmp_path):
    pts = [Point("mixed", VQ, 2048, drafts=((9000, 1), (100, 0)), verifies=((5000, 5),)),
           Point("prefill", VQ, 2048, prefill=((0, 512),))]
    f = tmp_path / "p.jsonl"
    write_points(f, pts)
    assert [p.key for p in read_points(f)] == [p.key for p in pts]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(f.read_text() + "{not json\n")
    with pytest.raises(InputError, match=r"bad.jsonl:3: not JSON"):
        read_points(bad)
    d = pts[0].to_dict()
    del d["verifies"]
    bad.write_text(json.dumps(d) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: verifies: missing"):
        read_points(bad)
    d = pts[0].to_dict() | {"verifies": [[-5, 5]]}
    bad.write_text(json.dumps(d) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: contexts, tokens and budget must be positive"):
        read_points(bad)
    bad.write_text(json.dumps(pts[0].to_dict() | {"group": "nope"}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: not a pass composition"):
        read_points(bad)
    with pytest.raises(SpsimError, match="not found"):
        read_points(tmp_path / "none.jsonl")


def test_replay_writes_the_points_and_its_results_do_not_change(tmp_path):
    f = tmp_path / "fk.jsonl"
    args = ["replay", "mooncake", "--limit", "12", "--offline", "--policy", "fixed-k:k=4", "--json"]
    plain = runner.invoke(app, args)
    rec = runner.invoke(app, args + ["--calibration-points", str(f), "--calibration-max-points", "10"])
    assert plain.exit_code == 0 and rec.exit_code == 0, rec.output
    a, b = json.loads(plain.stdout), json.loads(rec.stdout)
    for k in ("output_throughput", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "duration", "verifications"):
        assert a[k] == b[k], k
    pts = read_points(f)
    assert 0 < len(pts) <= 10 and "calibration points from" in rec.stderr
    assert {p.group for p in pts} >= {"prefill", "mixed"} and all(p.method == VQ for p in pts)
    r = runner.invoke(app, args + ["--calibration-points", str(f), "--calibration-max-points", "0"])
    assert isinstance(r.exception, SpsimError) and r.exception.exit_code == 2
    assert "--calibration-max-points must be >= 1" in str(r.exception)


def test_calibrate_measures_the_points_beside_the_design(tmp_path):
    pytest.importorskip("torch")
    from spsim.calibration.design import smoke_design
    from spsim.calibration.measure import measure
    from spsim.calibration.records import read_measurements

    fits = Point("mixed", VQ, 128, drafts=((300, 1), (200, 0), (250, 2)), verifies=((400, 3),))
    too_long = Point("verify", VQ, 128, verifies=((10 ** 6, 2),))
    log = []
    c = measure(tmp_path / "m.jsonl", "tiny", "cpu", design="smoke", bench_kw=dict(min_reps=1, max_reps=1, target_s=0.0),
                log=log.append, extra_points=[fits, too_long, fits], anchor=False)
    sessions, recs = read_measurements(tmp_path / "m.jsonl")
    keys = {m.point.key for m in recs}
    assert fits.key in keys and too_long.key not in keys
    assert c["design"] == len(smoke_design(4096, 4096 * 16)) + 1
    assert sessions[0]["extra_points"] == {"given": 2, "skipped": 1}
    assert sum(m.point.key == fits.key for m in recs) == 1  # given twice, measured once
    assert any("1 extra points (2 given; 1 skipped" in x for x in log)


def test_calibrate_cli_checks_the_points_file_first(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text("[1, 2]\n")
    r = runner.invoke(app, ["calibrate", "--gpu", "--device", "cpu", "--model", "tiny", "--points", str(bad),
                            "--out", str(tmp_path / "x.json")])
    assert isinstance(r.exception, InputError) and "p.jsonl:1: expected a JSON object" in str(r.exception)
    r = runner.invoke(app, ["calibrate", "--from", str(bad), "--points", str(bad)])
    assert isinstance(r.exception, SpsimError) and "give it with --gpu" in str(r.exception)
    good = tmp_path / "good.jsonl"  # several files: each checked, the bad one named
    good.write_text('{"group":"verify","method":1,"budget":2048,"prefill":[],"drafts":[],"verifies":[[400,5]]}\n')
    r = runner.invoke(app, ["calibrate", "--gpu", "--device", "cpu", "--model", "tiny", "--points", str(good),
                            "--points", str(bad), "--out", str(tmp_path / "x.json")])
    assert isinstance(r.exception, InputError) and "p.jsonl:1: expected a JSON object" in str(r.exception)
