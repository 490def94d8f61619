"""What the overlapped loop hides: passes timed serially (host preparation, forward, read-back, each
pass waiting for the last) and back to back (each prepared while the previous one runs), on the GPU.

Each pass is timed as calibration times a point (`calibration.measure.Bench`, graphs, padding,
repeats from the same state), once with `overlap=False` and once with `overlap=True`, interleaved
pass by pass; per pass the median interval, the device time of the forward (CUDA events) and the
host's input preparation. Random weights of the model's real shape, bf16.

    python3 benchmarks/overlap.py --model llama-3.1-8b --out benchmarks/results/overlap_h200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from harness import header

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (name, group, method, prefill, drafts ((context, pos)..), verifies ((context, query)..))
PASSES = [
    ("decode 1 x 32K", "ar", 1, (), (), ((32768, 1),)),
    ("decode 16 x 32K", "ar", 1, (), (), ((32768, 1),) * 16),
    ("decode 64 x 4K", "ar", 1, (), (), ((4096, 1),) * 64),
    ("draft 16 x 32K verify-quest, first", "draft", 1, (), ((32768, 0),) * 16, ()),
    ("draft 16 x 32K verify-quest, later", "draft", 1, (), ((32768, 3),) * 16, ()),
    ("verify 16 x 32K q=5", "verify", 1, (), (), ((32768, 5),) * 16),
    ("mixed 16 draft + 16 verify q=9, 16K, verify-quest", "mixed", 1, (), ((16384, 2),) * 16, ((16384, 9),) * 16),
    ("draft 32 x 8K step-layer", "draft", 2, (), ((8192, 1),) * 32, ()),
    ("prefill 512 at 8K + 16 decodes at 16K", "mixed", 1, ((8192, 512),), (), ((16384, 1),) * 16),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30, help="repeats per pass and mode")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run (with --model tiny --scale 64)")
    ap.add_argument("--scale", type=int, default=1, help="divide every context and prefill by this")
    a = ap.parse_args()

    import numpy as np
    import torch

    from spsim.calibration.design import Point
    from spsim.calibration.measure import Bench, _pages_needed_all, machine_info
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.padding import SCRATCH_PAGES

    dev = torch.device(a.device)
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    cfg = get_config(a.model)
    model = Transformer.random(cfg, seed=0, device=dev, dtype=dt)
    k = a.scale
    points = [(name, Point(g, m, 2048 // k, tuple((c // k, n // k) for c, n in pre), tuple((c // k, j) for c, j in dr),
                           tuple((c // k, q) for c, q in ver))) for name, g, m, pre, dr, ver in PASSES]
    pages = max(_pages_needed_all(p, 16) for _, p in points)
    cache = PagedKVCache(cfg, pages + SCRATCH_PAGES, 16, device=dev, dtype=dt)
    cache.k.normal_()
    cache.v.normal_()
    kw = dict(min_reps=a.reps, max_reps=a.reps, target_s=0.0)
    benches = {o: Bench(model, cache, graphs=True, pad=True, overlap=o, **kw) for o in (False, True)}
    rows = []
    for name, p in points:
        r = {"pass": name, "point": p.to_dict()}
        for o, b in benches.items():
            b.run(p)  # warm: captures, autotuning
            m = b.run(p)
            key = "overlapped" if o else "serial"
            r[key] = {"median_ms": round(m["seconds"] * 1e3, 4),
                      "p90_ms": round(float(np.percentile(m["samples"], 90)) * 1e3, 4),
                      "gpu_ms": round(statistics.median(m.get("gpu_s") or [float("nan")]) * 1e3, 4),
                      "prep_ms": round(statistics.median(m["prep_s"]) * 1e3, 4), "reps": len(m["samples"])}
        r["overlapped_over_serial"] = round(r["overlapped"]["median_ms"] / r["serial"]["median_ms"], 4)
        r["serial_over_gpu"] = round(r["serial"]["median_ms"] / r["serial"]["gpu_ms"], 4)
        r["overlapped_over_gpu"] = round(r["overlapped"]["median_ms"] / r["overlapped"]["gpu_ms"], 4)
        rows.append(r)
        print(f"{name:52s} serial {r['serial']['median_ms']:8.3f} ms  overlapped {r['overlapped']['median_ms']:8.3f} ms"
              f"  gpu {r['serial']['gpu_ms']:8.3f} ms  ratio {r['overlapped_over_serial']:.3f}", flush=True)
    info = machine_info(model, cache, dev, cache.num_pages, None)
    out = {**header("overlap"), "model": a.model, "reps": a.reps,
           "runtime": {k: info[k] for k in ("device_name", "versions", "cuda", "kernel_version") if k in info},
           "passes": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
