"""Host cost of a pass's uploads on a GPU machine: what each way of copying small host arrays to the
device costs the host, while the GPU is busy (as in the overlapped loop, where the host prepares a
pass while the previous one runs).

A pass uploads about 25 small arrays (page lists, positions, selection inputs, token ids). Four ways:

- `as_tensor`: `torch.as_tensor(array, device="cuda")`: a pageable copy, then a stream sync;
- `pinned`: `torch.from_numpy(array).pin_memory().to("cuda", non_blocking=True)` (the runtime's
  `pages.to_device`);
- `ring`: the bytes copied into a preallocated pinned ring, one non-blocking copy per array into a
  fresh device tensor (no pinned allocation per array);
- `packed`: all arrays of a pass packed into one pinned buffer, one copy, device views per array.

Each way uploads `--arrays` arrays of `--elements` int64 each, `--passes` times, behind a GPU kept
busy by a queued matmul loop; the host time per pass and whether the host waited for the GPU
(`waited`: the host's time per pass exceeds the GPU's) are reported. Writes JSON (machine, versions,
date).

    python3 benchmarks/upload_cost.py --out benchmarks/results/upload_cost_h200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from harness import header


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--arrays", type=int, default=25)
    ap.add_argument("--elements", default="16,256,4096", help="int64 elements per array (comma list)")
    ap.add_argument("--passes", type=int, default=200)
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("upload_cost.py: needs a CUDA GPU (the copies' host cost is what it measures)", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    rng = np.random.default_rng(0)
    busy_a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

    def keep_busy(ms: float) -> None:  # queue about `ms` of GPU work
        for _ in range(max(1, int(ms / 0.12))):
            busy_a @ busy_a

    ring = torch.empty(1 << 22, dtype=torch.int64, pin_memory=True)
    ring_np = ring.numpy()
    state = {"at": 0}

    def as_tensor(arrs):
        return [torch.as_tensor(x, device=dev) for x in arrs]

    def pinned(arrs):
        return [torch.from_numpy(x).pin_memory().to(dev, non_blocking=True) for x in arrs]

    def ringed(arrs):
        out = []
        for x in arrs:
            n = len(x)
            if state["at"] + n > len(ring_np):
                torch.cuda.current_stream().synchronize()  # a real ring would wait on an event
                state["at"] = 0
            i = state["at"]
            ring_np[i:i + n] = x
            t = torch.empty(n, dtype=torch.int64, device=dev)
            t.copy_(ring[i:i + n], non_blocking=True)
            state["at"] = i + n
            out.append(t)
        return out

    def packed(arrs):
        sizes = [len(x) for x in arrs]
        buf = torch.empty(sum(sizes), dtype=torch.int64, pin_memory=True)
        np.concatenate(arrs, out=buf.numpy())
        d = buf.to(dev, non_blocking=True)
        return list(torch.split(d, sizes))

    ways = {"as_tensor": as_tensor, "pinned": pinned, "ring": ringed, "packed": packed}
    rows = []
    for el in [int(x) for x in a.elements.split(",")]:
        arrs = [rng.integers(0, 1 << 20, el).astype(np.int64) for _ in range(a.arrays)]
        for name, fn in ways.items():
            for _ in range(5):  # warm: allocator caches
                fn(arrs)
            torch.cuda.synchronize()
            host = []
            for _ in range(a.passes):
                keep_busy(2.0)  # the previous pass, running
                t0 = time.perf_counter()
                out = fn(arrs)
                host.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            assert all(np.array_equal(o.cpu().numpy(), x) for o, x in zip(out, arrs)), name
            med = statistics.median(host) * 1e6
            rows.append({"way": name, "elements": el, "arrays": a.arrays, "host_us_per_pass": round(med, 1),
                         "host_us_per_array": round(med / a.arrays, 2), "waited": med > 1500})
            print(f"{name:10s} {el:6d} x {a.arrays}: {med:9.1f} us a pass ({med / a.arrays:7.2f} us an array)",
                  flush=True)
    out = {**header("upload_cost"),
           "gpu_busy_ms_per_pass": 2.0, "passes": a.passes, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
