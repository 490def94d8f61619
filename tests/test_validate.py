"""`spsim validate` on the CPU (`tiny`): both worlds run, the plans are checked equal (and a
difference is caught), the error tables and files come out, bad input is one line; the GPU
script runs from a bare checkout without typer, rich or an installed simpy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from spsim.cli import app  # noqa: E402
from spsim.config import ServingConfig  # noqa: E402
from spsim.errors import SpsimError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def write_trace(path, gaps=0.05, rows=((120, 14), (200, 10), (160, 12))):
    lines = [{"spsim_trace": 1}] + [{"id": f"r{i}", "arrival_s": i * gaps, "prompt_tokens": p, "output_tokens": o}
                                    for i, (p, o) in enumerate(rows)]
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return path


@pytest.fixture(scope="module")
def tiny():
    import torch

    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config

    torch.set_num_threads(1)
    return Transformer.random(get_config("tiny"), seed=0)


def test_offline_plans_match_and_every_pass_is_priced(tiny):
    from test_runtime import mixed_trace

    from spsim.gpu_runtime.engine import RuntimeOptions
    from spsim.validate import validate
    from spsim.validate_report import text

    cfg = ServingConfig(policy="fixed-k:k=3", model="tiny", offline=True, kv_pages=80, page_size=16,
                        draft_budget=48, max_draft=6, max_batch=8, token_budget=256)
    v = validate(mixed_trace(n=6, output=(30, 60)), cfg, RuntimeOptions(device="cpu"), model=tiny)
    r = v.report
    assert r["acceptance"] == "sparsespec-llama8b" and r["kv_pages"] == 80 and r["pass_clocked"]
    sp = r["same_plans"]
    assert sp["equal"] and sp["requests_equal"] and sp["passes_equal"], sp
    assert sp["passes_measured"] == sp["passes_predicted"] == len(v.sim_passes) == len(v.run.passes)
    assert v.run.result.summary["preemptions"] > 0 and v.run.result.summary["drafted_tokens"] > 0
    pp = r["per_pass"]
    assert pp["over_passes"] == "all" and pp["all"]["passes"] == len(v.run.passes)  # no graphs on the CPU
    assert {"prefill", "mixed", "draft"} <= set(pp) and 0 <= pp["all"]["median_abs_rel"] <= pp["all"]["p95_abs_rel"]
    # each pass's prediction is the cost model's price of that pass
    assert all(q["predicted_ms"] > 0 for q in v.sim_passes)
    assert sum(q["predicted_ms"] for q in v.sim_passes) / 1e3 == pytest.approx(
        sum(v.sim.summary["pass_time_s"].values()), rel=1e-6)
    for k in ("output_throughput", "mean_tpot_ms", "p99_e2el_ms", "p90_ttft_ms", "median_tpot_ms"):
        assert r["metrics"][k]["measured"] > 0 and r["metrics"][k]["predicted"] > 0, k
    assert r["metrics"]["mean_tpot_ms"]["target"] == 0.03 and r["metrics"]["p99_tpot_ms"]["target"] == 0.08
    out = text(r)
    assert "plans: the same in both worlds" in out and "pass by pass (all passes)" in out and "TPOT p99" in out


def test_same_plans_check_catches_a_difference(tiny):
    """The simulator on another seed draws other acceptance: the check must name where they part."""
    from test_runtime import mixed_trace

    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace
    from spsim.validate import check, simulate_like
    from spsim.validate_report import notes, per_pass, same_plans

    tr = mixed_trace(n=4, output=(20, 40))
    cfg = check(ServingConfig(policy="fixed-k:k=3", model="tiny", offline=True, kv_pages=200, page_size=16,
                              draft_budget=48, max_draft=6))
    from spsim.gpu_runtime.engine import policy_cost_model

    cost = policy_cost_model(cfg, tiny.cfg)
    run = run_trace(tr, cfg, RuntimeOptions(device="cpu"), model=tiny, cost=cost)
    sim, passes = simulate_like(tr, cfg.with_(seed=7), cost)
    sp = same_plans(run, sim, passes, True)
    assert not sp["equal"] and not sp["requests_equal"] and sp["passes_equal"] is False
    assert sp["first_differing"] and sp["first_differing_pass"]["pass"] > 0
    r = {"same_plans": sp, "runtime": {"stopped_early": False, "rejected": 0, "incomplete": 0},
         "simulator": {"rejected": 0, "incomplete": 0}}
    assert "did not build the same plans" in notes(r)[0]
    # the error is taken over the passes before they part
    assert per_pass(run, passes, sp["first_differing_pass"]["pass"])["all"]["passes"] == sp["first_differing_pass"]["pass"]


def test_cli_offline_writes_everything(tmp_path):
    tr = write_trace(tmp_path / "t.jsonl")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["validate", str(tr), "--model", "tiny", "--device", "cpu", "--offline",
                                   "-p", "fixed-k:k=3", "--draft-budget", "64", "--warmup", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "plans: the same in both worlds" in " ".join(res.output.split())
    assert "pass by pass" in res.output and "predicted vs measured" in res.output
    assert "measured on cpu, priced as h200" in " ".join(res.output.split())  # a smoke test, said so
    r = json.loads((out / "validate.json").read_text())
    assert r["same_plans"]["equal"] and r["requests"] == 3 and r["policy"].startswith("fixed-k")
    assert set(r["wall_s"]) == {"simulator", "warmup", "runtime"}
    passes = [json.loads(x) for x in (out / "passes.jsonl").read_text().splitlines()]
    assert len(passes) == r["same_plans"]["passes_measured"] and all(p["predicted_ms"] > 0 for p in passes)
    for f in ("runtime_summary.json", "sim_summary.json", "runtime_requests.csv", "sim_requests.csv"):
        assert (out / f).is_file(), f
    assert json.loads((out / "runtime_summary.json").read_text())["runtime"]["kv_pages"] == r["kv_pages"]
    assert json.loads((out / "sim_summary.json").read_text())["kv_capacity_pages"] == r["kv_pages"]


def test_cli_arrivals_window_and_json(tmp_path):
    """With arrivals: latency percentiles compared, no pass-by-pass table; --window keeps the
    requests arriving in its first seconds."""
    tr = write_trace(tmp_path / "t.jsonl", gaps=0.3, rows=((120, 8), (150, 8), (130, 8), (140, 8)))
    res = CliRunner().invoke(app, ["validate", str(tr), "--model", "tiny", "--device", "cpu", "--window", "0.5",
                                   "-p", "ar", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["requests"] == 2 and r["load"] == "trace" and r["per_pass"] is None
    assert not r["same_plans"]["expected"]
    assert set(r["metrics"]) >= {f"{s}_{m}" for s in ("mean", "median", "p90", "p99")
                                 for m in ("ttft_ms", "tpot_ms", "e2el_ms")}


def test_repeat_measures_several_runs_and_compares_their_mean(tiny):
    """--repeat N: N measured runs of the same trace; measured is their mean, each run's value and
    their range come along, and the offline runs are the same plans every time (same tokens, same
    decisions: only the time differs)."""
    from test_runtime import mixed_trace

    from spsim.gpu_runtime.engine import RuntimeOptions
    from spsim.validate import validate
    from spsim.validate_report import text

    cfg = ServingConfig(policy="fixed-k:k=3", model="tiny", offline=True, kv_pages=120, page_size=16,
                        draft_budget=48, max_draft=6, max_batch=8, token_budget=256)
    tr = mixed_trace(n=4, output=(12, 20))
    v = validate(tr, cfg, RuntimeOptions(device="cpu", repeats=3), model=tiny)
    r = v.report
    reps = r["runtime"]["repeats"]
    assert len(reps) == 3
    assert len({x["passes_run"] for x in reps}) == 1 and reps[0]["passes_run"] == len(v.run.passes)
    assert len({(x["total_output_tokens"], x["accepted_drafts"], x["num_drafts"]) for x in reps}) == 1
    assert reps[0]["accepted_drafts"] > 0
    m = r["metrics"]["mean_tpot_ms"]
    assert m["measured_runs"] == [x["mean_tpot_ms"] for x in reps]
    assert m["measured"] == pytest.approx(np.mean(m["measured_runs"]))
    assert m["rel_error"] == pytest.approx((m["predicted"] - m["measured"]) / m["measured"])
    lo, hi = min(m["measured_runs"]), max(m["measured_runs"])
    assert m["in_measured_range"] == (lo <= m["predicted"] <= hi)
    assert m["measured_spread"] == pytest.approx(hi / lo - 1)
    assert r["same_plans"]["equal"]  # the first run's plans, as without --repeat
    assert "measured (mean of 3)" in text(r) and " .. " in text(r)


def test_one_run_reports_no_repeats(tiny):
    from test_runtime import mixed_trace

    from spsim.gpu_runtime.engine import RuntimeOptions
    from spsim.validate import validate
    from spsim.validate_report import text

    cfg = ServingConfig(policy="ar", model="tiny", offline=True, kv_pages=120, page_size=16, max_batch=8)
    v = validate(mixed_trace(n=2, output=(6, 8)), cfg, RuntimeOptions(device="cpu"), model=tiny, machine_factor=2.0)
    assert v.report["runtime"]["repeats"] is None
    assert "measured_runs" not in v.report["metrics"]["mean_tpot_ms"] and "mean of" not in text(v.report)
    # a machine twice as slow as the profile's: offline, every predicted time doubles (exactly)
    adj, m = v.report["machine_adjusted"], v.report["metrics"]["mean_tpot_ms"]
    assert adj["factor"] == 2.0
    assert adj["rel_error"]["mean_tpot_ms"] == pytest.approx((2 * m["predicted"] - m["measured"]) / m["measured"])
    assert "priced for this machine (its anchor pass +100.0 %" in text(v.report)


def test_a_run_on_the_priced_gpu_gets_no_machine_warning():
    from spsim.validate_report import foreign_device

    r = {"device": "NVIDIA H200", "cost_model": "calibrated", "cost_metadata": {"gpu": {"name": "h200"}}}
    assert foreign_device(r) is None
    assert foreign_device({**r, "device": "NVIDIA H100 80GB HBM3", "cost_metadata": {"gpu": "h100-sxm"}}) is None
    assert "priced as h200" in foreign_device({**r, "device": "NVIDIA A100-SXM4-80GB"})
    assert foreign_device({**r, "cost_metadata": {}}) is None  # nothing to compare


def test_a_profile_of_other_kernels_gets_a_warning():
    """The shipped profile records the kernel version it timed; a GPU run on other kernels is told so,
    a run on the same kernels (or a CPU smoke test, warned of otherwise) is not."""
    import json

    from spsim.calibration.measure import KERNEL_FILES, _package_file, kernel_version
    from spsim.validate_report import other_kernels

    assert all(_package_file(n).is_file() for n in KERNEL_FILES)  # every file hashed is where it is looked for
    now = kernel_version()
    assert len(now) == 12 and now == kernel_version()
    shipped = json.loads((Path(__file__).resolve().parent.parent / "calibration" / "profiles"
                          / "h200-llama-3.1-8b.json").read_text())["metadata"]["kernel_version"]
    r = {"device": "NVIDIA H200", "cost_model": "calibrated", "kernel_version": now,
         "cost_metadata": {"gpu": {"name": "h200"}, "kernel_version": now}}
    assert other_kernels(r) is None
    old = {**r, "cost_metadata": {"gpu": {"name": "h200"}, "kernel_version": shipped if shipped != now else "0" * 12}}
    msg = other_kernels(old)
    assert msg is not None and now in msg and "spsim calibrate --gpu" in msg
    assert other_kernels({**old, "device": "cpu"}) is None
    assert other_kernels({**old, "kernel_version": None}) is None  # a report from before the field


def test_select_windows():
    from spsim.traces.trace import Trace
    from spsim.validate import select

    tr = Trace(np.array([f"r{i}" for i in range(10)], object), np.arange(10.0), np.full(10, 100), np.full(10, 5))
    assert len(select(tr, window_s=3.5)) == 4
    assert len(select(tr, limit=3, window_s=5)) == 3
    assert len(select(tr, limit=30)) == 10
    with pytest.raises(SpsimError, match="no request arrives"):
        select(Trace(tr.ids, tr.arrival_s + 5, tr.prompt_tokens, tr.output_tokens), window_s=1.0)


@pytest.mark.parametrize("args,message", [
    (["--acceptance", "real"], "needs preset acceptance"),
    (["--acceptance", "nonesuch"], "nonesuch"),
    (["--policy", "nope"], "unknown policy 'nope'"),
    (["--device", "gpu"], "--device must be cuda or cpu"),
    (["--window", "0"], "--window must be > 0"),
    (["--replicas", "2"], "No such option"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    tr = write_trace(tmp_path / "t.jsonl")
    res = CliRunner().invoke(app, ["validate", str(tr), "--model", "tiny", "--device", "cpu", "--offline", *args])
    assert res.exit_code != 0
    if isinstance(res.exception, SpsimError):
        assert message in str(res.exception) and "\n" not in str(res.exception)
    else:
        assert message in res.output


def test_missing_trace_exits_2_without_traceback(tmp_path):
    p = subprocess.run([sys.executable, "-m", "spsim.cli", "validate", str(tmp_path / "none.jsonl"), "--model", "tiny",
                        "--device", "cpu"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert "none.jsonl" in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_gpu_script_runs_from_a_bare_checkout(tmp_path):
    """benchmarks/validate_gpu.py where typer, rich and plotly are missing and simpy is only the
    vendored wheel (the GPU machine), on the CPU with `tiny`."""
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        top = name.split('.')[0]\n"
        "        if top in ('typer', 'rich', 'plotly') or (top == 'simpy' and not any(p.endswith('.whl') for p in sys.path)):\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, Block())\n")
    tr = write_trace(tmp_path / "t.jsonl")
    out = tmp_path / "res"
    env = {**os.environ, "PYTHONPATH": str(block)}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "validate_gpu.py"), "--out", str(out), "--device",
                        "cpu", "--model", "tiny", "--profile", "none", "--targets", f"{tr}:offline:limit=2",
                        "--policies", "fixed-k:k=3", "--minutes", "2", "--repeat", "2"], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    index = json.loads((out / "validate_index.json").read_text())
    assert [r["status"] for r in index["runs"]] == ["done"] and index["runs"][0]["same_plans"] is True
    assert index["repeat"] == 2 and index["runs"][0]["measured_spread"]["mean_tpot_ms"] >= 0
    r = json.loads((out / "validate_t_offline_n2_fixed-k_k_3.json").read_text())
    assert r["requests"] == 2 and r["per_pass"]["all"]["passes"] > 0
    assert (out / "validate_runs" / "t_offline_n2_fixed-k_k_3" / "passes.jsonl").is_file()


def test_gpu_script_packs_the_per_pass_files(tmp_path):
    """`validate_gpu.py --pack`: the runs' folder becomes one archive (a lent GPU machine sends back
    at most a few files), holding every file, the folder gone."""
    import tarfile

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from validate_gpu import pack

    runs = tmp_path / "validate_runs"
    (runs / "a").mkdir(parents=True)
    (runs / "a" / "passes.jsonl").write_text('{"pass": 0}\n')
    (runs / "b").mkdir()
    (runs / "b" / "validate.json").write_text("{}\n")
    pack(runs, tmp_path / "validate_runs_x.tar.gz")
    assert not runs.exists()
    with tarfile.open(tmp_path / "validate_runs_x.tar.gz") as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
        assert names == ["validate_runs/a/passes.jsonl", "validate_runs/b/validate.json"]
        assert tar.extractfile("validate_runs/a/passes.jsonl").read() == b'{"pass": 0}\n'
    # `--append`: a later call's archive keeps the earlier runs it did not run again
    (runs / "b").mkdir(parents=True)
    (runs / "b" / "validate.json").write_text('{"again": 1}\n')
    (runs / "c").mkdir()
    (runs / "c" / "validate.json").write_text("{}\n")
    pack(runs, tmp_path / "validate_runs_x.tar.gz", keep_old=True)
    with tarfile.open(tmp_path / "validate_runs_x.tar.gz") as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
        assert names == ["validate_runs/a/passes.jsonl", "validate_runs/b/validate.json", "validate_runs/c/validate.json"]
        assert tar.extractfile("validate_runs/b/validate.json").read() == b'{"again": 1}\n'


def test_gpu_script_appends_calls_into_one_index(tmp_path):
    """`validate_gpu.py --append`: a second call's runs join the first's in one index (a run of the
    same trace, load and policy replaced), each call listed; an index of other kernels is refused
    with one line and exit code 2, and so is an index of another GPU."""
    from spsim.calibration.measure import kernel_version

    tr = write_trace(tmp_path / "t.jsonl")
    out = tmp_path / "res"
    base = [sys.executable, str(ROOT / "benchmarks" / "validate_gpu.py"), "--out", str(out), "--device", "cpu",
            "--model", "tiny", "--profile", "none", "--targets", f"{tr}:offline:limit=2", "--minutes", "2", "--append"]
    for pol in ("ar", "fixed-k:k=3", "ar"):
        p = subprocess.run(base + ["--policies", pol], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    index = json.loads((out / "validate_index.json").read_text())
    assert sorted(r["policy"] for r in index["runs"]) == ["ar", "fixed-k:k=3"]
    assert all(r["status"] == "done" and r["date"] for r in index["runs"]) and len(index["calls"]) == 3
    index["kernel_version"] = "000000000000"
    (out / "validate_index.json").write_text(json.dumps(index))
    p = subprocess.run(base + ["--policies", "ar"], capture_output=True, text=True)
    assert p.returncode == 2 and "kernel version" in p.stderr and "Traceback" not in p.stderr
    index["kernel_version"] = kernel_version()  # this checkout's kernels, another GPU's runs
    index["machine"]["device"] = "NVIDIA H100 80GB HBM3"
    (out / "validate_index.json").write_text(json.dumps(index))
    p = subprocess.run(base + ["--policies", "ar"], capture_output=True, text=True)
    assert p.returncode == 2 and "H100" in p.stderr and "Traceback" not in p.stderr


def test_gpu_script_targets_take_a_speed():
    """`validate_gpu.py --targets NAME:window=S:speed=X`: the same window's requests X times as
    fast (the matrix's 2x and 4x rates), named apart in files and in the index's run key; a speed
    that is no positive number is refused with one line."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from validate_gpu import parse_targets, run_key, tag

    t = parse_targets("azure-conv:window=45:speed=2,azure-conv:window=45")
    assert t[0]["speed"] == 2.0 and t[1]["speed"] is None
    assert tag(t[0]) == "trace_x2_w45" and tag(t[1]) == "trace_w45"
    rows = [{"trace": x["trace"], "limit": x["limit"], "window_s": x["window"], "speed": x["speed"],
             "mode": x["mode"], "policy": "ar"} for x in t]
    assert run_key(rows[0]) != run_key(rows[1])
    for bad in ("azure-conv:speed=0", "azure-conv:speed=fast"):
        with pytest.raises(SystemExit, match="speed must be"):
            parse_targets(bad)


def test_a_prediction_inside_the_repeats_range_meets_its_target():
    """With several measured runs, a metric whose prediction lies between the runs' lowest and
    highest counts as met even past its bound (the GPU does not repeat itself closer than that),
    and says so; one outside the range and past the bound is not met."""
    from spsim.validate_report import metrics

    sim = {"mean_tpot_ms": 11.9, "p99_tpot_ms": 30.0}
    reps = [{"mean_tpot_ms": 10.0, "p99_tpot_ms": 20.0}, {"mean_tpot_ms": 12.0, "p99_tpot_ms": 21.0}]
    m = metrics({"mean_tpot_ms": 11.0, "p99_tpot_ms": 20.5}, sim, reps)
    assert abs(m["mean_tpot_ms"]["rel_error"]) > 0.03  # past the 3 % bound ...
    assert m["mean_tpot_ms"]["within"] is True and m["mean_tpot_ms"]["met_by"] == "measured range"
    assert m["p99_tpot_ms"]["within"] is False and "met_by" not in m["p99_tpot_ms"]
