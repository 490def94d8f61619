"""The simulator's regression fixture: fixed cases whose results must not change by accident.

Every policy on a Mooncake slice and an Azure slice (2 replicas, seed 0), plus cases that reach
the other draft-KV methods, the closed loop and preemption under a small KV pool, and cases priced
by each shipped calibration profile. A case's record
is its summary (without the `config` echo and the simulator's event counts, which describe how it
ran, not what it computed) and a SHA-256 of its per-request frame as CSV.

Regenerate only when a change is *meant* to change results, and say so in the commit:

    python3 tests/regression_cases.py > tests/fixtures/regression.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

POLICIES = ["ar", "sync", "sync:k=4", "fixed-k:k=8", "entropy", "aspire", "oracle"]
TRACES = {"mooncake": 200, "azure-conv": 100}


def cases() -> list[dict]:
    out = []
    for trace, limit in TRACES.items():
        for p in POLICIES:
            out.append(dict(trace=trace, limit=limit, policy=p, replicas=2))
    extra = [
        dict(policy="sync:k=4", draft_kv="static", draft_budget=512),
        dict(policy="aspire", draft_kv="step-refresh", concurrency=8),
        dict(policy="fixed-k:k=6", draft_kv="verify-refresh", concurrency=16, kv_pages=9000),
        dict(policy="entropy", offline=True, kv_pages=9000, max_batch=24),
    ]
    for e in extra:
        out.append(dict(trace="mooncake", limit=120, replicas=1, **e))
    # priced by each shipped profile: a change to the calibrated model or a profile shows here
    for model, policies in (("llama-3.1-8b", ("ar", "fixed-k:k=4", "aspire")), ("llama-3.2-3b", ("sync:k=4", "entropy"))):
        for p in policies:
            out.append(dict(trace="mooncake", limit=120, replicas=1, policy=p, model=model,
                            profile=f"calibration/profiles/h200-{model}.json"))
    return out


def case_name(c: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in c.items())


def run_case(c: dict) -> dict:
    import numpy as np

    from spsim.simulator.engine import SimConfig, simulate
    from spsim.traces import read_trace

    c = dict(c)
    if "profile" in c:  # shipped with the package, named from the checkout's root
        c["profile"] = str(Path(__file__).resolve().parents[1] / c["profile"])
    tr = read_trace(c.pop("trace"))
    tr = tr.take(np.arange(min(c.pop("limit"), len(tr))))
    # the analytic roofline, pinned where a case names no profile: a profile shipped later must not
    # move the fixture
    res = simulate(tr, SimConfig(seed=0, cost="roofline", **c))
    s = {k: v for k, v in res.summary.items() if k not in ("config", "sim_events")}
    csv = res.requests.to_csv(index=False, float_format="%.17g").encode()
    return {"summary": json.loads(json.dumps(s, sort_keys=True)), "requests_sha256": hashlib.sha256(csv).hexdigest()}


def main() -> None:
    fixture = {case_name(c): run_case(c) for c in cases()}
    json.dump(fixture, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
