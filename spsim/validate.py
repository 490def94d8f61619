"""`spsim validate`: one trace on the real runtime and in the simulator, with the same cost model,
KV capacity, seed, policy and acceptance draws, and how far the simulator's prediction lands from
the measurement.

Acceptance must come from a preset (keyed draws): then which drafts are accepted is the same in
both worlds and only time differs. When time cannot change a decision (offline, or a closed loop:
passes are released by passes, not by the clock) both worlds build the same sequence of pass plans,
so the error is reported pass by pass and the plans are checked equal, per request and per pass.
With arrivals (the trace's times or --qps) the plans part ways as soon as a pass takes longer in
one world than in the other, so the comparison is on throughput and latency percentiles.

Imports neither world at module level, nor typer or rich: the GPU machine's script
(`benchmarks/validate_gpu.py`) runs this from a bare checkout, bringing simpy from vendor/wheels.
"""

from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from .config import ServingConfig
from .cost.recording import RecordingCost
from .errors import SpsimError
from .jsonlines import jsonable
from .validate_report import pass_clocked

DEFAULT_ACCEPTANCE = "sparsespec-llama8b"


def ensure_simpy() -> None:
    """The simulator needs simpy; the GPU machine has none. simpy is pure Python, and a pure-Python
    wheel imports straight from its zip, so the one in vendor/wheels/ is put on the path."""
    from .vendored import ensure_vendored

    ensure_vendored("simpy", "validate")


def select(trace, limit: int | None = None, window_s: float | None = None):
    """The requests arriving in the first `window_s` seconds, then the first `limit` of them."""
    if window_s is not None:
        if not window_s > 0:
            raise SpsimError(f"--window must be > 0 seconds (got {window_s})")
        idx = np.flatnonzero(np.asarray(trace.arrival_s) < window_s)
        if len(idx) == 0:
            raise SpsimError(f"--window {window_s:g}: no request arrives in the first {window_s:g} s")
        trace = trace.take(idx)
    if limit is not None:
        if limit < 1:
            raise SpsimError(f"--limit must be >= 1 (got {limit})")
        trace = trace.take(np.arange(min(limit, len(trace))))
    return trace


def check(cfg: ServingConfig) -> ServingConfig:
    """The settings validate needs, checked before anything loads (one line naming the problem)."""
    from .policies.registry import parse_policy
    from .spec import SpecError

    if cfg.acceptance is None:
        cfg = cfg.with_(acceptance=DEFAULT_ACCEPTANCE)
    if cfg.acceptance.strip().lower() == "real":
        raise SpsimError("validate needs preset acceptance (--acceptance PRESET, e.g. sparsespec-llama8b): with "
                         "real acceptance the two worlds accept different drafts")
    if cfg.replicas != 1:
        raise SpsimError("validate serves one replica (--replicas 1)")
    try:
        parse_policy(cfg.policy)
        from .acceptance import make_acceptance

        make_acceptance(cfg.acceptance, cfg.seed)
    except SpecError as e:
        raise SpsimError(str(e)) from None
    return cfg.validate()


@dataclass
class Validation:
    report: dict  # what validate.json holds
    run: object  # gpu_runtime.engine.RunOutput
    sim: object  # spsim.metrics.RunResult
    sim_passes: list[dict] | None  # per pass, pass-clocked modes only


def _free_device_memory(model) -> None:
    """Runs in one process share the GPU: return a finished run's KV cache and graphs to the driver,
    so the next run's free-memory sizing sees what the first one saw."""
    gc.collect()
    if getattr(model, "device", None) is not None and model.device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def warmup(trace, cfg: ServingConfig, opts, model, tokenizer, cost) -> float:
    """Compile the kernels the measured run will use (Triton compiles on first use, seconds per
    kernel) on a few short requests, so compilation is not charged to the first measured passes.
    CUDA graphs are per run and are captured again; their captures are reported, not hidden."""
    from .gpu_runtime.engine import RuntimeOptions, run_trace
    from .traces.trace import Trace

    t0 = time.perf_counter()
    n = min(4, len(trace))
    prompt = np.minimum(np.asarray(trace.prompt_tokens[:n]), 2048)
    out = np.minimum(np.asarray(trace.output_tokens[:n]), 24)
    w = Trace(np.array([f"warmup{i}" for i in range(n)], object), np.zeros(n), prompt, out)
    pages = int(sum(-(-(int(p) + int(o) + cfg.max_draft + 1) // cfg.page_size) for p, o in zip(prompt, out))) + 64
    if opts.shape_rule and opts.startup_shapes:
        # the run's own pool: the warm-up then captures the start-up set the measured run reuses
        # (engine.py: once per process and settings), and that capture is the warm-up's time
        pages = int(cfg.kv_pages or pages)
    wcfg = cfg.with_(offline=True, qps=None, concurrency=None, kv_pages=pages)
    wopts = RuntimeOptions(**{f.name: getattr(opts, f.name) for f in fields(RuntimeOptions)})
    wopts.max_passes, wopts.record_events = 400, False
    run_trace(w, wcfg, wopts, model=model, tokenizer=tokenizer, cost=cost)
    _free_device_memory(model)
    return time.perf_counter() - t0


def simulate_like(trace, cfg: ServingConfig, cost):
    """The simulator on the run's settings; pass-clocked modes step pass by pass and record each."""
    ensure_simpy()
    from .simulator.engine import SimConfig, simulate

    clocked = pass_clocked(cfg)
    sc = SimConfig(**{f.name: getattr(cfg, f.name) for f in fields(ServingConfig)}, fast=not clocked)
    rec = RecordingCost(cost) if clocked else None
    res = simulate(trace, sc, cost=rec if clocked else cost)
    return res, (rec.passes if rec is not None else None)


def validate(trace, cfg: ServingConfig, opts, *, model=None, tokenizer=None, cost=None, warm: bool | None = None,
             log=None, before_run=None, machine_factor: float | None = None) -> Validation:
    """Run `trace` in both worlds and compare. `model`/`tokenizer`: already loaded (a script serving
    several runs loads once); `cost`: the cost model both worlds price with (default: the one
    `spsim run` would give its policies, from --profile/--cost/--model); `warm`: warm up first
    (default: on GPUs); `before_run(sim_result)`: called between the simulation and the GPU run
    (a budgeted script checks the predicted duration there and may raise to skip the run);
    `machine_factor`: this GPU runs the profile's anchor pass that many times as long as the
    profile's machine (calibration/machine.py): the report adds each metric's error of the
    prediction with every price scaled by it (`machine_adjusted`), beside the plain one."""
    from .cost.calibrated import CalibratedCostModel
    from .gpu_runtime.engine import kv_pages_for, load, policy_cost_model, run_trace

    say = log or (lambda msg: None)
    cfg = check(cfg)
    ensure_simpy()
    if model is None:
        model, tokenizer = load(cfg, opts)
    _free_device_memory(model)
    # one capacity for both worlds: what `spsim run` would allocate here, fixed before anything else
    pages = kv_pages_for(model.cfg, cfg, opts, model.dtype)
    cfg = cfg.with_(kv_pages=int(pages))
    cost = cost if cost is not None else policy_cost_model(cfg, model.cfg)
    padded = (opts.pad_passes if opts.pad_passes is not None
              else opts.cuda_graphs and model.device.type == "cuda")  # as engine.py decides
    cost = priced_as_run(cost, opts.coarse_shapes, shape_rule=padded and bool(opts.shape_rule),
                         max_query=longest_query(cfg))
    wall = {}
    t0 = time.perf_counter()
    sim, sim_passes = simulate_like(trace, cfg, cost)
    wall["simulator"] = time.perf_counter() - t0
    say(f"simulated {len(trace):,} requests in {wall['simulator']:.1f} s: predicted duration "
        f"{sim.summary['duration']:.1f} s")
    if before_run is not None:
        before_run(sim)
    if warm if warm is not None else model.device.type == "cuda":
        wall["warmup"] = warmup(trace, cfg, opts, model, tokenizer, cost)
        say(f"warm-up {wall['warmup']:.1f} s")
    t0 = time.perf_counter()
    run = run_trace(trace, cfg, opts, model=model, tokenizer=tokenizer, cost=cost)
    wall["runtime"] = time.perf_counter() - t0
    _free_device_memory(model)
    say(f"runtime {wall['runtime']:.1f} s: measured duration {run.result.summary['duration']:.1f} s")
    from .validate_report import compare

    report = compare(trace, cfg, run, sim, sim_passes, cost)
    from .calibration.measure import kernel_version

    report["kernel_version"] = kernel_version()  # which kernels ran (a profile says which it timed)
    if machine_factor and machine_factor != 1.0:
        from .cost.scaled import ScaledCost

        adj, _ = simulate_like(trace, cfg, ScaledCost(cost, machine_factor))
        report["machine_adjusted"] = {"factor": machine_factor, "rel_error": {
            k: (float(adj.summary[k]) - m["measured"]) / m["measured"] for k, m in report["metrics"].items()
            if k in adj.summary and m.get("measured") and m.get("target") is not None}}
    report["wall_s"] = {k: round(v, 2) for k, v in wall.items()}
    # a profile timed its passes serially or overlapped (CalibratedParams.overlap): the run should match
    measured = isinstance(cost, CalibratedCostModel) and cost.overlapped
    ran = run.result.summary["runtime"].get("overlap")
    if isinstance(cost, CalibratedCostModel) and ran is not None and measured != bool(ran):
        msg = (f"the profile timed its passes {'overlapped' if measured else 'serially'} but this run "
               f"{'overlapped' if ran else 'ran serially'} (--overlap/--no-overlap): the host's share of each "
               "pass is priced for the other loop")
        report.setdefault("warnings", []).append(msg)
        say(f"warning: {msg}")
    return Validation(report, run, sim, sim_passes)


def validate_measured(trace, cfg: ServingConfig, measured: dict, *, padded: bool = False,
                      shape_rule: bool = False) -> dict:
    """The simulator's prediction for `trace` against a summary measured elsewhere (`spsim bench
    serve` at a server's client): throughput, TTFT, TPOT and E2EL, judged by the same targets.
    `padded`/`shape_rule`: how the server padded its passes (GPU with CUDA graphs; the start-up
    set's rule), which a calibrated profile prices. The KV pages are the server's (recorded by
    bench serve from `/spsim/summary`) unless `cfg.kv_pages` is given."""
    from .build import build_cost_model
    from .validate_report import metrics

    cfg = check(cfg)
    if not cfg.kv_pages:
        pages = measured.get("server_kv_pages")
        if not pages:
            raise SpsimError("--kv-pages: the measured summary does not say the server's KV pages; give them "
                             "(spsim serve reports them at /spsim/summary)")
        cfg = cfg.with_(kv_pages=int(pages))
    if measured.get("completed") != len(trace):
        raise SpsimError(f"the measured summary completed {measured.get('completed')} requests, the trace has "
                         f"{len(trace)}: measure and predict the same requests (--limit, --window)")
    cost = priced_as_run(build_cost_model(cfg), False, shape_rule=padded and shape_rule, max_query=longest_query(cfg))
    sim, _ = simulate_like(trace, cfg, cost)
    met = metrics(measured, sim.summary)
    checked = [v["within"] for v in met.values() if v["within"] is not None]
    return {"spsim_validate": 1, "measured_at": measured.get("measured_at", "client"),
            "server": measured.get("server"), "requests": len(trace), "policy": cfg.policy, "load": cfg.load,
            "acceptance": cfg.acceptance, "seed": cfg.seed, "kv_pages": int(cfg.kv_pages),
            "cost_model": cost.name, "metrics": met,
            "targets_met": all(checked) if checked else None,
            "simulator": {"completed": sim.summary["completed"], "rejected": sim.summary["rejected"]}}


def longest_query(cfg) -> int:
    """A verification's most tokens under the run's policy (what the shape rule pads for)."""
    from .policies.registry import parse_policy

    spec = parse_policy(cfg.policy)
    return (spec.make().longest_run(cfg.max_draft) if spec.cls.speculative else 0) + 1


def priced_as_run(cost, coarse_shapes: bool, shape_rule: bool = False, max_query: int = 17):
    """The cost model as the run pads its passes: a calibrated profile measured on padded passes
    prices the shape rule's padding (the runtime's default with CUDA graphs) or `--coarse-shapes`
    runs' powers of two (cost/padding.py), in both worlds."""
    from .cost.calibrated import CalibratedCostModel

    if isinstance(cost, CalibratedCostModel) and cost.p.padding != "none":
        if shape_rule:
            return cost.with_params(padding="rule", rule_max_query=int(max_query))
        if coarse_shapes:
            return cost.with_params(padding="pow2")
    return cost


def write(out: Path, v: Validation) -> None:
    """validate.json, the runtime's passes.jsonl (with the simulator's price of each pass where the
    plans match), both summaries and both per-request tables."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "validate.json").write_text(dumps(v.report))
        (out / "runtime_summary.json").write_text(v.run.result.summary_json())
        (out / "sim_summary.json").write_text(v.sim.summary_json())
        v.run.result.requests.to_csv(out / "runtime_requests.csv", index=False)
        v.sim.requests.to_csv(out / "sim_requests.csv", index=False)
        pred = v.sim_passes if v.report["same_plans"].get("passes_equal") else None
        with open(out / "passes.jsonl", "w") as f:
            for i, p in enumerate(v.run.passes):
                row = dict(p)
                if pred is not None:
                    row["predicted_ms"] = round(pred[i]["predicted_ms"], 4)
                f.write(json.dumps(row) + "\n")
    except OSError as e:
        raise SpsimError(f"--out {out}: cannot write ({e.strerror or e})") from None


OUT_FILES = ("validate.json", "runtime_summary.json", "sim_summary.json", "runtime_requests.csv",
             "sim_requests.csv", "passes.jsonl")


def dumps(report: dict) -> str:
    return json.dumps(report, indent=2, default=jsonable) + "\n"
