"""Scale target of `spsim plan` (issue 16): 5 policies (ar, sync, fixed-k, entropy, aspire) x 2
GPUs (h100-sxm, h200) over the Azure 2023 conversation trace: the highest rate per replica under
the SLO and the fewest replicas (up to 8) for a target rate, in under 15 minutes on a 2-core
machine. Runs the plan from an empty cache (so every probe is simulated), optionally again on a
local Ray cluster to check the numbers are identical, and writes machine, versions, date, wall
time and the results to JSON.

    python3 benchmarks/plan_scale.py --out benchmarks/results/plan_scale.json            # pool, all CPUs
    python3 benchmarks/plan_scale.py --limit 4000 --ray --out /tmp/plan_scale.json       # + Ray, same numbers?

Issue 38's form (`spsim plan azure-conv ... --gpus h200,h100-sxm --replicas 1..8` with no --target-rate:
the fewest replicas for the trace's own rate):

    python3 benchmarks/plan_scale.py --gpus h200,h100-sxm --target-rate trace --out benchmarks/results/plan_scale_issue38.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path


def run(args, ray: bool, out_dir: Path) -> tuple[dict, float]:
    from spsim.planning.run import PlanInputs, run_plan
    from spsim.simulator.engine import SimConfig

    base = SimConfig()  # the serving defaults, as `spsim plan`'s
    inp = PlanInputs.from_options(
        trace=args.trace, trace_format=None, limit=args.limit, skip_invalid=False, slo=args.slo,
        policies=args.policies, gpus=args.gpus, models=base.model, replicas=args.replicas, max_batch=str(base.max_batch),
        draft_budget=str(base.draft_budget), draft_kv=base.draft_kv, tp=str(base.tp),
        target_rate=None if args.target_rate == "trace" else float(args.target_rate),
        precision=args.precision, early_stop=True, prices=None, base=base, jobs=args.jobs, ray=ray, ray_address=None)
    t0 = time.perf_counter()
    plan = run_plan(inp, out=out_dir, progress_lines=lambda f, w: print(f"  {w}", file=sys.stderr, flush=True))
    wall = time.perf_counter() - t0
    plan.write(out_dir)
    return plan, wall


def profile(plan) -> dict:
    """Where the plan's time went: probes by configuration, phase (window or whole trace) and
    replicas (one, or several for the replica search), with their simulation wall time."""
    by = defaultdict(lambda: {"probes": 0, "stopped": 0, "wall_s": 0.0, "cpu_s": 0.0})
    for p in plan.probes:
        for key in (f"{p['config']} | {p['kind']} | {'1 replica' if p['replicas'] == 1 else 'replica search'}",
                    f"ALL | {p['kind']} | {'1 replica' if p['replicas'] == 1 else 'replica search'}"):
            b = by[key]
            b["probes"] += 1
            b["stopped"] += bool(p.get("stopped"))
            b["wall_s"] += p.get("wall_s") or 0.0
            b["cpu_s"] += p.get("cpu_s") or 0.0
    return {k: {**v, "wall_s": round(v["wall_s"], 1), "cpu_s": round(v["cpu_s"], 1)} for k, v in sorted(by.items())}


def cpu_makespan(plan, workers: int) -> dict:
    """The plan's tasks' CPU times scheduled as the sweep submits them (anchors, then replica tasks,
    then rate tasks, each to the first free worker): an estimate of the wall time on `workers`
    cores with nothing else running (this VM is shared; the wall time measured includes waiting
    for other agents' work)."""
    import heapq

    anchors = [r["task_cpu_s"] for r in plan.results if not isinstance(r["task_cpu_s"], list)]
    rest = [r["task_cpu_s"] for r in plan.results if isinstance(r["task_cpu_s"], list)]
    waves = [anchors, [c[1] for c in rest] + [c[0] for c in rest]]
    t = 0.0
    for wave in waves:
        free = [t] * workers
        for c in wave:
            heapq.heappush(free, heapq.heappop(free) + c)
        t = max(free)
    return {"cpu_s_total": round(sum(anchors) + sum(sum(c) for c in rest), 1),
            "est_wall_s_on_free_cores": round(t, 1), "workers": workers,
            "task_cpu_s": {row["config"]: res["task_cpu_s"] for row, res in zip(plan.rows, plan.results)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="azure-conv")
    ap.add_argument("--limit", type=int, default=None, help="first N requests (default: the whole trace)")
    ap.add_argument("--slo", default="ttft_p90=2s,tpot_p99=60ms")
    ap.add_argument("--policies", default="ar,sync,fixed-k,entropy,aspire")
    ap.add_argument("--gpus", default="h100-sxm,h200")
    ap.add_argument("--replicas", default="1..8")
    ap.add_argument("--target-rate", default="60", help="req/s, or 'trace': the trace's own rate (spsim plan's default)")
    ap.add_argument("--precision", type=float, default=0.05)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--ray", action="store_true", help="run the same plan on a local Ray cluster and compare")
    ap.add_argument("--note", default="", help="free text stored with the results (e.g. machine shared)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    load0 = os.getloadavg()
    from harness import header

    doc = {**header("plan_scale", libs=("pandas", "plotly", "ray")), "note": args.note,
           "settings": {k: v for k, v in vars(args).items() if k not in ("out", "note")},
           "search": ("highest rate at 1 replica: a window phase on the trace's first max(1000, n/8) requests "
                      "(bracketing from the trace's native rate x2; neighbours from the first policy's window answer "
                      "on the same GPU, x1.25 three times then x2; geometric bisection to hi/lo <= 1 + precision), "
                      "then the whole trace from the window bracket's middle times the anchor's whole/window ratio, "
                      "galloping by (1+p), (1+p)^2, (1+p)^4, ... and bisecting to hi/lo <= 1 + precision: the answer "
                      "and the bracket's top are whole-trace probes; every probe stops as soon as its SLO can no "
                      "longer be met (exact); fewest replicas: the same on the window from ceil(target / rate per "
                      "replica), then on the whole trace from the window's answer, within 1..8; every probe "
                      "simulated from an empty cache; sampler/monitor load recorded every 10 s")}
    doc["machine"].update(cpus_usable=len(os.sched_getaffinity(0)), loadavg_before=load0)
    stop = threading.Event()
    loads: list = []

    def sample():  # the VM is shared: what else ran during the plan
        while not stop.wait(10):
            loads.append([round(time.time() - t_start, 1), *os.getloadavg()])

    t_start = time.time()
    threading.Thread(target=sample, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        plan, wall = run(args, False, Path(tmp) / "pool")
        doc["wall_s"] = wall
        doc["under_15_min"] = wall < 900
        doc["machine"]["loadavg_after"] = os.getloadavg()
        stop.set()
        doc["machine"]["loadavg_samples"] = {"every_s": 10, "columns": ["t_s", "1min", "5min", "15min"],
                                             "rows": list(loads)}
        doc["profile"] = profile(plan)
        doc["cpu"] = cpu_makespan(plan, plan.inputs.jobs)
        doc["under_15_min_on_free_cores_est"] = doc["cpu"]["est_wall_s_on_free_cores"] < 900
        doc["meta"] = plan.meta
        keep = ("config", "status", "max_rate", "bracket_hi", "rate_per_gpu", "output_tok_s_per_gpu", "requests_per_usd",
                "fewest_replicas", "median_tpot_ms", "limiter", "why", "probes", "probes_simulated", "probes_full",
                "probes_stopped", "window_max_rate")
        doc["results"] = [{k: r.get(k) for k in keep} for r in plan.rows]
        doc["recommendation"] = plan.recs
        if args.ray:
            rplan, rwall = run(args, True, Path(tmp) / "ray")
            doc["ray"] = {"wall_s": rwall, "identical": [
                {k: r.get(k) for k in keep if k != "probes_simulated"} for r in rplan.rows] ==
                [{k: r.get(k) for k in keep if k != "probes_simulated"} for r in plan.rows]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"{wall:.0f} s for {len(plan.rows)} configurations ({plan.meta['probes_simulated']} probes); wrote {args.out}")


if __name__ == "__main__":
    main()
