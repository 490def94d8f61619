"""Where an offline `spsim run` spends its wall time on the host: cProfile over a run (GPU work
shows up where the host waits for it: synchronisations, `.item()`, copies to the host).

    python3 benchmarks/runtime_host_profile.py [--policy ar] [--trace benchmarks/data/offline_4x16k.jsonl]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install


def main() -> None:
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace
    from spsim.traces import read_trace

    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="ar")
    ap.add_argument("--trace", default=str(Path(__file__).parent / "data" / "offline_4x16k.jsonl"))
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--top", type=int, default=35)
    a = ap.parse_args()
    tr = read_trace(a.trace)
    cfg = ServingConfig(policy=a.policy, model=a.model, offline=True, acceptance="sparsespec-llama8b")
    opts = RuntimeOptions(device="cuda")
    run_trace(tr, cfg, opts)  # warm-up: compiles kernels, loads the model once
    prof = cProfile.Profile()
    prof.enable()
    res = run_trace(tr, cfg, opts)
    prof.disable()
    s = res.result.summary
    print(f"{a.policy}: {s['output_throughput']:.1f} tok/s, pass time {s['pass_time_s']}, graphs {s['runtime']['cuda_graphs']}")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(a.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()
