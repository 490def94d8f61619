"""A100 all-reduce constants from published 8 x A100 (NVLink 3, NVSwitch) NCCL figures (issue 13).

The roofline charges each all-reduce `latency(tp) + bytes * 2 (tp - 1) / tp / (nvlink_bw * nvlink_eff)`
with `latency(tp) = latency(2) + 2 (tp - 2) * step` (spsim/hardware.py, `GPU.allreduce_latency`).
Until 2026-12-02 the A100 kept an assumed 8 us at 2 GPUs, the H100's fitted step and an assumed 80 %
of NVLink. This script replaces the three with published A100 figures:

- latency(2): NCCL all_reduce_perf on 2 A100-SXM4-40GB of one 8-GPU A100 server (github.com/NVIDIA/
  nccl issue 583, first table: 32 B and 64 B, out-of-place and in-place, 10.14-10.31 us; nccl-tests
  without CUDA graphs, so an upper bound of the in-graph latency by a launch);
- latency(8): NCCL AllReduce, 1 KiB, one Azure NDm A100 v4 node (8 A100-80GB SXM on NVSwitch),
  NCCL 2.17.1, nccl-tests in CUDA graphs (`-G 1`), in-place: 16.96 us (github.com/microsoft/mscclpp
  docs/performance-ndmv4.md, "1 node, 8 gpus/node");
- nvlink_eff: NCCL AllReduce bus bandwidth at 1 GiB on the same node, 231.45 GB/s, over the A100's
  300 GB/s per direction (the same page).

`step = (latency(8) - latency(2)) / 12` (12 = 2 (8 - 1) - 2 (2 - 1) more ring steps), each latency
after subtracting the bandwidth term at its message size (below 0.01 us here). The 40 GB and 80 GB
A100 SXM share NVLink 3 (12 links, 300 GB/s per direction) and the NVSwitch baseboard.

    python3 benchmarks/allreduce_a100_fit.py   # writes benchmarks/results/allreduce_a100_fit.json (no GPU)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KIB = 1024
NVLINK3_BW = 300e9  # bytes/s per direction per GPU (A100 SXM datasheet: 600 GB/s total)

TWO_GPU = {"source": "github.com/NVIDIA/nccl/issues/583 (elevenxiang, 2021-10-18): nccl-tests all_reduce_perf -g 2, "
                     "2 x A100-SXM4-40GB of an 8-GPU A100 server, float sum; out-of-place and in-place times",
           "graph": False,
           "points": [(32, 10.14), (64, 10.14), (32, 10.21), (64, 10.31)]}
EIGHT_GPU = {"source": "github.com/microsoft/mscclpp docs/performance-ndmv4.md: '1 node, 8 gpus/node', NCCL "
                       "AllReduce latency at 1K, NCCL 2.17.1+cuda11.8, in-place, nccl-tests -G 1 (CUDA graph), "
                       "Azure NDm A100 v4 (8 x A100-80GB SXM, NVSwitch)",
             "graph": True,
             "points": [(1 * KIB, 16.96)]}
BUSBW = {"source": "github.com/microsoft/mscclpp docs/performance-ndmv4.md: NCCL AllReduce BusBW at 1G, "
                   "1 node, 8 gpus/node", "bytes": 1 << 30, "busbw_GBps": 231.45}
NCCL_TUNER = {"source": "github.com/NVIDIA/nccl src/graph/tuning.cc: Ring LL base 6.6 us, NVLink per-step 0.6 us",
              "base_us": 6.6, "step_us": 0.6}


def ring_bytes_s(nbytes: float, tp: int, bw: float) -> float:
    return nbytes * 2 * (tp - 1) / tp / bw


def fit() -> dict:
    eff = BUSBW["busbw_GBps"] * 1e9 / NVLINK3_BW
    bw = NVLINK3_BW * eff
    lat2 = float(np.mean([t * 1e-6 - ring_bytes_s(b, 2, bw) for b, t in TWO_GPU["points"]]))
    lat8 = float(np.mean([t * 1e-6 - ring_bytes_s(b, 8, bw) for b, t in EIGHT_GPU["points"]]))
    step = (lat8 - lat2) / (2 * (8 - 1) - 2 * (2 - 1))
    return {"nvlink_eff": eff, "latency_2_s": lat2, "latency_8_s": lat8, "step_s": step}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "allreduce_a100_fit.json"))
    a = ap.parse_args()
    f = fit()
    lat = {str(tp): round((f["latency_2_s"] + 2 * (tp - 2) * f["step_s"]) * 1e6, 2) for tp in (2, 4, 8)}
    out = {
        "about": "A100 tensor-parallel all-reduce constants (spsim/hardware.py, GPU a100-80gb): latency(tp) = "
                 "latency(2) + 2 (tp - 2) * step, bus bandwidth nvlink_bw * nvlink_eff; issue 13",
        "latency_2gpu": {"us": round(f["latency_2_s"] * 1e6, 3), **TWO_GPU},
        "latency_8gpu": {"us": round(f["latency_8_s"] * 1e6, 3), **EIGHT_GPU},
        "step_us": round(f["step_s"] * 1e6, 4),
        "nvlink_eff": round(f["nvlink_eff"], 4),
        "bus_bandwidth": BUSBW,
        "latency_us_by_tp": lat,
        "nccl_tuner_model": {**NCCL_TUNER, "latency_us_by_tp": {str(tp): round(6.6 + 0.6 * 2 * (tp - 1), 2)
                                                                 for tp in (2, 4, 8)}},
        "before": {"latency_2gpu_us": 8.0, "step_us": 0.9527, "nvlink_eff": 0.8, "latency_us_by_tp": {
            "2": 8.0, "4": 11.81, "8": 19.43}, "what": "assumed 2-GPU latency and link fraction, the H100-fitted step"},
        "caveats": [
            "the 2-GPU figure is from nccl-tests without CUDA graphs (2021, NCCL of that time): it includes a kernel "
            "launch the in-graph figure does not, so the fitted step is if anything low",
            "two sources, one point each at 2 and 8 GPUs (the 8-GPU table publishes 1 KiB only); no published "
            "A100 TP 4 figure was found to check the third degree",
            "MagicDec itself ran with ENABLE_INTRA_NODE_COMM=1 (PyTorch's one-/two-shot all-reduce, README at "
            "github.com/Infini-AI-Lab/MagicDec commit 083a241), not NCCL's ring; no A100 figure for it was found",
        ],
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"A100: latency(2) {f['latency_2_s'] * 1e6:.2f} us, latency(8) {f['latency_8_s'] * 1e6:.2f} us, "
          f"step {f['step_s'] * 1e6:.4f} us, nvlink_eff {f['nvlink_eff']:.4f}; by tp {lat}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
