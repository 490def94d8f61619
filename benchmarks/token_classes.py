"""A sweep's fit error by the shape rule's padded token class: which token counts the runtime's
graphed passes compute (spsim/cost/padding.py `padded`, the runtime's own rule) and how well the
profile fitted to that sweep prices each class, passes with and without prefill chunks apart.

The committed sweeps priced the rule's 448-token class 24-26 % low on both cards (three points
each: a 372-394-token chunk beside 3-9 one-token rows, measured slower than a 512-token chunk
alone), and prefill passes at 256-384 tokens 5-8 % low: a cost that depends on the class, not
on the tokens (the GEMMs' kernel choice per row count is one candidate: `gemv.py --tokens`).

    python3 benchmarks/token_classes.py [--sweep h100-llama-3.1-8b --sweep h200-llama-3.1-8b] [--out FILE]

CPU only: reads benchmarks/results/calibration/<sweep>.measurements.jsonl and <sweep>.fit.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from harness import header

from spsim.cost.padding import padded

CAL = Path(__file__).parent / "results" / "calibration"


def classes(sweep: str) -> list[dict]:
    """One row per (prefill or not, padded tokens) of the sweep's graphed, padded points."""
    rows = [json.loads(line) for line in (CAL / f"{sweep}.measurements.jsonl").open()]
    fit = json.loads((CAL / f"{sweep}.fit.json").read_text())
    pred = {round(p["measured_s"], 9): p["predicted_s"] for p in fit["predictions"]}
    groups = defaultdict(list)
    for r in rows[1:]:
        pt, pad = r.get("point"), r.get("padding") or {}
        if not pt or r.get("anchor") or not pad.get("padded"):
            continue
        p = pred.get(round(r["seconds"], 9))
        if p is None:  # excluded from the fit
            continue
        pre = [q for _, q in pt["prefill"]]
        ver = [q for _, q in pt["verifies"]]
        tokens = sum(pre) + len(pt["drafts"]) + sum(ver)
        t, _ = padded(tokens, 0, len(pt["drafts"]), len(ver), "rule", 1 << 30, n_prefill=len(pre))
        groups[(bool(pre), t)].append((p / r["seconds"] - 1, r["seconds"]))
    out = []
    for (pre, t), v in sorted(groups.items()):
        e = [x for x, _ in v]
        out.append({"prefill": pre, "padded_tokens": t, "points": len(v), "mean_error": round(statistics.mean(e), 4),
                    "min_error": round(min(e), 4), "max_error": round(max(e), 4),
                    "measured_ms": sorted(round(s * 1e3, 2) for _, s in v)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="append", help="a sweep's name under results/calibration (repeatable)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "token_classes.json"))
    a = ap.parse_args()
    sweeps = a.sweep or ["h100-llama-3.1-8b", "h200-llama-3.1-8b"]
    res = {**header("token_classes"), "sweeps": {s: classes(s) for s in sweeps}}
    for s, rows in res["sweeps"].items():
        print(s)
        for r in rows:
            print(f"  {'prefill' if r['prefill'] else 'decode ':8s} {r['padded_tokens']:6d} tokens  {r['points']:3d} points  "
                  f"mean {100 * r['mean_error']:+6.1f} %  ({100 * r['min_error']:+.1f} .. {100 * r['max_error']:+.1f})")
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
