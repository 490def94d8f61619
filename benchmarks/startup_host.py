"""Host time of the start-up capture's preparation, on the CPU: per policy, the seconds
`startup.capture` spends building made-up passes ("prepare": `RuntimeExecutor.synthetic`, and the
pre-key that skips most of them, `startup.PreKey`) and keying them ("key":
`GraphedPasses.shape_key`), with the graphs, the passes of the set and the passes built.

    python3 benchmarks/startup_host.py                      # 5 policies, max batch 256 (~2 min)
    python3 benchmarks/startup_host.py --every              # also building every pass (the key sets compared)

Counted as `graph_shapes.py --startup` counts the set: the runtime's executor, padding and shape
rule over a stand-in model (Llama-3.1-8B shape, one layer, the H200's 8B pool), attention plans
under the Triton interpreter's host side; nothing is captured. On a GPU the same phases also pay
the device uploads of each built pass.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # plans need Triton's host side only; set before triton loads
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install

from harness import RESULTS, header, write  # noqa: E402
from graph_shapes import count_shapes  # noqa: E402


def measure(policy: str, max_batch: int, kv_pages: int, every: bool) -> dict:
    from spsim.gpu_runtime import startup

    startup.DEDUPE = False if every else True
    t = time.perf_counter()
    r = count_shapes("1x512", policy, 4, kv_pages, startup=True, max_batch=max_batch)
    wall = time.perf_counter() - t
    st = r["startup"]
    ph = st["phases"]
    return {"policy": policy, "max_batch": max_batch, "every_pass_built": every,
            "prepare_s": ph["prepare"], "key_s": ph["key"], "host_s": round(ph["prepare"] + ph["key"], 3),
            "capture_s": st["seconds"], "graphs": st["graphs"], "passes": st["passes"], "built": st["built"],
            "wall_s": round(wall, 1), "_keys": set(map(str, r["_startup_keys"]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="ar,fixed-k:k=4,sync:k=4,aspire,entropy")
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--kv-pages", type=int, default=57248, help="the H200's 8B pool")
    ap.add_argument("--every", action="store_true", help="also build every pass (no pre-key): before/after, "
                    "and whether the graph keys are the same")
    ap.add_argument("--out", default=str(RESULTS / "startup_host_cpu.json"))
    a = ap.parse_args()
    rows = []
    for pol in a.policies.split(","):
        runs = [measure(pol, a.max_batch, a.kv_pages, False)]
        if a.every:
            runs.append(measure(pol, a.max_batch, a.kv_pages, True))
            runs[0]["same_keys_as_every_pass"] = runs[0]["_keys"] == runs[1]["_keys"]
        for r in runs:
            r.pop("_keys")
            print(r, flush=True)
        rows += runs
    write(a.out, {**header("startup_host", timing="seconds of one run each on a shared CPU: noisy"), "rows": rows})


if __name__ == "__main__":
    main()
