"""How long the shape rule's start-up capture takes (gpu_runtime/startup.py),
and where the time goes, per policy, at the serving settings' defaults.

    python3 benchmarks/startup_capture.py --out benchmarks/results [--policies ar,aspire] [--max-batch 256]

Llama-3.1-8B shape, random bf16 weights (the GPU machine gets no real weights), the KV pool the
runtime sizes itself. Per policy: one `spsim run` of a single short request with `--shape-rule
--startup-shapes`, whose JSON reports the start-up set's graphs, made-up passes, seconds, graph
memory and phases (preparing the made-up passes, keying them, warm-up forwards, capturing), and
the warm-up mode (`--warm first|always`). Writes `startup_capture_<gpu>.json` in --out.
From a checkout without an install (simpy from vendor/wheels/).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from harness import gpu_slug

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # a checkout without an install


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="results folder")
    ap.add_argument("--policies", default="ar,fixed-k:k=4,aspire")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--max-batch", type=int, default=None, help="most requests running (default: spsim's)")
    ap.add_argument("--warm", default="first", choices=["first", "always"])
    ap.add_argument("--tag", default="", help="added to the result file's name")
    a = ap.parse_args()

    import numpy as np
    import torch

    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import RuntimeOptions, release_served, run_trace
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.traces.trace import Trace
    from spsim.validate import ensure_simpy

    ensure_simpy()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    model = Transformer.random(get_config(a.model), seed=0, device=dev, dtype=torch.bfloat16)
    load_s = time.perf_counter() - t0
    tr = Trace(np.array(["r0"], object), np.zeros(1), np.array([512]), np.array([16]))
    rows = []
    t_run = [0.0]

    def progress(i, n, made):
        if made % 200 == 0:
            print(f"  {made:,} graphs, {i:,}/{n:,} made-up passes, {time.perf_counter() - t_run[0]:.0f} s", flush=True)

    def write() -> Path:  # after each policy: a run cut short keeps what it measured
        name = torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor()
        gpu = gpu_slug(name) if dev == "cuda" else "cpu"
        res = {"benchmark": "startup_capture", "model": a.model, "weights": "random bf16", "warm": a.warm,
               "machine": name, "torch": torch.__version__, "python": platform.python_version(),
               "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "model_load_s": round(load_s, 3),
               "rows": rows}
        try:
            import triton
            res["triton"] = triton.__version__
        except ImportError:
            pass
        out_dir = Path(a.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"startup_capture_{gpu}{a.tag}.json"
        path.write_text(json.dumps(res, indent=1) + "\n")
        return path

    for policy in filter(None, a.policies.split(",")):
        cfg = ServingConfig(model=a.model, policy=policy, acceptance="sparsespec-llama8b",
                            **({"max_batch": a.max_batch} if a.max_batch else {}))
        opts = RuntimeOptions(device=dev, shape_rule=True, startup_shapes=True, startup_warm=a.warm, say=print,
                              startup_progress=progress)
        t = t_run[0] = time.perf_counter()
        out = run_trace(tr, cfg, opts, model=model)
        g = out.result.summary["runtime"].get("cuda_graphs") or {}
        row = {"policy": policy, "max_batch": cfg.max_batch, "draft_budget": cfg.draft_budget,
               "max_draft": cfg.max_draft, "kv_pages": out.result.summary["runtime"].get("kv_pages"),
               "startup": g.get("startup"), "run_s": round(time.perf_counter() - t, 3)}
        print(json.dumps(row), flush=True)
        rows.append(row)
        release_served()
        write()
    print(f"wrote {write()}")


if __name__ == "__main__":
    main()
