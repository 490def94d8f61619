"""The simulator's prediction next to each run of `benchmarks/runtime_offline.py` (no GPU needed).

    python3 benchmarks/runtime_compare.py benchmarks/results/runtime_offline_h200.json \
        [--profile FILE] --out benchmarks/results/runtime_h200.json

For every (workload, policy) measured on the GPU: `simulate` of the same trace and settings
(offline, preset acceptance, seed, the runtime's KV pages), which builds the same pass plans
(checked: passes per category must match). Decode phase on both sides: the passes without a
prefill chunk, the same committed tokens, the measured GPU + host time against the predicted
pass time. Writes/updates the `offline` list of the output JSON (other keys kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from spsim.cost import load_cost_model, make_cost_model
    from spsim.simulator.engine import SimConfig, simulate

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from runtime_offline import ACCEPTANCE, workload

    ap = argparse.ArgumentParser()
    ap.add_argument("measured")
    ap.add_argument("--profile", default=None, help="cost profile (default: the analytic roofline)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--key", default="offline", help="the output JSON's key to write")
    a = ap.parse_args()
    m = json.loads(Path(a.measured).read_text())
    cost = load_cost_model(a.profile) if a.profile else make_cost_model(m["model"], "h200")
    rows = []
    for r in m["runs"]:
        if "error" in r:
            continue
        b, c = (int(x) for x in r["workload"].split("x"))
        cfg = SimConfig(policy=r["policy"], offline=True, acceptance=ACCEPTANCE, seed=0, kv_pages=r["kv_pages"])
        s = simulate(workload(b, c, m["output_tokens"]), cfg, cost=cost).summary
        same = s["passes"] == r["passes"]
        pred_s = sum(v for k, v in s["pass_time_s"].items() if k != "prefill")
        tok = r["committed_tokens"]
        rows.append({"workload": f"{b} x {c} tokens, {m['output_tokens']} output tokens each", "policy": r["policy"],
                     "measured_tokens_per_s": r["tokens_per_s_steady"],
                     "measured_tokens_per_s_with_captures": r["tokens_per_s"],
                     "simulated_tokens_per_s": round(tok / pred_s, 2) if pred_s else None,
                     "measured_over_simulated_time": round(tok / r["tokens_per_s_steady"] / pred_s, 3),
                     "same_plans": same, "decode_passes": r["decode_passes"], "graph_captures": r["captures"],
                     "measured_median_pass_ms": r["median_pass_ms"]})
        print(json.dumps(rows[-1]), flush=True)
    by_w: dict[str, dict] = {}
    for row in rows:  # speedup over ar, per world
        w = by_w.setdefault(row["workload"], {})
        w[row["policy"]] = row
    for w in by_w.values():
        ar = w.get("ar")
        for row in w.values():
            if ar:
                row["measured_speedup"] = round(row["measured_tokens_per_s"] / ar["measured_tokens_per_s"], 3)
                row["simulated_speedup"] = round(row["simulated_tokens_per_s"] / ar["simulated_tokens_per_s"], 3)
    out_p = Path(a.out)
    out = json.loads(out_p.read_text()) if out_p.exists() else {}
    old = out.get(a.key)
    if a.key == "offline" and old and not (isinstance(old, dict) and old.get("decode_phase")):
        out.setdefault("history", {})["offline_before_device_selection"] = {
            "note": "end-to-end offline runs before page selection moved to the device (full prefill computed)",
            "runs": old}
    out[a.key] = {
        "decode_phase": True, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "measured": f"{m['machine']['gpu']}, {m['date']}, torch {m['machine']['torch']}, triton {m['machine']['triton']}: "
                    f"{m['method']}. measured_tokens_per_s: graph-capture passes priced at their category's median "
                    "replay (steady state); _with_captures: as run",
        "simulated": "spsim simulate, same trace and settings, cost model " + (a.profile or "roofline (analytic)"),
        "source": a.measured,
        "runs": rows}
    out_p.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
