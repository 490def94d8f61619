"""A plan from its inputs to its outputs: check every option before any run, load the trace, run
the sweep with a progress bar, build the tables, the Pareto front and the recommendation."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from spsim.errors import SpsimError
from spsim.report_numbers import readable
from spsim.slo import SLO

from .cache import ProbeCache
from .pareto import pareto_front
from .prices import load_prices
from .probe import Bench, trace_fingerprint
from .recommend import markdown, recommend
from .search import SearchSettings, window_size
from .space import PlanConfig, expand, int_list, split_list, varying
from .sweep import default_jobs, run_sweep
from .tables import probe_rows, result_rows


@dataclass
class PlanInputs:
    trace_name: str
    trace: object
    configs: list[PlanConfig]
    slo: SLO
    base: object  # SimConfig
    rmin: int
    rmax: int
    target_rate: float
    native_rate: float
    settings: SearchSettings
    prices: dict
    prices_source: str
    jobs: int
    ray: bool = False
    ray_address: str | None = None
    cost_note: str = ""

    @classmethod
    def from_options(cls, *, trace, trace_format, limit, skip_invalid, slo, policies, gpus, models, replicas,
                     max_batch, draft_budget, draft_kv, tp, target_rate, precision, early_stop, prices, base,
                     jobs, ray, ray_address, window=None) -> "PlanInputs":
        from spsim.build import build
        from spsim.cli_report import DEFAULT_TRACE, load_trace
        from spsim.hardware import get_gpu
        from spsim.models import get_model
        from spsim.plan import DraftMethod
        from spsim.cli_options import policy_specs

        slo_obj = SLO.parse(slo)
        specs = policy_specs(policies)
        gpu_l = [get_gpu(g).name for g in split_list(gpus, "--gpus")]
        model_l = [get_model(m).name for m in split_list(models, "--models")]
        kv_l = split_list(draft_kv, "--draft-kv")
        for k in kv_l:
            if k != "auto":
                DraftMethod.parse(k)
        reps = int_list(replicas, "--replicas")
        if not (precision > 0 and precision < 1):
            raise SpsimError(f"--precision must be in (0, 1) (got {precision})")
        if target_rate is not None and not target_rate > 0:
            raise SpsimError(f"--target-rate must be > 0 (got {target_rate})")
        if window is not None and window < 0:
            raise SpsimError(f"--window must be >= 0 (got {window})")
        if jobs is not None and jobs < 1:
            raise SpsimError(f"--jobs must be >= 1 (got {jobs})")
        if ray_address and not ray:
            raise SpsimError("--ray-address needs --ray")
        configs = expand(specs, gpu_l, model_l, int_list(max_batch, "--max-batch"), int_list(draft_budget, "--draft-budget"),
                         kv_l, int_list(tp, "--tp"))
        base, cost_note = _one_kind_of_cost(configs, base)
        for c in configs:  # every configuration builds (fits its GPU, valid settings) before any run
            try:
                build(c.serving(base).with_(replicas=min(reps)))
            except SpsimError as e:
                raise SpsimError(f"configuration {c.label()}: {e}") from None
        price_table, source = load_prices(prices)
        tr = load_trace(trace, trace_format, limit, skip_invalid)
        if len(tr) < 2 or tr.arrival_s[-1] <= tr.arrival_s[0]:
            raise SpsimError("plan rescales the trace's arrivals: it needs at least two requests spanning some time")
        native = (len(tr) - 1) / float(tr.arrival_s[-1] - tr.arrival_s[0])
        return cls(trace or DEFAULT_TRACE, tr, configs, slo_obj, base, min(reps), max(reps),
                   target_rate or native, native, SearchSettings(precision=precision, early_stop=early_stop, window=window),
                   price_table, source, jobs or default_jobs(), ray, ray_address, cost_note)


def _one_kind_of_cost(configs, base) -> tuple[object, str]:
    """Price every configuration alike. A measured profile prices our runtime on that GPU, the
    roofline an ideal engine: where spsim ships profiles for some of the configurations' GPUs and
    models but not all (`--cost auto`), all of them use the roofline, so GPUs are compared like
    for like. Returns the base settings and a sentence saying which costs priced the plan."""
    from spsim.cost.shipped import shipped_profile

    if base.profile:
        return base, f"costs: the profile {base.profile} for every configuration"
    if base.cost != "auto":
        return base, f"costs: {base.cost} for every configuration"
    first = {}  # one configuration per (GPU, model, tp): what decides the profile
    for c in configs:
        first.setdefault(c.hardware(), c)
    measured = {h: shipped_profile(c.serving(base)) is not None for h, c in sorted(first.items())}
    if all(measured.values()):
        return base, "costs: the calibrated profiles spsim ships for these GPUs and models (--cost roofline for the analytic model)"
    if any(measured.values()):
        have = ", ".join(f"{g}/{m}" for (g, m, t), v in measured.items() if v)
        return base.with_(cost="roofline"), (
            f"costs: the analytic roofline for every configuration: spsim ships measured profiles for {have} only, "
            "and a measured profile (our runtime) against the roofline (an ideal engine) would not compare GPUs "
            "like for like")
    return base, "costs: the analytic roofline (no measured profile shipped for these GPUs and models)"


@dataclass
class PlanOutput:
    results: list[dict]
    rows: list[dict]
    probes: list[dict]
    front: list[dict]
    recs: list[dict]
    meta: dict
    inputs: PlanInputs = field(repr=False)

    def write(self, out: Path) -> None:
        try:
            out.mkdir(parents=True, exist_ok=True)
            pd.DataFrame(self.rows).to_csv(out / "results.csv", index=False)
            pd.DataFrame(self.probes).to_csv(out / "probes.csv", index=False)
            doc = {"meta": self.meta, "recommendation": self.recs, "pareto_front": self.front, "results": self.rows}
            (out / "recommendation.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
            (out / "recommendation.md").write_text(markdown(self.recs, self.rows, self.meta))
        except OSError as e:
            raise SpsimError(f"--out {out}: cannot write ({e.strerror or e})") from None


def run_plan(inp: PlanInputs, out: Path | None = None, console=None, progress_lines=None) -> PlanOutput:
    cache = ProbeCache(out / "cache" if out is not None else None)
    bench = Bench(inp.trace, trace_fingerprint(inp.trace), inp.base, inp.slo, cache)
    n = len(inp.configs)
    labels = [c.label(varying(inp.configs)) for c in inp.configs]
    t0 = time.perf_counter()
    prog = task = None
    if console is not None and console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        prog = Progress(TextColumn("[bold]plan"), BarColumn(), MofNCompleteColumn(), TextColumn("configurations"),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.description}"),
                        console=console, transient=True)
        prog.start()
        task = prog.add_task("", total=n)
    elif progress_lines is None:
        import sys

        def progress_lines(frac, what):  # plain lines on stderr where the output is not a terminal
            print(f"plan: {what} ({frac:.0%}), {time.perf_counter() - t0:.0f} s elapsed", file=sys.stderr, flush=True)
    done = [0]

    def on_done(i, res):
        done[0] += 1
        what = f"{labels[i]}: " + (f"{readable(res['max_rate'], 3)} req/s" if res["max_rate"] else res["status"])
        if prog is not None:
            prog.update(task, advance=1, description=what)
        elif progress_lines is not None:
            progress_lines(done[0] / n, f"{done[0]}/{n} configurations, {what}")

    try:
        results = run_sweep(bench, inp.configs, inp.settings, inp.rmin, inp.rmax, inp.target_rate, inp.native_rate,
                            jobs=inp.jobs, ray=inp.ray, ray_address=inp.ray_address, on_done=on_done)
    finally:
        if prog is not None:
            prog.stop()
    wall = time.perf_counter() - t0
    rows = result_rows(results, inp.prices)
    probes = probe_rows(results, labels)
    front = pareto_front([p for p in probes if p["met"] and p["kind"] == "full"])
    recs = recommend(rows, inp.settings.precision)
    meta = {"trace": inp.trace_name, "requests": len(inp.trace), "slo": inp.slo.text(),
            "replicas_searched": inp.rmin, "replica_range": [inp.rmin, inp.rmax], "target_rate": inp.target_rate,
            "native_rate": inp.native_rate, "precision": inp.settings.precision,
            "early_stop": inp.settings.early_stop,
            "window": window_size(len(inp.trace), inp.settings.window), "prices": inp.prices, "prices_source": inp.prices_source,
            "seed": inp.base.seed, "engine": "ray" if inp.ray else f"pool({inp.jobs})" if inp.jobs > 1 else "serial",
            "probes_simulated": sum(not p["cached"] for p in probes), "probes_cached": sum(p["cached"] for p in probes),
            "probes_stopped": sum(bool(p.get("stopped")) for p in probes), "costs": inp.cost_note,
            "wall_s": wall}
    return PlanOutput(results, rows, probes, front, recs, meta, inp)
