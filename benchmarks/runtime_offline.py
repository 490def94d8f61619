"""Offline decode throughput of every policy on the real runtime (GPU), for the simulator to be
held against.

    python3 benchmarks/runtime_offline.py --out FILE.json [--workloads 16x32768,8x65536,4x120000]
        [--policies ar,sync,...] [--output-tokens 128] [--minutes 5]

Llama-3.1-8B shape, random bf16 weights, preset acceptance `sparsespec-llama8b` (all compute
real; which drafts are accepted comes from the preset's keyed draws, as in a replay, so both
worlds build the same pass plans). Prefill is synthetic (`--synthetic-prefill`: not computed, KV
pages hold random values): the figure is the *decode phase*, the passes without a prefill chunk,
`committed tokens / (their GPU + host time)`, with and without the passes that captured a CUDA
graph (first use of a shape). `benchmarks/runtime_compare.py` adds the simulator's prediction for
the same plans on a machine with simpy. Results are written after every run (a cut-short run
keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from harness import header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install (the GPU machine)

POLICIES = "ar,sync,sync:k=2,sync:k=4,fixed-k:k=2,fixed-k:k=4,fixed-k:k=8,entropy,aspire,oracle"
ACCEPTANCE = "sparsespec-llama8b"


def workload(batch: int, context: int, output: int):
    from spsim.traces.trace import Trace

    return Trace(np.array([f"w{i}" for i in range(batch)], object), np.zeros(batch),
                 np.full(batch, context), np.full(batch, output))


def decode_phase(passes: list[dict]) -> dict:
    dec = [p for p in passes if p["prefill_tokens"] == 0]
    warm = [p for p in dec if not p["captured"]]
    tok = sum(p["committed"] for p in dec)
    t = sum(p["gpu_ms"] + p["host_ms"] for p in dec) / 1e3
    t_warm = sum(p["gpu_ms"] + p["host_ms"] for p in warm) / 1e3
    by_cat = {}
    for p in warm:
        c = by_cat.setdefault(p["category"], [])
        c.append(p["gpu_ms"])
    return {"decode_passes": len(dec), "captures": len(dec) - len(warm), "committed_tokens": tok,
            "decode_s": round(t, 4), "tokens_per_s": round(tok / t, 2) if t else None,
            # capture passes priced at their category's median replay: the steady state
            "tokens_per_s_steady": round(tok / (t_warm + sum(np.median(by_cat.get(p["category"], [p["gpu_ms"]]))
                                                             + p["host_ms"] for p in dec if p["captured"]) / 1e3), 2)
            if dec else None,
            "median_pass_ms": {c: round(float(np.median(v)), 3) for c, v in by_cat.items()},
            "mean_prep_ms": round(float(np.mean([p["prep_ms"] for p in dec])), 3) if dec else None,
            "mean_host_ms": round(float(np.mean([p["host_ms"] for p in dec])), 3) if dec else None}


def main() -> None:
    import torch

    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--workloads", default="16x32768,8x65536,4x120000")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--rehearse", action="store_true", help="each run served once untimed first (every graph "
                    "shape captured): the steady state")
    a = ap.parse_args()
    t_end = time.time() + 60 * a.minutes
    dev = torch.device("cuda")
    lc = get_config(a.model)
    model = Transformer.random(lc, seed=0, device=dev, dtype=torch.bfloat16)
    out = {**header("runtime_offline"),
           "model": a.model, "dtype": "bf16", "acceptance": ACCEPTANCE, "output_tokens": a.output_tokens,
           "method": "spsim run --offline --synthetic-prefill --acceptance " + ACCEPTANCE + ", CUDA graphs on; "
                     "decode phase = passes without a prefill chunk; one run per policy in one process "
                     "(graphs are captured anew per run" + ("; each run rehearsed untimed first)" if a.rehearse
                                                            else ")"), "rehearse": a.rehearse, "runs": []}
    for w in a.workloads.split(","):
        b, c = (int(x) for x in w.split("x"))
        tr = workload(b, c, a.output_tokens)
        for pol in a.policies.split(","):
            if time.time() > t_end:
                out["stopped_early"] = True
                break
            cfg = ServingConfig(policy=pol, offline=True, acceptance=ACCEPTANCE, seed=0)
            t0 = time.time()
            try:
                run = run_trace(tr, cfg, RuntimeOptions(device="cuda", synthetic_prefill=True, record_events=False,
                                                        rehearse=a.rehearse), model=model)
            except Exception as e:  # noqa: BLE001  (recorded, the sweep goes on)
                out["runs"].append({"workload": w, "policy": pol, "error": f"{type(e).__name__}: {e}"[:400]})
                print(out["runs"][-1], flush=True)
                continue
            s = run.result.summary
            rec = {"workload": w, "policy": pol, "wall_s": round(time.time() - t0, 1),
                   "passes": s.get("passes"),
                   "draft_acceptance_rate": s.get("draft_acceptance_rate"),
                   "cuda_graphs": s["runtime"]["cuda_graphs"], "kv_pages": s["runtime"]["kv_pages"],
                   **decode_phase(run.passes)}
            out["runs"].append(rec)
            print(json.dumps(rec), flush=True)
            Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
            torch.cuda.empty_cache()
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
