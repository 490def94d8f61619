"""Calibration's measuring path on the CPU: the runtime times each point of a tiny model (reference
attention, wall clock), resumes its file, records failures, and runs without simpy or plotly, as
on the GPU machine; without a GPU, `--gpu` says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spsim.calibration.design import smoke_design
from spsim.calibration.records import read_measurements

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent


FAST = dict(min_reps=1, max_reps=2, target_s=0.0)


def test_measure_resumes_records_failures_and_never_remeasures(tmp_path, monkeypatch):
    from spsim.calibration import measure as M

    f = tmp_path / "m.jsonl"
    log = []
    c = M.measure(f, "tiny", "cpu", design="smoke", max_points=4, bench_kw=FAST, log=log.append)
    assert c["measured"] == 4 and c["left"] > 0
    sessions, recs = read_measurements(f)
    assert len(sessions) == 1 and sessions[0]["model_name"] == "tiny" and sessions[0]["kv_pages_allocatable"] > 0
    assert all(r.ok and r.seconds > 0 and len(r.record["samples"]) >= 1 for r in recs)
    # a torn line (killed mid-write) is dropped; a point that raises is recorded with its reason
    with open(f, "a") as h:
        h.write('{"id": "dead')
    real = M.Bench.run

    def flaky(self, point):
        if point.group == "prefill":
            raise RuntimeError("simulated failure\nsecond line")
        return real(self, point)

    monkeypatch.setattr(M.Bench, "run", flaky)
    with pytest.warns(UserWarning, match="torn"):
        c2 = M.measure(f, "tiny", "cpu", design="smoke", max_points=30, bench_kw=FAST, log=log.append)
    sessions, recs = read_measurements(f)
    keys = [r.point.key for r in recs]
    assert len(keys) == len(set(keys)) == len(smoke_design(4096, 4096 * 16)) and len(sessions) == 2
    fails = [r for r in recs if not r.ok]
    assert fails and all(r.point.group == "prefill" and r.record["error"] == "RuntimeError: simulated failure"
                         for r in fails)
    assert c2["failed"] == len(fails) and c2["left"] == 0
    graphed = [r.record["graphed"] for r in recs if r.ok]
    assert not any(graphed)  # no CUDA graphs on the CPU
    c3 = M.measure(f, "tiny", "cpu", design="smoke", bench_kw=FAST, log=log.append)
    assert c3["measured"] == 0 and any("already" in x for x in log)


def test_measure_refuses_another_models_file(tmp_path):
    from spsim.calibration.measure import measure
    from spsim.errors import SpsimError

    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"spsim_calibration": 1, "session": {"model_name": "llama-3.1-8b", "page_size": 16}})
                 + "\n")
    with pytest.raises(SpsimError, match="use another --measurements"):
        measure(f, "tiny", "cpu", design="smoke", max_points=1, bench_kw=FAST, log=lambda s: None)


def test_padded_points_as_spsim_run_pads_them(tmp_path):
    """With padding (as `spsim run` pads CUDA-graphed passes) a point's pass carries dummy requests
    on scratch pages past the requests' pages, the record says what they added, and the file is
    not resumed by an unpadded sweep (nor the other way round)."""
    from spsim.calibration.measure import measure
    from spsim.errors import SpsimError

    f = tmp_path / "m.jsonl"
    c = measure(f, "tiny", "cpu", design="smoke", max_points=12, bench_kw=FAST, log=lambda s: None, pad=True)
    assert c["measured"] == 12
    sessions, recs = read_measurements(f)
    assert sessions[0]["padded"] is True and sessions[0]["sweep_cache_pages"] > 0
    pads = [r.record["padding"] for r in recs if r.ok and r.point.group != "prefill"]
    assert pads and all(p["padded"] for p in pads)
    assert any(p["dummy_requests"] > 0 or p["filler_tokens"] > 0 for p in pads)
    from spsim.gpu_runtime.graphs import PREFILL_GRAPH_TOKENS

    def tokens(pt):
        return sum(n for _, n in pt.prefill) + len(pt.drafts) + sum(q for _, q in pt.verifies)

    # passes with prefill are padded as the runtime graphs them: up to PREFILL_GRAPH_TOKENS tokens
    pre = [r for r in recs if r.ok and r.point.group == "prefill"]
    assert pre and all(r.record["padding"]["padded"] == (tokens(r.point) <= PREFILL_GRAPH_TOKENS) for r in pre)
    assert sessions[0]["prefill_graph_tokens"] == 0 and sessions[0]["prefill_split"] is True  # no graphs on a CPU
    with pytest.raises(SpsimError, match="with padding"):
        measure(f, "tiny", "cpu", design="smoke", max_points=1, bench_kw=FAST, log=lambda s: None, pad=False)


def test_pipeline_without_simpy_or_plotly(tmp_path):
    """Measure (CPU, tiny) and fit in an interpreter where simpy and plotly cannot be imported, as
    on the GPU machine; the profile loads as the calibrated kind."""
    code = ("import sys\nsys.modules['simpy'] = None\nsys.modules['plotly'] = None\n"
            "from spsim.calibration.calibrate import calibrate_gpu\n"
            f"calibrate_gpu('tiny', None, {str(tmp_path / 'p.json')!r}, device='cpu', design='smoke',\n"
            "              measure_kw={'bench_kw': dict(min_reps=1, max_reps=1, target_s=0.0)}, log=lambda s: None)\n"
            "assert 'simpy' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    prof = json.loads((tmp_path / "p.json").read_text())
    md = prof["metadata"]
    assert prof["kind"] == "calibrated" and md["model_name"] == "tiny" and md["page_size"] == 16
    assert md["points"]["measured"] == len(smoke_design(4096, 65536)) and md["kv_pages_allocatable"] == 4096
    assert {"median_abs_rel", "p95_abs_rel"} <= set(md["heldout_error"]) and md["kernel_version"]
    assert md["versions"]["torch"] == torch.__version__
    assert (tmp_path / "p.fit.json").exists() and (tmp_path / "p.measurements.jsonl").exists()


def test_cli_gpu_without_a_gpu_says_so(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = subprocess.run([sys.executable, "-m", "spsim.cli", "calibrate", "--gpu", "--out", str(tmp_path / "p.json")],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "p.measurements.jsonl").exists()


def test_anchors_are_measured_through_the_sweep_and_kept_apart(tmp_path):
    """Drift controls: measured before every ANCHOR_EVERY points and at the end, with the time
    into the session; read_measurements leaves them out, read_anchors returns them."""
    from spsim.calibration import measure as M
    from spsim.calibration.design import anchor_points
    from spsim.calibration.records import read_anchors

    f = tmp_path / "m.jsonl"
    n = M.ANCHOR_EVERY + 2
    M.measure(f, "tiny", "cpu", design="smoke", max_points=n, bench_kw=FAST, log=lambda s: None)
    _, recs = read_measurements(f)
    assert len(recs) == n and all("anchor" not in r.record and r.record["t_s"] >= 0 for r in recs)
    anchors = read_anchors(f)
    kinds = {a.key for a in anchor_points(4096, 4096 * 16)}
    # before point 0, before point ANCHOR_EVERY, after the last: each time every control
    assert [a["after"] for a in anchors] == [x for x in (0, M.ANCHOR_EVERY, n) for _ in kinds]
    assert {a["anchor"] for a in anchors} == kinds and all(a["ok"] and a["seconds"] > 0 for a in anchors)
    t = [a["t_s"] for a in anchors]
    assert t == sorted(t) and all(a["session"] == 0 for a in anchors)


def test_sweep_prompts_have_an_id_per_position_reset_to_the_same_ids():
    """At a GPU's power cap a GEMM's time depends on its operands (one id repeated through a prompt
    ran prefill 1-10 % fast on the H200): the sweep's requests hold varied ids, the same after every
    reset, and the session says so."""
    from types import SimpleNamespace

    from spsim.calibration import measure as M
    from spsim.calibration.design import Point

    p = Point("prefill", prefill=((0, 512), (256, 256)), verifies=((300, 3),))
    ex = SimpleNamespace(req={})
    reset = M.token_resetter(ex, p.plan(), 32000)
    reset()
    first = {rid: list(st.tokens) for rid, st in ex.req.items()}
    assert len(first) == 3
    for toks in first.values():
        assert len(set(toks)) > len(toks) // 2 and all(0 <= t < 32000 for t in toks)
    assert first[0] != first[1][: len(first[0])]  # requests differ too
    for st in ex.req.values():  # a pass appends tokens (and verification drafts change)
        st.tokens.append(5)
    reset()
    assert {rid: list(st.tokens) for rid, st in ex.req.items()} == first
    again = SimpleNamespace(req={})
    M.token_resetter(again, p.plan(), 32000)()
    assert {rid: list(st.tokens) for rid, st in again.req.items()} == first  # same draw every time


def test_session_records_its_token_ids(tmp_path):
    from spsim.calibration import measure as M

    f = tmp_path / "m.jsonl"
    M.measure(f, "tiny", "cpu", design="smoke", max_points=1, bench_kw=FAST, log=lambda *_: None)
    sessions, _ = read_measurements(f)
    assert sessions[0]["token_ids"] == "random"


def _fake_smi(tmp_path, lines: str) -> str:
    """A stand-in nvidia-smi printing `lines` (one per 20 ms, then it waits to be stopped)."""
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!{sys.executable}\nimport sys, time\n"
                   f"for line in {lines!r}.splitlines():\n"
                   "    print(line, flush=True)\n    time.sleep(0.02)\n"
                   "time.sleep(30)\n")
    exe.chmod(0o755)
    return str(exe)


def test_clock_monitor_summarises_the_samples_of_a_window(tmp_path):
    import time

    from spsim.calibration.clocks import ClockMonitor

    t0 = time.monotonic()
    mon = ClockMonitor.start(command=_fake_smi(tmp_path, "1980, 120.5, 40\n[N/A], 1, 1\n1740, 690.0, 64\n1800, 680.0, 66\n"))
    try:
        deadline = time.monotonic() + 10
        while len(mon.rows) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        w = mon.window(t0, time.monotonic())
        assert w == {"sm_mhz": 1800.0, "sm_mhz_min": 1740.0, "power_w": 680.0, "temp_c": 66.0, "samples": 3}
        assert mon.window(t0 - 10, t0 - 5) is None  # nothing sampled then
    finally:
        mon.close()
    assert mon.proc.poll() is not None
    assert ClockMonitor.start(command=str(tmp_path / "no-such-binary")) is None


def test_points_carry_the_clocks_over_their_repeats(tmp_path):
    import time

    from spsim.calibration import measure as M
    from spsim.calibration.clocks import ClockMonitor
    from spsim.calibration.design import Point
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config

    cfg = get_config("tiny")
    model = Transformer.random(cfg, seed=0, device="cpu")
    cache = PagedKVCache(cfg, 256, 16, device="cpu", dtype=model.dtype)
    bench = M.Bench(model, cache, graphs=False, min_reps=2, max_reps=10_000, target_s=0.3)  # >= 0.3 s of repeats
    bench.monitor = ClockMonitor.start(command=_fake_smi(tmp_path, "1700, 650, 60\n" * 200))
    try:
        time.sleep(0.1)
        rec = bench.run(Point("ar", verifies=((100, 1),) * 2))
    finally:
        bench.monitor.close()
    assert rec["during"]["sm_mhz"] == 1700.0 and rec["during"]["samples"] >= 1
    bench.monitor = None
    assert "during" not in bench.run(Point("ar", verifies=((100, 1),) * 2))


def test_noisy_points_are_timed_once_more_and_only_once(tmp_path):
    """A point whose repeats spread wider than the limit (a transient crossed it) is timed again at
    the end of the next sweep, marked `retime`; the fit keeps a point's last record; a point timed
    again is never queued a third time."""
    from spsim.calibration import measure as M

    f = tmp_path / "m.jsonl"
    M.measure(f, "tiny", "cpu", design="smoke", max_points=3, bench_kw=FAST, log=lambda *_: None)
    lines = f.read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if '"id"' in x and '"ok":true' in x)
    rec = json.loads(lines[i])
    rec["samples"] = [rec["seconds"], 2 * rec["seconds"]]  # a 100 % spread
    lines[i] = json.dumps(rec)
    f.write_text("\n".join(lines) + "\n")
    assert M.spread(rec) == pytest.approx(2 / 1.5 - 1 / 1.5)
    c = M.measure(f, "tiny", "cpu", design="smoke", bench_kw=FAST, retime_spread=0.5, log=lambda *_: None)
    _, recs = read_measurements(f)
    mine = [r for r in recs if r.point.key == rec["id"]]
    assert len(mine) == 2 and mine[-1].record["retime"]["spread"] == pytest.approx(M.spread(rec), abs=1e-4)
    assert c["retimed"] >= 1 and c["left"] == 0
    counts = {}
    for r in recs:
        counts[r.point.key] = counts.get(r.point.key, 0) + 1
    assert max(counts.values()) == 2
    assert all("retime" in [x for x in recs if x.point.key == k][-1].record for k, n in counts.items() if n == 2)
    c2 = M.measure(f, "tiny", "cpu", design="smoke", bench_kw=FAST, retime_spread=0.5, log=lambda *_: None)
    assert c2["measured"] == 0 and c2["retimed"] == 0
    # the CPU default never re-times (its wall clock is noisy)
    assert M.noisy(read_measurements(f)[1], smoke_design(4096, 4096 * 16), limit=float("inf")) == []


def test_shape_rule_points_are_recorded_and_fitted_as_such(tmp_path):
    """`shape_rule=True` pads points as `--startup-shapes` runs pad them: the session says so, the
    fit prices that padding ("rule"), and a sweep padding the other way refuses the file."""
    from spsim.calibration.calibrate import runtime_of
    from spsim.calibration.measure import measure
    from spsim.errors import SpsimError

    f = tmp_path / "m.jsonl"
    c = measure(f, "tiny", "cpu", design="smoke", max_points=8, bench_kw=FAST, log=lambda s: None, pad=True,
                shape_rule=True)
    assert c["measured"] == 8
    sessions, recs = read_measurements(f)
    assert sessions[0]["shape_rule"] is True and sessions[0]["padded"] is True
    assert runtime_of(sessions)["padding"] == "rule"
    assert any(r.record["padding"]["dummy_requests"] > 0 or r.record["padding"]["filler_tokens"] > 0
               for r in recs if r.ok and r.point.group != "prefill")
    with pytest.raises(SpsimError, match="shape rule"):
        measure(f, "tiny", "cpu", design="smoke", max_points=1, bench_kw=FAST, log=lambda s: None, pad=True)


def test_calibrate_refuses_an_unwritable_out_before_fitting(tmp_path, monkeypatch):
    """`spsim calibrate --from M --out ro/x.json`: one error naming --out, before the fit runs (it
    used to fit for seconds, then end in a traceback from the read-only file system)."""
    from spsim.calibration import calibrate as C
    from spsim.calibration.measure import measure
    from spsim.errors import SpsimError

    f = tmp_path / "m.jsonl"
    measure(f, "tiny", "cpu", design="smoke", max_points=12, bench_kw=FAST, log=lambda s: None)
    fitted = []
    monkeypatch.setattr("spsim.calibration.fit.fit", lambda *a, **k: fitted.append(1))
    with pytest.raises(SpsimError, match=r"--out /proc/.*cannot write"):
        C.calibrate_from(f, "/proc/spsim-profile.json", log=lambda s: None)
    assert not fitted
    # a write that fails after the fit (a file system going read-only) is one error too
    monkeypatch.undo()
    monkeypatch.setattr("spsim.cost.save_profile", lambda *a, **k: (_ for _ in ()).throw(OSError(30, "Read-only file system")))
    with pytest.raises(SpsimError, match="cannot write the profile"):
        C.calibrate_from(f, tmp_path / "p.json", log=lambda s: None)
