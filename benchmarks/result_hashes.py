"""Hashes of simulation results (summary JSON and per-request CSV), to hold a speed change to
bit-identical results: run before and after, compare the lines.

    python3 benchmarks/result_hashes.py [--limit 2000] [--cost auto] > hashes.txt
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from spsim.simulator.engine import SimConfig, simulate
from spsim.traces import read_trace

POLICIES = ("ar", "fixed-k:k=4", "aspire", "entropy")
TRACES = ("mooncake", "azure-conv")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=2000)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--cost", default="auto")
    ap.add_argument("--policies", default=",".join(POLICIES))
    a = ap.parse_args()
    for trace in TRACES:
        tr = read_trace(trace)
        tr = tr.take(np.arange(min(a.limit, len(tr))))
        for policy in a.policies.split(";") if ";" in a.policies else a.policies.split(","):
            res = simulate(tr, SimConfig(policy=policy, replicas=a.replicas, cost=a.cost))
            summ = dict(res.summary)
            cfg = summ.get("config")
            if isinstance(cfg, dict) and cfg.get("profile"):  # a path: the same file in another checkout
                summ["config"] = {**cfg, "profile": Path(str(cfg["profile"])).name}
            s = hashlib.sha256(json.dumps(summ, sort_keys=True, default=str).encode()).hexdigest()[:16]
            r = hashlib.sha256(res.requests.to_csv().encode()).hexdigest()[:16]
            print(trace, policy, a.cost, s, r, flush=True)


if __name__ == "__main__":
    main()
