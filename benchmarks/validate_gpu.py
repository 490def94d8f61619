"""`spsim validate` over the issue's targets in one GPU command, from a checkout without an install
(the GPU machine: no pip install, no simpy, maybe no typer or rich; simpy comes from
vendor/wheels/, imported from its wheel).

    python3 benchmarks/validate_gpu.py --out benchmarks/results --minutes 8

Targets (default): the standing matrix (docs/validation.md): the Azure conversation requests
arriving in the first 45 s at the trace's own times and at 2x and 4x that rate (short contexts),
Mooncake arrivals of the first 40 s (long contexts), the first 50 Mooncake requests offline (the
error pass by pass, the two worlds' plans checked equal) and 64 in a closed loop of 16, each under
ar, sync:k=4, fixed-k:k=4, entropy and aspire, without rehearsal. Llama-3.1-8B shape, random bf16
weights, preset acceptance sparsespec-llama8b, the H200 calibration profile where the checkout has
it (else the cost model `spsim run` would use; `--calibrate-first` fits one on this GPU first).
Runs go policy by policy over every target, so a cut-short budget still covers each target;
the matrix takes several calls (`--append`).

Each run is simulated first (seconds); its predicted duration tells whether the GPU run fits the
time left, else it is skipped and says so. An alarm at the end of --minutes stops a run that
overruns its estimate; whatever finished is written by then. Writes, in --out:
`validate_<trace>_<policy>.json` per run (validate.json's content), `validate_index.json` (every
run's headline errors, skips, machine), and `validate_runs/<name>/` (passes.jsonl with each pass's
predicted time, both summaries, both request tables). `--pack` turns that folder into one
`validate_runs<tag>.tar.gz` at the end (a machine that sends back few files sends that one;
with `--append`, the runs of the archive already there that this call did not run again stay).
Exit code 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # a checkout without an install

# The standing matrix: short contexts at the trace's own arrival times and at 2x and 4x that rate,
# long contexts arriving, offline and a closed loop (windows of 100+ requests where a p99 is judged)
TARGETS = ("azure-conv:window=45,azure-conv:window=45:speed=2,azure-conv:window=45:speed=4,"
           "mooncake:window=40,mooncake:offline:limit=50,mooncake:concurrency=16:limit=64")
POLICIES = "ar,sync:k=4,fixed-k:k=4,entropy,aspire"
PROFILE = ROOT / "calibration" / "profiles" / "h200-llama-3.1-8b.json"
# Measured against simulated time so far (docs/runtime.md): the runtime takes up to ~1.5x the
# simulated GPU time on drafting policies; plus graph captures (~0.1 s each) and a warm-up.
SLOWDOWN, FIXED_S = 1.4, 15.0
STARTUP_S = 90.0  # a start-up set of ~900 graphs at max batch 16 (H200, 8B: ~80 ms a graph)


class OutOfTime(BaseException):
    """The budget's alarm: BaseException, so no `except Exception` on the way swallows it."""


class Skip(Exception):
    pass


def parse_targets(text: str) -> list[dict]:
    """`NAME[:offline][:limit=N][:window=S][:speed=X][:qps=X][:concurrency=C]`, comma-separated
    (`speed`: the window's arrivals X times as fast, the same requests)."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, *parts = item.split(":")
        t = {"trace": name, "mode": {}, "limit": None, "window": None, "speed": None}
        for p in parts:
            k, _, v = p.partition("=")
            if k == "offline" and not v:
                t["mode"]["offline"] = True
            elif k in ("limit", "window", "speed") and v:
                try:
                    t[k] = int(v) if k == "limit" else float(v)
                except ValueError:
                    raise SystemExit(f"error: --targets {item!r}: {k} must be a number (got {v!r})") from None
                if not t[k] > 0:
                    raise SystemExit(f"error: --targets {item!r}: {k} must be > 0 (got {v!r})")
            elif k in ("qps", "concurrency") and v:
                t["mode"][k] = float(v) if k == "qps" else int(v)
            else:
                raise SystemExit(f"error: --targets {item!r}: unknown part {p!r}")
        out.append(t)
    return out


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "_", text.lower()).strip("_")


def tag(t: dict) -> str:
    """A target's load and window in a file name: offline_n50, trace_w45, qps5_w60, c16_n100."""
    m = t["mode"]
    load = ("offline" if m.get("offline") else f"qps{m['qps']:g}" if m.get("qps")
            else f"c{m['concurrency']}" if m.get("concurrency") else "trace")
    return load + (f"_x{t['speed']:g}" if t.get("speed") else "") + (f"_w{t['window']:g}" if t["window"] else "") \
        + (f"_n{t['limit']}" if t["limit"] else "")


def fail(msg: str):
    print(msg, file=sys.stderr)
    raise SystemExit(2)


def run_key(r: dict) -> tuple:
    """What makes two index rows the same run of a matrix: trace, window, load and policy."""
    return (r.get("trace"), r.get("limit"), r.get("window_s"), r.get("speed"),
            json.dumps(r.get("mode"), sort_keys=True), r.get("policy"))


def load_earlier(path: Path, version: str) -> dict:
    """An existing index (`--append`; {} where there is none), refused when its kernels were others."""
    if not path.exists():
        return {}
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        fail(f"error: {path}: not a readable index ({e})")
    if old.get("kernel_version") != version:
        fail(f"error: {path}: runs of kernel version {old.get('kernel_version')}, this checkout runs "
             f"{version}: --append merges one version's runs (use another --out or --tag)")
    return old


def headline(r: dict) -> dict:
    """The numbers a reader looks for first."""
    m = r["metrics"]
    err = {k: m[k]["rel_error"] for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
                                          "mean_e2el_ms", "p99_e2el_ms")}
    pp = r.get("per_pass") or {}
    out = {"same_plans": r["same_plans"]["equal"] if r["pass_clocked"] else None, "rel_error": err,
           "pass_median_abs_rel": pp.get("all", {}).get("median_abs_rel"),
           "pass_p95_abs_rel": pp.get("all", {}).get("p95_abs_rel"), "targets_met": r["targets_met"]}
    if "measured_runs" in m["output_throughput"]:  # --repeat: how far the measured runs spread
        out["measured_spread"] = {k: m[k].get("measured_spread") for k in err}
    return out


def main() -> int:
    t_start = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="results folder")
    ap.add_argument("--minutes", type=float, default=8.0, help="budget of the whole command")
    ap.add_argument("--targets", default=TARGETS, help=f"traces and windows (default {TARGETS})")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--profile", default=None, help="cost profile (default: the H200 calibration where the "
                    "checkout has it); 'none': the cost model `spsim run` uses")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu (tiny models: a smoke test)")
    ap.add_argument("--acceptance", default="sparsespec-llama8b")
    ap.add_argument("--rehearse", action="store_true", help="each run served once untimed first, capturing its "
                    "CUDA graph shapes (spsim validate --rehearse); twice the GPU time")
    ap.add_argument("--repeat", type=int, default=1, help="measured runs of each (spsim validate --repeat): "
                    "measured is their mean, with their range")
    ap.add_argument("--coarse-shapes", action="store_true", help="pad passes to powers of two (spsim validate "
                    "--coarse-shapes): fewer CUDA-graph shapes")
    ap.add_argument("--shape-rule", default=True, action=argparse.BooleanOptionalAction,
                    help="pad passes by the shape rule (gpu_runtime/shapes.py; default on)")
    ap.add_argument("--startup-shapes", default=True, action=argparse.BooleanOptionalAction,
                    help="with --shape-rule: capture the settings' start-up shape set once per process, none while "
                    "serving (default on)")
    ap.add_argument("--max-batch", type=int, default=None, help="most requests running (the serving setting)")
    ap.add_argument("--overlap", default=None, action=argparse.BooleanOptionalAction,
                    help="plan each pass while the previous runs (spsim validate --overlap; default: on GPUs)")
    ap.add_argument("--tag", default="", help="added to the result files' names (e.g. _rehearsed)")
    ap.add_argument("--calibrate-first", type=float, default=None, metavar="MINUTES",
                    help="measure and fit a profile on this GPU first (calibrate_gpu, this many minutes of the "
                    "budget) and validate against it: calibration and validation on one machine, in one command")
    ap.add_argument("--calibrate-design", default="default", choices=["default", "smoke"])
    ap.add_argument("--calibrate-points", default=None, metavar="FILE[,FILE]",
                    help="with --calibrate-first: also measure these pass compositions (calibrate_gpu --points)")
    ap.add_argument("--append", action="store_true", help="merge into --out's index of earlier calls (one "
                    "matrix over several device calls): runs of the same trace, load and policy are replaced, "
                    "the others kept; the index must be of this checkout's kernel version")
    ap.add_argument("--pack", action="store_true", help="validate_runs/ as one .tar.gz at the end (per-pass files)")
    a = ap.parse_args()

    from spsim.config import ServingConfig
    from spsim.errors import SpsimError
    from spsim.spec import split_specs
    from spsim.traces import read_trace
    from spsim.traces.transforms import rescale_qps
    from spsim.validate import check, dumps, select, validate, write
    from spsim.validate_report import text

    deadline = t_start + 60 * a.minutes - 10  # the last seconds: writing the index
    out = Path(a.out)
    profile = None if a.profile == "none" else a.profile or (str(PROFILE) if PROFILE.is_file() else None)
    try:
        targets = parse_targets(a.targets)
        policies = split_specs(a.policies)
        traces = {}
        for t in targets:
            key = (t["trace"], t["limit"], t["window"], t["speed"])
            if key not in traces:
                tr = select(read_trace(t["trace"]), t["limit"], t["window"])
                if t["speed"] and len(tr) > 1:
                    tr = rescale_qps(tr, t["speed"] * len(tr) / float(tr.arrival_s[-1]))
                traces[key] = tr
        for p in policies:  # every spec checked before the GPU is touched
            check(ServingConfig(policy=p, acceptance=a.acceptance, model=a.model, profile=profile))
        out.mkdir(parents=True, exist_ok=True)
    except (SpsimError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 2)

    def alarm(signum, frame):
        raise OutOfTime()

    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(max(1, int(deadline - time.monotonic())))

    from spsim.gpu_runtime.engine import RuntimeOptions, load

    if a.repeat < 1:
        sys.exit(f"validate_gpu.py: --repeat must be >= 1 (got {a.repeat})")
    opts = RuntimeOptions(device=a.device, rehearse=a.rehearse, repeats=a.repeat, coarse_shapes=a.coarse_shapes,
                          shape_rule=a.shape_rule, startup_shapes=a.startup_shapes, say=print,
                          overlap=a.overlap)
    index = {"benchmark": "validate_gpu", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "command": " ".join(sys.argv), "minutes": a.minutes, "model": a.model, "profile": profile,
             "rehearse": a.rehearse, "repeat": a.repeat, "coarse_shapes": a.coarse_shapes, "shape_rule": a.shape_rule, "startup_shapes": a.startup_shapes,
             "max_batch": a.max_batch,
             "overlap": a.overlap,
             "acceptance": a.acceptance, "machine": {"python": platform.python_version()}, "runs": []}

    from spsim.calibration.measure import kernel_version

    index["kernel_version"] = kernel_version()
    index_path = out / f"validate_index{a.tag}.json"
    old = load_earlier(index_path, index["kernel_version"]) if a.append else {}
    earlier = [dict(r, date=r.get("date", old.get("date"))) for r in old.get("runs", [])]
    earlier_calls = (old.get("calls") or [{"date": old.get("date"), "command": old.get("command")}]) if old else []
    earlier_device = (old.get("machine") or {}).get("device") if earlier else None

    def save_index():
        index["wall_s"] = round(time.monotonic() - t_start, 1)
        mine = {run_key(r) for r in index["runs"]}
        merged = dict(index, runs=[r for r in earlier if run_key(r) not in mine] + index["runs"])
        if a.append:
            merged["calls"] = earlier_calls + [{"date": index["date"], "command": index["command"],
                                                "speed_vs_profile": index["machine"].get("speed_vs_profile")}]
        index_path.write_text(json.dumps(merged, indent=2, default=str) + "\n")

    mon = None  # clocks.ClockMonitor, once the model is on the GPU
    try:
        if a.calibrate_first:
            # in a process of its own: everything the sweep held on the GPU is gone before the runs
            # size their KV pools (in one process, aspire's rehearsal once ran out of memory after it)
            import subprocess

            t0 = time.monotonic()
            prof = out / f"profile-{a.model}{a.tag}.json"
            cmd = [sys.executable, str(ROOT / "benchmarks" / "calibrate_gpu.py"), "--model", a.model, "--minutes",
                   str(a.calibrate_first), "--out", str(prof), "--measurements",
                   str(prof.with_suffix(".measurements.jsonl")), "--device", a.device, "--design", a.calibrate_design] \
                + ["--shape-rule" if a.shape_rule else "--no-shape-rule"] \
                + [x for f in (a.calibrate_points or "").split(",") if f for x in ("--points", f)]
            rc = subprocess.run(cmd).returncode
            if rc:
                print(f"error: the calibration failed (exit code {rc}): {' '.join(cmd)}", file=sys.stderr)
                return 2
            meta = json.loads(prof.read_text()).get("metadata", {})
            profile = str(prof)
            index["profile"] = profile
            index["calibration"] = {"minutes": a.calibrate_first, "wall_s": round(time.monotonic() - t0, 1),
                                    "heldout_error": meta.get("heldout_error"), "points": meta.get("points")}
            save_index()
        t0 = time.monotonic()
        model, tok = load(ServingConfig(model=a.model, acceptance=a.acceptance), opts)
        import torch

        index["machine"].update(torch=torch.__version__, device=(torch.cuda.get_device_name(model.device)
                                                                 if model.device.type == "cuda" else "cpu"))
        if a.append and earlier_device not in (None, index["machine"]["device"]):
            fail(f"error: {index_path}: runs on {earlier_device}, this call runs on {index['machine']['device']}: "
                 "--append merges one GPU's runs (use another --out or --tag)")
        print(f"model {a.model} loaded in {time.monotonic() - t0:.1f} s", flush=True)
        machine_speed = None
        if model.device.type == "cuda":  # this machine's speed against the profile's (calibration/machine.py)
            from spsim.calibration import machine

            try:
                here = machine.probe(model)
            except Exception as e:  # noqa: BLE001  (a probe that fails costs the comparison, not the runs)
                print(f"warning: the machine probe failed ({type(e).__name__}: {str(e)[:200]})", flush=True)
                here = None
            if here is not None:
                ref = machine.reference(json.loads(Path(profile).read_text()), profile) if profile else None
                machine_speed = machine.speed(here, ref)
                index["machine"]["anchor_s"] = here["anchor_s"]
                index["machine"]["speed_vs_profile"] = machine_speed
                print(f"decode-step anchor {1e3 * here['anchor_s']:.2f} ms here" + (
                    f", {1e3 * machine_speed['profile_anchor_s']:.2f} ms on the profile's machine "
                    f"({100 * machine_speed['slower']:+.1f} %)" if machine_speed else
                    " (the profile has none to compare)"), flush=True)
        from spsim.calibration.clocks import ClockMonitor

        # the GPU's SM clock and power over each measured run (at the power cap they follow the work)
        mon = ClockMonitor.start(model.device.index or 0) if model.device.type == "cuda" else None
        # interleaved: each policy on every trace before the next policy
        for policy in policies:
            for t in targets:
                tr = traces[(t["trace"], t["limit"], t["window"], t["speed"])]
                name = "_".join([slug(Path(t["trace"]).stem), tag(t), slug(policy)]) + a.tag
                row = {"trace": t["trace"], "limit": t["limit"], "window_s": t["window"], "speed": t["speed"],
                       "requests": len(tr),
                       "policy": policy, "mode": t["mode"] or "trace arrivals",
                       "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
                index["runs"].append(row)
                cfg = ServingConfig(policy=policy, acceptance=a.acceptance, model=a.model, profile=profile,
                                    **({"max_batch": a.max_batch} if a.max_batch else {}),
                                    **t["mode"])

                def fits(sim, tr=tr, cfg=cfg):
                    # GPU-busy time at the runtime's pace; with arrivals the run lasts at least the
                    # arrival span (plus a drain)
                    busy = SLOWDOWN * sum(sim.summary["pass_time_s"].values())
                    span = 0.0 if cfg.offline or cfg.concurrency else float(tr.arrival_s[-1]) + 10
                    est = max(busy, span) * (a.repeat + (1 if a.rehearse else 0)) + FIXED_S \
                        + (STARTUP_S if a.startup_shapes else 0)
                    row["estimated_s"] = round(est, 1)
                    if est > deadline - time.monotonic():
                        raise Skip(f"estimated {est:.0f} s, {deadline - time.monotonic():.0f} s left")

                print(f"\n== {name}: {len(tr):,} requests, {t['mode'] or 'trace arrivals'}", flush=True)
                t1 = time.monotonic()
                try:
                    v = validate(tr, cfg, opts, model=model, tokenizer=tok, warm=a.device == "cuda",
                                 log=lambda m: print(m, flush=True), before_run=fits,
                                 machine_factor=1.0 + machine_speed["slower"] if machine_speed else None)
                except Skip as e:
                    row["status"] = f"skipped: {e}"
                    print(row["status"], flush=True)
                    save_index()
                    continue
                except SpsimError as e:
                    row["status"] = f"error: {e}"
                    print(row["status"], flush=True)
                    save_index()
                    continue
                v.report["trace"] = t["trace"]
                # measured on a machine this much slower than the profile's (None: not known)
                v.report["machine_speed"] = row["machine_speed"] = machine_speed
                v.report["window"] = {"limit": t["limit"], "window_s": t["window"], "speed": t["speed"]}
                if mon is not None:  # the measured run is the last `runtime` seconds of validate()
                    end = time.monotonic()
                    row["gpu_clocks"] = v.report["gpu_clocks"] = mon.window(end - v.report["wall_s"]["runtime"], end)
                write(out / "validate_runs" / name, v)
                (out / f"validate_{name}.json").write_text(dumps(v.report))
                row.update(status="done", file=f"validate_{name}.json", wall_s=round(time.monotonic() - t1, 1),
                           **headline(v.report))
                print(text(v.report), flush=True)
                save_index()
    except OutOfTime:
        if index["runs"] and "status" not in index["runs"][-1]:
            index["runs"][-1]["status"] = "cut by the --minutes budget"
        print(f"\nbudget of {a.minutes:g} minutes reached: stopping", flush=True)
    finally:
        signal.alarm(0)
        save_index()
        if mon is not None:
            mon.close()
    if a.pack and (out / "validate_runs").is_dir():
        pack(out / "validate_runs", out / f"validate_runs{a.tag}.tar.gz", keep_old=a.append)
    done = sum(r.get("status") == "done" for r in index["runs"])
    print(f"\n{done} of {len(targets) * len(policies)} runs done in {time.monotonic() - t_start:.0f} s; "
          f"results in {out}", flush=True)
    return 0


def pack(folder: Path, archive: Path, keep_old: bool = False) -> None:
    """`folder` into the gzip tar `archive` (names relative to its parent), then removed.
    `keep_old` (`--append`): the runs an existing archive holds that this call did not run again
    stay in it (one archive for the whole matrix)."""
    import io
    import shutil
    import tarfile

    old = []
    if keep_old and archive.exists():
        new_runs = {p.name for p in folder.iterdir()}
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                parts = Path(m.name).parts
                if m.isfile() and len(parts) > 2 and parts[1] not in new_runs:
                    old.append((m, tar.extractfile(m).read()))
    with tarfile.open(archive, "w:gz") as tar:
        for m, data in old:
            tar.addfile(m, io.BytesIO(data))
        tar.add(folder, arcname=folder.name)
    shutil.rmtree(folder)


if __name__ == "__main__":
    sys.exit(main())
