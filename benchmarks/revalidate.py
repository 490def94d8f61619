"""Re-predict committed `spsim validate` results with another cost profile, on the CPU.

A validation run's measured side (the GPU run) is in its validate JSON; its predicted side is a
simulation, cheap and deterministic given the trace window, policy, load, seed, acceptance and KV
pages, which the JSON records. So a change to the cost model or the fit can be checked against
every real run we have, in seconds, without a GPU:

    python3 benchmarks/revalidate.py benchmarks/results/validate/validate_*_*.json \
        --profile calibration/profiles/h200-llama-3.1-8b.json

(the older H200 runs are packed: `tar xzf benchmarks/results/validate_h200_older.tar.gz -C DIR`, then
`DIR/validate_*.json`)

prints, per run, the errors the JSON holds (as measured then) and the errors the given profile
gives now, on the issue's headline metrics. Runs whose policy decides with the cost model (aspire,
sync auto, entropy) are flagged: the measured run planned its passes with the profile of its day,
so under another profile the simulator may plan other passes (with arrivals, the plans never match
anyway). Runs of another model than the profile's are skipped and counted. `--json FILE` writes
the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # a checkout without an install

HEADLINE = ("output_throughput", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "p99_e2el_ms", "mean_ttft_ms")
COST_AWARE = ("aspire", "entropy")  # and sync with its k chosen per cycle (k=-1, the default)


def _cost_aware(spec: str) -> bool:
    """Whether the policy prices its choices with the cost model (its plans then depend on the profile)."""
    from spsim.policies.registry import parse_policy

    ps = parse_policy(spec)
    return ps.name in COST_AWARE or (ps.name == "sync" and ps.cls(**dict(ps.params)).k < 0)


def _trace_of(r: dict):
    from spsim.traces import read_trace
    from spsim.validate import select

    w = r.get("window") or {}
    tr = select(read_trace(r["trace"]), w.get("limit"), w.get("window_s"))
    if w.get("speed") and len(tr) > 1:  # validate_gpu.py's `speed=X`: the window's arrivals X times as fast
        from spsim.traces.transforms import rescale_qps

        tr = rescale_qps(tr, w["speed"] * len(tr) / float(tr.arrival_s[-1]))
    return tr


def as_run(r: dict, profile: str):
    """(trace window, config, cost model) that predict the run `r` (a validate JSON) as it ran,
    under `profile`: its window, policy, load, seed, acceptance and KV pages, its passes priced
    padded as it padded them."""
    from spsim.config import ServingConfig
    from spsim.cost.profile import load_cost_model
    from spsim.validate import longest_query, priced_as_run

    tr = _trace_of(r)
    if len(tr) != r["requests"] or str(tr.ids[0]) != r["first_id"] or str(tr.ids[-1]) != r["last_id"]:
        raise ValueError(f"the trace window is not the run's ({len(tr)} requests, {tr.ids[0]}..{tr.ids[-1]})")
    cfg = ServingConfig(policy=r["policy"], acceptance=r["acceptance"], model=r["model"], profile=profile,
                        offline=r["load"] == "offline", seed=r["seed"], kv_pages=r["kv_pages"]).validate()
    pad = (r.get("runtime") or {}).get("padding") or {}
    cost = priced_as_run(load_cost_model(profile), bool(pad.get("coarse")), shape_rule=bool(pad.get("shape_rule")),
                         max_query=longest_query(cfg))
    return tr, cfg, cost


def repredict(r: dict, profile: str) -> dict:
    """The simulator's metrics for the run `r` (a validate JSON) under `profile`."""
    from spsim.validate import simulate_like
    from spsim.validate_report import metrics

    tr, cfg, cost = as_run(r, profile)
    sim, _ = simulate_like(tr, cfg, cost)
    measured = {k: v["measured"] for k, v in r["metrics"].items()}
    return metrics(measured, sim.summary)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="validate_*.json files (validate.json content)")
    ap.add_argument("--profile", required=True, help="cost profile to predict with")
    ap.add_argument("--json", help="write the table here")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*profile measured with.*")
    from spsim.cost.profile import read_profile
    from spsim.errors import SpsimError

    try:
        prof_model = read_profile(a.profile).get("metadata", {}).get("model")
    except SpsimError as e:
        print(f"--profile: {e}", file=sys.stderr)
        return 2
    prof_model = prof_model.get("name") if isinstance(prof_model, dict) else prof_model
    rows, skipped = [], {}
    for f in a.files:
        try:
            r = json.loads(Path(f).read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"{f}: cannot read ({e})", file=sys.stderr)
            return 2
        if "spsim_validate" not in r:
            skipped["not a validate result"] = skipped.get("not a validate result", 0) + 1
            continue
        if prof_model and r.get("model") != prof_model:
            skipped[f"model is not {prof_model}"] = skipped.get(f"model is not {prof_model}", 0) + 1
            continue
        try:
            now = repredict(r, a.profile)
        except (SpsimError, ValueError, KeyError) as e:
            print(f"{f}: cannot re-predict ({type(e).__name__}: {e})", file=sys.stderr)
            return 2
        row = {"file": Path(f).name, "policy": r["policy"].split(":")[0], "load": r["load"],
               "cost_aware": _cost_aware(r["policy"]),
               "then": {k: r["metrics"][k]["rel_error"] for k in HEADLINE},
               "now": {k: now[k]["rel_error"] for k in HEADLINE}}
        rows.append(row)
        fmt = lambda d: "  ".join(f"{100 * d[k]:+6.1f}" if d[k] is not None else "   n/a" for k in HEADLINE)  # noqa: E731
        print(f"{row['file'][:58]:<58}{'*' if row['cost_aware'] else ' '} then {fmt(row['then'])}")
        print(f"{'':<59} now  {fmt(row['now'])}")
    print("columns: " + ", ".join(HEADLINE) + " (error %, predicted vs measured); * the policy prices with the "
          "cost model: the measured run planned with the profile of its day")
    for why, n in skipped.items():
        print(f"skipped {n} file(s): {why}")
    if a.json:
        Path(a.json).write_text(json.dumps({"profile": a.profile, "runs": rows, "skipped": skipped}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
