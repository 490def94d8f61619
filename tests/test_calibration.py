"""Calibration on the CPU: the sweep design, the measurements file (resume, torn lines, bad lines),
the runtime timing of points on a tiny model, and the fit (recovers known constants; sane errors on
noisy data). The GPU sweep itself runs on the H200 (benchmarks/calibrate_gpu.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from spsim.calibration.design import GROUPS, Point, default_design, sweep_order
from spsim.calibration.fit import fit
from spsim.calibration.records import Measurement, read_measurements
from spsim.cost.batch import PlanBatch
from spsim.cost.calibrated import CalibratedCostModel, CalibratedParams
from spsim.errors import InputError, SpsimError
from spsim.plan import DraftMethod

ROOT = Path(__file__).resolve().parent.parent
WINDOW, KV = 131072, 850_000  # Llama-3.1-8B on an H200: ~900K tokens of KV beside the weights

TRUE = CalibratedParams(
    layer_fixed_s=20e-6, gemm_eff=0.8, smooth_p=2.5, weight_scale=1.1, sample_bytes_per_logit=20,
    attn_bw_scale=1.2, attn_flops_eff=0.15, attn_req_s=0.2e-6, attn_split_s=0.3e-6, eager_pass_s=4e-3,
    verify_req_s=30e-6, host_overhead_s=0.0, attn_sms=132, draft_pass_s=(2e-3, 5e-3, 3e-3, 6e-3, 7e-3),
    draft_req_s=((40e-6, 40e-6), (60e-6, 25e-6), (50e-6, 50e-6), (70e-6, 30e-6), (80e-6, 80e-6)),
    draft_page_s=((0.0, 0.0), (2e-7, 1e-8), (1e-8, 1e-8), (1e-7, 1e-8), (3e-7, 3e-7)),
    first_pass_s=(0.0, 1e-3, 0.0, 1.5e-3, 0.0), spec_pass_s=0.5e-3, attn_tile_eff=(0.2, 0.55, 0.45), attn_p=3.0,
    eager_launch_s=15e-3, eager_p=10.0, mixed_pass_s=0.3e-3, select_col_s=(0.0, 2e-8, 1e-8, 3e-8, 2e-8),
    score_col_s=1e-8, score_attn_frac=0.4, select_base_req=2.0)


# ---- design

@pytest.fixture(scope="module")
def design():
    return default_design(WINDOW, KV)


def test_default_design_covers_what_the_simulator_asks(design):
    assert 200 <= len(design) <= 400
    assert len({p.key for p in design}) == len(design)
    labels = Counter(p.label for p in design)
    for m in DraftMethod:
        assert labels[f"draft:{m.label}"] >= 10 and labels[f"mixed:{m.label}"] >= 4, m
    for g in ("ar", "verify", "prefill"):
        assert labels[g] >= 15
    ar = [p for p in design if p.group == "ar"]
    batches = {len(p.verifies) for p in ar}
    assert {1, 8, 64, 128} <= batches
    ctx = {c for p in ar for c, _ in p.verifies}
    assert min(ctx) <= 1024 and max(ctx) >= 120_000
    assert any(len({c for c, _ in p.verifies}) > 4 for p in ar)  # mixed lengths in one pass
    q = {qq for p in design if p.group == "verify" for _, qq in p.verifies}
    assert {2, 9, 17, 33} <= q
    chunks = {n for p in design if p.group == "prefill" for _, n in p.prefill}
    assert {256, 2048, 8192} <= chunks
    # a draft's cost is not its budget's alone: each method at one budget over short..long contexts
    for m in DraftMethod:
        d = [p for p in design if p.group == "draft" and p.method == m and p.budget == 2048 and len(p.drafts) == 8]
        assert len({p.drafts[0][0] for p in d}) >= 3, m
        assert {p.budget for p in design if p.group == "draft" and p.method == m} >= {512, 2048, 8192}


def test_design_fits_memory_and_window(design):
    for p in design:
        assert p.own_kv_tokens() <= 0.95 * KV and p.max_tokens() <= WINDOW, p
    small = default_design(WINDOW, 200_000)
    assert all(p.own_kv_tokens() <= 0.95 * 200_000 for p in small) and len(small) < len(design)
    drafts = max(len(p.drafts) * p.drafts[0][0] for p in design if p.group == "draft")
    assert drafts > KV  # drafting requests share pages: big drafting batches fit


def test_heldout_is_a_fixed_fifth_in_every_group(design):
    held = [p for p in design if p.heldout]
    assert 0.12 < len(held) / len(design) < 0.28
    for g in GROUPS:
        assert any(p.heldout for p in design if p.group == g), g
    again = default_design(WINDOW, KV)
    assert [p.key for p in again] == [p.key for p in design]
    assert [p.heldout for p in again] == [p.heldout for p in design]


def test_order_measures_a_coarse_half_of_everything_first(design):
    order = sweep_order(design)
    assert sorted(p.key for p in order) == sorted(p.key for p in design)
    first = order[: sum(p.tier == 0 for p in design)]
    assert {p.group for p in first} == set(GROUPS)
    assert {p.method for p in first if p.group == "draft"} == {int(m) for m in DraftMethod}


def test_point_round_trips_and_builds_its_plan():
    p = Point("mixed", int(DraftMethod.STEP_LAYER), 512, prefill=((100, 32),), drafts=((300, 0), (400, 2)),
              verifies=((200, 3),))
    assert Point.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    assert Point.from_dict(p.to_dict()).key == p.key and p.key != Point("mixed", 1, 512, p.prefill, p.drafts,
                                                                         p.verifies).key
    plan = p.plan()
    assert plan.prefill_ids.tolist() == [0] and plan.draft_ids.tolist() == [1, 2] and plan.verify_ids.tolist() == [3]
    assert plan.draft_pos.tolist() == [0, 2] and plan.draft_budget == 512
    assert plan.verify_query.tolist() == [3] and plan.prefill_last.tolist() == [True]
    with pytest.raises(ValueError):
        Point.from_dict({**p.to_dict(), "group": "nope"})


# ---- page tables

def test_requests_own_pages_while_there_are_any_then_drafts_share():
    from spsim.calibration.measure import NoRoom, page_tables

    perm = np.arange(100)
    p = Point("mixed", 1, drafts=((64, 0),) * 5, verifies=((100, 3), (40, 1)))
    t = page_tables(p, 100, 16, perm)
    assert [len(t[r]) for r in range(7)] == [5] * 5 + [7, 3]
    assert len(np.unique(np.concatenate(list(t.values())))) == 35  # all their own
    t = page_tables(p, 20, 16, perm)  # 10 pages for the verifiers, room for 2 drafts
    assert len(np.unique(np.concatenate([t[5], t[6], t[0], t[1]]))) == 20
    for rid in (2, 3, 4):
        assert any(np.array_equal(t[rid], o[:5]) for o in (t[5], t[0], t[1]))
    t = page_tables(Point("draft", 1, drafts=((800, 0),) * 6), 120, 16, perm)  # 51 pages each: 2 fit
    assert len({tuple(x.tolist()) for x in t.values()}) == 2
    with pytest.raises(NoRoom):
        page_tables(Point("ar", 0, verifies=((900, 1),) * 2), 100, 16, perm)
    with pytest.raises(NoRoom):
        page_tables(Point("draft", 1, drafts=((2000, 0),)), 100, 16, perm)


# ---- the measurements file

def _lines(path: Path, recs: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_records_torn_last_line_dropped_bad_lines_named(tmp_path):
    p = Point("ar", 0, verifies=((100, 1),))
    ok = {"id": p.key, "point": p.to_dict(), "ok": True, "seconds": 0.01}
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"spsim_calibration": 1, "session": {"model_name": "tiny"}}) + "\n" + json.dumps(ok)
                 + "\n" + '{"id": "x", "poi')
    with pytest.warns(UserWarning, match="torn last line"):
        sessions, recs = read_measurements(f)
    assert sessions == [{"model_name": "tiny"}] and len(recs) == 1 and recs[0].seconds == 0.01
    bad = [(dict(ok, seconds=-1), "seconds"), (dict(ok, seconds="fast"), "seconds"), (dict(ok, id="abc"), "id"),
           ({k: v for k, v in ok.items() if k != "ok"}, "ok"),
           (dict(ok, point={**p.to_dict(), "verifies": [[1]]}), "point"),
           (dict(ok, point={k: v for k, v in p.to_dict().items() if k != "budget"}), "point.budget")]
    for rec, field in bad:
        _lines(f, [ok, rec, ok])
        with pytest.raises(InputError) as e:
            read_measurements(f)
        assert e.value.line == 2 and e.value.field == field and str(f) in str(e.value)
    f.write_text(json.dumps(ok) + "\nnot json\n")
    with pytest.raises(InputError, match=":2: not JSON"):
        read_measurements(f)


# ---- fitting

@pytest.fixture(scope="module")
def synthetic(design):
    cm = CalibratedCostModel("llama-3.1-8b", "h200", params=TRUE)
    y = cm.times(PlanBatch.of([p.plan() for p in design]))
    return cm, y


def test_fit_recovers_known_constants(design, synthetic):
    cm, y = synthetic
    ms = [Measurement(p, True, float(t), {}, i) for i, (p, t) in enumerate(zip(design, y))]
    got, rep = fit(ms, "llama-3.1-8b", "h200", host_overhead_s=0.0)
    assert rep["heldout_error"]["n"] == sum(p.heldout for p in design) and rep["fit_error"]["n"] + \
        rep["heldout_error"]["n"] == len(design)
    assert rep["fit_error"]["p95_abs_rel"] < 1e-3 and rep["heldout_error"]["p95_abs_rel"] < 2e-3
    assert rep["heldout_error"]["max_abs_rel"] < 5e-3
    for g, e in rep["heldout_error"]["groups"].items():
        assert e["max_abs_rel"] < 5e-3, g
    for name in ("gemm_eff", "smooth_p", "weight_scale", "attn_bw_scale", "eager_pass_s", "eager_launch_s",
                 "spec_pass_s", "mixed_pass_s", "score_col_s", "score_attn_frac", "verify_req_s"):
        assert getattr(got.p, name) == pytest.approx(getattr(TRUE, name), rel=0.05), name
    # the tall tiles' rates show beside the KV read; the 16-row tile's hides under it (the overlap
    # exponent and that rate trade off at this precision, the weak prior decides between them)
    assert got.p.attn_tile_eff[2] == pytest.approx(TRUE.attn_tile_eff[2], rel=0.05)
    assert got.p.attn_tile_eff[0] == pytest.approx(TRUE.attn_tile_eff[0], rel=0.1)
    np.testing.assert_allclose(got.p.select_col_s[1:], TRUE.select_col_s[1:], rtol=0.1)
    assert got.p.select_base_req == pytest.approx(TRUE.select_base_req, rel=0.1)
    np.testing.assert_allclose(got.p.draft_pass_s, TRUE.draft_pass_s, rtol=0.1)
    np.testing.assert_allclose(np.asarray(got.p.draft_page_s)[1:], np.asarray(TRUE.draft_page_s)[1:], rtol=0.1)


def test_fit_on_noisy_data_reports_sane_errors(design, synthetic):
    _, y = synthetic
    rng = np.random.default_rng(3)
    noisy = y * np.exp(rng.normal(0, 0.03, len(y)))
    ms = [Measurement(p, True, float(t), {}, i) for i, (p, t) in enumerate(zip(design, noisy))]
    ms.append(Measurement(Point("ar", 0, verifies=((999, 1),)), False, None, {"error": "x"}, 0))
    got, rep = fit(ms, "llama-3.1-8b", "h200")
    h = rep["heldout_error"]
    assert 0.005 < h["median_abs_rel"] < 0.05 and h["p95_abs_rel"] < 0.12 and rep["points"]["failed"] == 1
    assert got.p.host_overhead_s == pytest.approx(100e-6)  # not measured: the roofline's assumption
    assert "assumption" in got.info["host_overhead"]["source"]
    # predictions are the model's own
    pr = rep["predictions"][0]
    p0 = next(m.point for m in ms if m.point.key == pr["id"])
    assert pr["predicted_s"] == pytest.approx(got.time(p0.plan()) - 100e-6, rel=1e-9)


# ---- the command line

def test_cli_errors_are_one_line(tmp_path):
    from typer.testing import CliRunner

    from spsim.cli import app

    r = CliRunner()
    bad = tmp_path / "m.jsonl"
    p = Point("ar", 0, verifies=((100, 1),))
    bad.write_text(json.dumps({"spsim_calibration": 1, "session": {"model_name": "tiny", "model_shape": {}}}) + "\n"
                   + json.dumps({"id": p.key, "point": p.to_dict(), "ok": True, "seconds": "slow"}) + "\n")
    def err(args):  # spsim.cli.main prints these as one line and exits with their code (2)
        res = r.invoke(app, ["calibrate", *args])
        assert isinstance(res.exception, SpsimError) and res.exception.exit_code == 2, res.output
        return str(res.exception)

    assert f"{bad}:2: seconds: must be a positive number" in err(["--from", str(bad)])
    assert "one of --gpu" in err([]) and "one of --gpu" in err(["--gpu", "--from", str(bad)])
    assert "not found" in err(["--from", str(tmp_path / "none.jsonl")])
    assert "--minutes" in err(["--gpu", "--minutes", "0"])
    host = tmp_path / "passes.jsonl"
    host.write_text('{"host_ms": 0.2}\n{"host_ms": "x"}\n')
    from spsim.calibration.fit import host_overhead_from_log

    with pytest.raises(InputError, match=":2: host_ms"):
        host_overhead_from_log(host)


def test_fit_drops_passes_measured_eager_that_the_runtime_graphs(design, synthetic):
    """A drafting pass recorded eager in a graphed sweep timed an older runtime: left out, and its
    method's draft terms taken from the method running the same code (verify-attn <- verify-quest)."""
    _, y = synthetic
    ms = []
    for i, (p, t) in enumerate(zip(design, y)):
        stale = p.method == DraftMethod.VERIFY_ATTN and not p.prefill and p.group == "draft"
        ms.append(Measurement(p, True, float(t) * (3.0 if stale else 1.0), {"graphed": not (stale or p.prefill)}, i))
    got, rep = fit(ms, "llama-3.1-8b", "h200", host_overhead_s=0.0)
    assert rep["points"]["excluded"] == sum(1 for m in ms if not m.record["graphed"] and not m.point.prefill) > 0
    assert rep["tied"] == {"verify-attn": "verify-quest"} and got.info["tied_draft_terms"] == rep["tied"]
    va, vq = int(DraftMethod.VERIFY_ATTN), int(DraftMethod.VERIFY_QUEST)
    assert got.p.draft_req_s[va] == got.p.draft_req_s[vq] and got.p.first_pass_s[va] == got.p.first_pass_s[vq]


def test_fit_leaves_out_points_whose_drafts_shared_pages(design, synthetic):
    """Points measured with more KV than the sweep's cache (drafts reading each other's pages from
    L2: fast) are left out with their reason; the rest still recovers the truth."""
    _, y = synthetic
    ms, n_shared = [], 0
    for i, (p, t) in enumerate(zip(design, y)):
        shared = p.group == "draft" and len(p.drafts) >= 32 and i % 2 == 0
        n_shared += shared
        ms.append(Measurement(p, True, float(t) * (0.75 if shared else 1.0), {"shared_pages": shared}, i))
    got, rep = fit(ms, "llama-3.1-8b", "h200", host_overhead_s=0.0)
    assert n_shared > 5 and rep["points"]["excluded"] == n_shared
    assert all("shared KV pages" in x["reason"] for x in rep["excluded"])
    assert rep["heldout_error"]["max_abs_rel"] < 5e-3  # the fast points did not pull the fit
    assert rep["points"]["fit"] + rep["points"]["heldout"] == len(design) - n_shared


def test_fit_reports_the_device_time_fit_and_the_host_share(design, synthetic):
    """With each point's device time (gpu_s) recorded, the report also fits the model to it and
    gives the host's part of the wall time; without gpu_s on every point, neither."""
    _, y = synthetic
    ms = [Measurement(p, True, float(t) + 1e-3, {"gpu_s": [float(t)] * 3}, i) for i, (p, t) in enumerate(zip(design, y))]
    got, rep = fit(ms, "llama-3.1-8b", "h200", host_overhead_s=0.0)
    g = rep["gpu_time"]
    assert g["heldout_error"]["p95_abs_rel"] < 2e-3 and g["heldout_error"]["n"] == rep["heldout_error"]["n"]
    assert set(g["host_ms_median"]) == {p.label for p in design}
    assert all(v == pytest.approx(1.0, abs=1e-6) for v in g["host_ms_median"].values())
    assert 0 < g["host_share_median"] < 0.5
    assert got.info["gpu_time_error"]["heldout_error"]["p95_abs_rel"] < 2e-3
    ms[3].record.pop("gpu_s")
    _, rep2 = fit(ms, "llama-3.1-8b", "h200", host_overhead_s=0.0, max_nfev=1)  # what the report holds, not the fit

    assert "gpu_time" not in rep2


def test_cli_calibrates_with_the_runtimes_shape_rule_by_default(monkeypatch):
    """`spsim run` pads by the shape rule by default (--startup-shapes), so a sweep does too: the
    profile then prices the padding runs pay; --no-shape-rule measures for runs without it."""
    from typer.testing import CliRunner

    import spsim.calibration.calibrate as cal
    from spsim.cli import app

    seen = []
    monkeypatch.setattr(cal, "calibrate_gpu", lambda *a, measure_kw=None, **kw: seen.append(measure_kw))
    for args, want in (([], True), (["--no-shape-rule"], False), (["--shape-rule"], True)):
        res = CliRunner().invoke(app, ["calibrate", "--gpu", "--model", "tiny", "--device", "cpu", *args])
        assert res.exit_code == 0, res.output
        assert seen.pop() == {"shape_rule": want}


def test_fit_searches_the_work_items_fixed_cost(design):
    """`attn_item_tokens` is chosen from `items` by the fits' loss (the fit at each value): data
    priced at 384 choose 384, and the report holds each value's loss."""
    from dataclasses import replace

    cm = CalibratedCostModel("llama-3.1-8b", "h200", params=replace(TRUE, attn_item_tokens=384.0, attn_tail_bw=1.3))
    y = cm.times(PlanBatch.of([p.plan() for p in design]))
    ms = [Measurement(p, True, float(t), {}, i) for i, (p, t) in enumerate(zip(design, y))]
    got, rep = fit(ms, "llama-3.1-8b", "h200", host_overhead_s=0.0, items=(128, 384, 768))
    assert got.p.attn_item_tokens == 384.0 and rep["attn_item_tokens"]["chosen"] == 384.0
    loss = rep["attn_item_tokens"]["loss"]
    assert set(loss) == {128.0, 384.0, 768.0} and min(loss, key=loss.get) == 384.0
    assert rep["heldout_error"]["p95_abs_rel"] < 5e-3
