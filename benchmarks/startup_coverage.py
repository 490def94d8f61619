"""Which passes of a run fall outside the start-up shape set, on the GPU: per setting, a run with
`--shape-rule --startup-shapes` (the GPU suite's small model and trace), the passes it ran eagerly
by reason, and for each key it missed the start-up keys that agree with it on the pass's
composition (graph key, tokens, logits rows), so the part that differs is plain.

    python3 benchmarks/startup_coverage.py --out $OUT [--cases entropy:verify-attn,aspire:step-layer]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # a checkout without an install


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="entropy:verify-attn,fixed-k:k=4:verify-attn,aspire:step-layer")
    a = ap.parse_args()

    import numpy as np
    import torch

    from spsim.config import ServingConfig
    from spsim.gpu_runtime import engine
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.traces.trace import Trace

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = Transformer.random(get_config("llama-3.2-1b", layers=4), seed=0, device=dev,
                               dtype=torch.bfloat16 if dev == "cuda" else torch.float32)
    rng = np.random.default_rng(1)
    n = 6
    tr = Trace(np.array([f"g{i}" for i in range(n)], object), np.zeros(n), rng.integers(1500, 6000, n), np.full(n, 48))
    rows = []
    for case in a.cases.split(","):
        policy, method = case.rsplit(":", 1)
        cfg = ServingConfig(policy=policy, offline=True, kv_pages=8000, draft_kv=method, draft_budget=256,
                            max_batch=4, max_draft=6, acceptance="sparsespec-llama8b")
        r = run_trace(tr, cfg, RuntimeOptions(device=dev, shape_rule=True, startup_shapes=True), model=model)
        g = r.result.summary["runtime"].get("cuda_graphs") or {}  # none on the CPU
        served = next(iter(engine._SERVED.values())) if engine._SERVED else None
        graphs = served[2] if served else None
        row = {"policy": policy, "method": method, "eager_by_reason": g.get("eager_by_reason"),
               "startup": g.get("startup"), "captures": g.get("captures"), "missed": [],
               "store_growths": served[1].store.growths if served else []}
        if graphs is not None:
            names = list(graphs._PART_NAMES) + ["tokens", "logit rows", "page-id capacity", "work plans"]
            flat = lambda k: list(k[0]) + [k[1], k[2], k[3], k[4]]  # noqa: E731
            for key, count in graphs.missed.items():
                fk = flat(key)
                diffs = []
                for k in graphs.graphs:
                    fs = flat(k)
                    d = [i for i, (x, y) in enumerate(zip(fk, fs)) if x != y]
                    diffs.append((len(d), d, fs))
                diffs.sort(key=lambda x: x[0])
                closest = [{"differs": {names[i]: [str(fk[i])[:300], str(fs[i])[:300]] for i in d}}
                           for _, d, fs in diffs[:3]]
                row["missed"].append({"count": count, "key": str(key)[:600], "closest": closest})
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "missed"}), flush=True)
        for m in row["missed"][:6]:
            print("  missed", m["count"], m["key"][:300], flush=True)
            for c in m["closest"][:2]:
                print("    closest differs in", json.dumps(c["differs"])[:900], flush=True)
        engine.release_served()
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "startup_coverage.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
