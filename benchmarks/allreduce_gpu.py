"""Measure the tensor-parallel all-reduce on this machine's GPUs and fit the cost model's two
constants (`allreduce_latency_s`, `nvlink_eff`) from it. Needs >= 2 GPUs (NCCL, CUDA graphs);
on a machine without them it runs gloo on the CPU, which says nothing about NVLink.

    python3 benchmarks/allreduce_gpu.py --out benchmarks/results/allreduce_h200x2.json [--gpu h200]

Writes the points, the fit and the machine/versions/date as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from harness import header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install


def main() -> None:
    from spsim.calibration.allreduce import fit, measure
    from spsim.hardware import get_gpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu", default="h200", help="catalog GPU whose NVLink bandwidth the efficiency is relative to")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=4096, help="hidden size (4096: Llama-3.1-8B)")
    a = ap.parse_args()
    m = measure(world=a.world, hidden=a.hidden)
    g = get_gpu(a.gpu)
    f = fit(m["points"], a.world, g.nvlink_bw)
    out = {**header("allreduce"),
           "assumed_before": {"allreduce_latency_s": g.allreduce_latency_s, "nvlink_eff": g.nvlink_eff},
           "measurement": m, "fit": f}
    print(json.dumps({k: v for k, v in f.items() if k != "per_point"}, indent=1))
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
