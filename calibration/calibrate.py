"""`spsim calibrate`: measure the sweep on this machine's GPU (resuming a measurements file),
then fit a calibrated cost profile; or refit a measurements file anywhere (`--from`).

Also what `benchmarks/calibrate_gpu.py` runs on the GPU machine (a checkout without an install,
no simpy, maybe no rich): plain functions, plain prints.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from spsim.config import ServingConfig
from spsim.errors import SpsimError
from spsim.hardware import GPU, get_gpu
from spsim.models import ModelConfig, get_model

FIT_RESERVE_S = 20.0  # the budget keeps this much for fitting and writing the profile
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8"}


def default_paths(model: str, out: str | None, measurements: str | None) -> tuple[Path, Path]:
    out_p = Path(out) if out else Path(f"profile-{model}.json")
    meas = Path(measurements) if measurements else out_p.with_name(out_p.stem + ".measurements.jsonl")
    return out_p, meas


def calibrate_gpu(model: str = ServingConfig.model, minutes: float | None = 8.0, out: str | None = None,
                  measurements: str | None = None, device: str = "cuda", design: str = "default",
                  host_log: str | None = None, page_size: int = ServingConfig.page_size, t_start: float | None = None,
                  log=print, measure_kw: dict | None = None, points: list[str] | None = None) -> dict:
    """Measure what `measurements` lacks (until done or the time budget), then fit and write the
    profile. Returns the fit report. `points`: points files (`trace_points`) measured beside the
    design. `measure_kw`: more arguments of `measure` (tests)."""
    from .measure import measure
    from .trace_points import read_points

    t_start = time.monotonic() if t_start is None else t_start
    out_p, meas = default_paths(model, out, measurements)
    _check_writable(out_p)
    extra = [p for f in points or () for p in read_points(f)] or None
    deadline = None if minutes is None else t_start + 60 * minutes - FIT_RESERVE_S
    counts = measure(meas, model, device, design=design, deadline=deadline, page_size=page_size, log=log,
                     extra_points=extra, **(measure_kw or {}))
    again = f", {counts['retimed']} of them timed again (their repeats spread over 10 %)" if counts.get("retimed") else ""
    log(f"measured {counts['measured']} points ({counts['failed']} failed{again}) into {meas}"
        + (f"; {counts['left']} left: run the same command again to resume" if counts["left"] else ""))
    _measure_allreduce(meas, model, device, log)
    try:
        return calibrate_from(meas, out_p, host_log, log)
    except ImportError as e:
        if e.name != "scipy":
            raise
        log(f"scipy is not installed here, so no fit: the measurements are in {meas}; fit them where scipy "
            f"is (spsim calibrate --from {meas} --out {out_p})")
        return {}


def _allreduce_path(meas: Path) -> Path:
    return meas.with_name(meas.stem + ".allreduce.json")


def _measure_allreduce(meas: Path, model: str, device: str, log) -> None:
    """Where this machine has several GPUs: the tensor-parallel all-reduce (once per measurements
    file), which the fit then uses for the GPU's all-reduce latency and NVLink efficiency."""
    import torch

    path = _allreduce_path(Path(meas))
    if device != "cuda" or torch.cuda.device_count() < 2 or path.exists():
        return
    from spsim.models import get_model

    from .allreduce import measure

    try:
        hidden = get_model(model).hidden
    except SpsimError:
        hidden = 4096
    log(f"measuring the all-reduce over {torch.cuda.device_count()} GPUs (NCCL, CUDA graphs) ...")
    path.write_text(json.dumps(measure(world=torch.cuda.device_count(), hidden=hidden), indent=1) + "\n")


def _with_allreduce(gpu: GPU, meas: Path, log) -> tuple[GPU, dict | None]:
    """The GPU with its measured all-reduce constants, where the measurements file has them."""
    import dataclasses

    path = _allreduce_path(meas)
    if not path.exists():
        return gpu, None
    from .allreduce import fit as fit_allreduce

    m = json.loads(path.read_text())
    f = fit_allreduce(m["points"], int(m["world"]), gpu.nvlink_bw)
    log(f"all-reduce over {m['world']} GPUs: latency {f['allreduce_latency_s'] * 1e6:.1f} us, bus bandwidth "
        f"{f['bus_bandwidth_bytes_s'] / 1e9:.0f} GB/s (NVLink efficiency {f['nvlink_eff']:.2f}); fit median error "
        f"{_pct(f['median_abs_rel'])}")
    # the latency holds over the GPUs it was measured on (GPU.allreduce_latency adds ring steps past them)
    return dataclasses.replace(gpu, allreduce_latency_s=f["allreduce_latency_s"], nvlink_eff=f["nvlink_eff"],
                               allreduce_ranks=int(m["world"])), f


def calibrate_from(measurements: str | Path, out: str | Path | None = None, host_log: str | None = None,
                   log=print) -> dict:
    """Fit a profile to a measurements file and write it (and `<out>.fit.json`: the per-point
    predictions). Returns the report."""
    from spsim.cost import save_profile

    from .fit import fit, host_overhead_from_log
    from .machine import profile_anchor, scale_sessions
    from .machine import runs as machine_runs
    from .records import read_measurements

    meas = Path(measurements)
    if not meas.exists():
        raise SpsimError(f"{meas}: measurements file not found")
    sessions, recs = read_measurements(meas)
    if not sessions:
        raise SpsimError(f"{meas}: no session line (not written by `spsim calibrate`?)")
    s = sessions[-1]
    model = model_shape(meas, s)
    out_p = Path(out) if out else Path(f"profile-{model.name}.json")
    _check_writable(out_p)
    host = host_overhead_from_log(host_log) if host_log else None
    info = profile_info(meas, sessions)
    if len(info["session_machines"]) > 1:
        log(f"warning: {meas} was measured in sessions on different machines or code: "
            + "; ".join(info["session_machines"]))
    rs = machine_runs(meas)
    anchor, warning = profile_anchor(meas, rs)
    info.update(anchor)
    recs, scales = scale_sessions(meas, recs, rs)
    if scales:  # runs on another machine than the profile's: their times brought to its machine
        info["session_scale"] = {str(k): f for k, f in scales.items()}
        log(f"note: {warning}; their times are scaled to the profile's machine before the fit: "
            + ", ".join(f"run {k + 1} x{f:.4f}" for k, f in scales.items()))
    elif warning:
        log(f"warning: {warning}")
    if host_log:
        info["host_source"] = f"mean host_ms of {Path(host_log).name}"
    gpu, ar = _with_allreduce(gpu_of(s), meas, log)
    if ar is not None:
        info["allreduce_fit"] = {k: v for k, v in ar.items() if k != "per_point"}
    cm, report = fit(recs, model, gpu, tp=1, weight_dtype=info["weight_dtype"], kv_dtype=info["kv_dtype"],
                     page_size=int(s["page_size"]), host_overhead_s=host, info=info, runtime=runtime_of(sessions))
    side = out_p.with_name(out_p.stem + ".fit.json")
    try:
        save_profile(cm, out_p)
        side.write_text(json.dumps(report, indent=1) + "\n")
    except OSError as e:
        raise SpsimError(f"--out {out_p}: cannot write the profile ({e.strerror or e})") from None
    h, f = report["heldout_error"], report["fit_error"]
    log(f"fitted {report['points']['fit']} points, held out {report['points']['heldout']}: held-out median "
        f"{_pct(h.get('median_abs_rel'))}, p95 {_pct(h.get('p95_abs_rel'))} (fit median {_pct(f['median_abs_rel'])}, "
        f"p95 {_pct(f['p95_abs_rel'])})")
    for g, e in sorted(h.get("groups", {}).items()):
        log(f"  held out {g:<20} n={e['n']:<3} median {_pct(e.get('median_abs_rel'))}  p95 {_pct(e.get('p95_abs_rel'))}")
    if report.get("points", {}).get("excluded"):
        why = Counter(x["reason"] for x in report["excluded"])
        log("left out of the fit: " + "; ".join(f"{n} point(s): {r}" for r, n in why.items()))
    if report.get("target") == "device":
        w = report["wall_time"]
        log(f"fitted to device time (CUDA events: the overlapped runtime hides the host's part); fitted to wall "
            f"time instead: held-out median {_pct(w['heldout_error'].get('median_abs_rel'))}, p95 "
            f"{_pct(w['heldout_error'].get('p95_abs_rel'))}; the host's serial share of a pass: median "
            f"{_pct(w['host_share_median'])}")
    if "gpu_time" in report:
        g = report["gpu_time"]
        log(f"the same model fitted to device time alone (CUDA events): held-out median "
            f"{_pct(g['heldout_error'].get('median_abs_rel'))}, p95 {_pct(g['heldout_error'].get('p95_abs_rel'))}; "
            f"the host's serial share of a pass: median {_pct(g['host_share_median'])}")
    log(f"wrote {out_p} (use: spsim replay TRACE --profile {out_p}) and {side}")
    return report


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _check_writable(path: Path) -> None:
    """Fail before any work where `--out` cannot be written (a read-only folder failed only after
    the fit, with a traceback)."""
    import tempfile

    if path.is_dir():
        raise SpsimError(f"--out {path}: is a folder, not a file")
    if not path.parent.exists():
        raise SpsimError(f"--out {path}: folder {path.parent} does not exist")
    try:  # a probe file: permissions and read-only file systems alike (root passes os.access)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".spsim-probe-"):
            pass
        if path.exists():
            with open(path, "a"):
                pass
    except OSError as e:
        raise SpsimError(f"--out {path}: cannot write there ({e.strerror or e})") from None


def model_shape(path, session: dict) -> ModelConfig:
    """The simulator's shape of the measured model (the catalog's, checked against what was
    measured; a shape outside the catalog as measured)."""
    name, shape = session.get("model_name"), session.get("model_shape")
    if not name or not isinstance(shape, dict):
        raise SpsimError(f"{path}: session line lacks model_name / model_shape")
    try:
        m = get_model(name)
    except SpsimError:
        return ModelConfig(name, **{k: shape[k] for k in ("layers", "hidden", "q_heads", "kv_heads", "head_dim",
                                                          "intermediate", "vocab", "max_context", "tied_embeddings",
                                                          "qkv_bias")})
    diff = [k for k, v in shape.items() if getattr(m, k, v) != v]
    if diff:
        raise SpsimError(f"{path}: measured {name} has {', '.join(diff)} unlike spsim's {m.name} shape")
    return m


def gpu_of(session: dict) -> GPU:
    """The catalog GPU of the measured device (its datasheet is the fit's starting point); a GPU
    outside the catalog starts from the H200's figures with its own name and memory."""
    name = str(session.get("device_name") or "")
    try:
        return get_gpu(name)
    except SpsimError:
        h = get_gpu("h200")
        key = name.strip().lower().replace(" ", "-") or "unknown"
        return GPU(key, int(session.get("memory_bytes") or h.mem_bytes), h.hbm_bw, h.bf16_flops, h.fp8_flops,
                   h.nvlink_bw, h.sm_count)


def runtime_of(sessions: list[dict]) -> dict:
    """The measured runtime's facts the cost model prices (`measure.runtime_facts`); measuring runs
    from before they were recorded ran every prefill pass eagerly in one attention launch. Runs
    that disagree cannot be fitted as one runtime."""
    facts = {(int(x.get("prefill_graph_tokens", 0)), bool(x.get("prefill_split", False)), bool(x.get("overlap", False)),
              "rule" if x.get("shape_rule") else "bucket" if x.get("padded") else "none") for x in sessions}
    if len(facts) > 1:
        raise SpsimError("the measurements' sessions ran different runtimes (prefill graphs / split launches / "
                         f"overlapped passes / padding: {sorted(facts)}): measure into a new file")
    (tokens, split, overlap, padding), = facts
    return {"prefill_graph_tokens": tokens, "prefill_split": split, "overlap": overlap, "padding": padding}


def profile_info(path: Path, sessions: list[dict]) -> dict:
    """What the profile records about the measurement (the last measuring run's machine)."""
    s = sessions[-1]
    g = gpu_of(s)
    return {
        "gpu_name": g.name, "device_name": s.get("device_name"), "memory_bytes": s.get("memory_bytes"),
        "weight_dtype": DTYPES.get(s.get("dtype"), "bf16"), "kv_dtype": DTYPES.get(s.get("kv_dtype"), "bf16"),
        "measured_dtype": s.get("dtype"), "kv_pages_allocatable": s.get("kv_pages_allocatable"),
        "versions": s.get("versions") or {}, "cuda": s.get("cuda"), "kernel_version": s.get("kernel_version"),
        "git": s.get("git"), "date": s.get("date"), "measurements": path.name, "sessions": len(sessions),
        "design": s.get("design"), "token_ids": s.get("token_ids", "one per request"),
        "session_machines": sorted({f"{x.get('device_name')} / torch {(x.get('versions') or {}).get('torch')} / "
                                    f"kernels {x.get('kernel_version')}" for x in sessions}),
    }
