"""A sweep's fit error by the shape rule's padded token class: which token counts the runtime's
graphed passes compute (spsim/cost/padding.py `padded`, the runtime's own rule) and how well the
profile fitted to that sweep prices each class, passes with and without prefill chunks apart.

The committed sweeps priced the rule's 448-token class 24-26 % low on both cards (three points
each: a 372-394-token chunk beside 3-9 one-token rows, measured slower than a 512-token chunk
alone), and prefill passes at 256-384 tokens 5-8 % low: a cost that depends on the class, not
on the tokens (the GEMMs' kernel choice per row count is one candidate: `gemv.py --tokens`).

Also the validation runs' own prefill passes (`--runs`, the archive of per-pass files
`validate_gpu.py --pack` writes): each run's median GPU time per padded token class, so the
classes can be compared under live traffic (the 4x Azure runs on the H100 before `RULE_SKIP`:
448-token passes slower than 512-token ones under every policy; since, those chunks take the
512-token class and run faster).

    python3 benchmarks/token_classes.py [--sweep h100-llama-3.1-8b --sweep h200-llama-3.1-8b]
        [--runs benchmarks/results/validate/validate_runs.tar.gz] [--out FILE]

CPU only: reads benchmarks/results/calibration/<sweep>.measurements.jsonl and <sweep>.fit.json.
A pass's class is the shape rule's padded token count (`spsim.buckets`) with `--skip` the sizes the
rule skipped when the sweeps were measured (none for the sweeps committed today: measured before
`RULE_SKIP`) and `--runs-skip` when the runs were (default today's `RULE_SKIP`: the committed
archive ran on today's rule).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

from harness import header

from spsim.buckets import RULE_SKIP, pow2, rule_size

CAL = Path(__file__).parent / "results" / "calibration"


def padded_tokens(tokens: int, rows: int, skip: tuple) -> int:
    """The rule's padded token count of a pass of `tokens` tokens over `rows` requests, with `skip`
    the sizes the rule skipped then (spsim/cost/padding.py `padded`)."""
    return rule_size(tokens + (pow2(rows) - rows if rows else 0) + 1, 8, skip)  # dummy rows, a filler token


def classes(sweep: str, skip: tuple = ()) -> list[dict]:
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
        t = padded_tokens(tokens, len(pre) + len(pt["drafts"]) + len(ver), skip)
        groups[(bool(pre), t)].append((p / r["seconds"] - 1, r["seconds"]))
    out = []
    for (pre, t), v in sorted(groups.items()):
        e = [x for x, _ in v]
        out.append({"prefill": pre, "padded_tokens": t, "points": len(v), "mean_error": round(statistics.mean(e), 4),
                    "min_error": round(min(e), 4), "max_error": round(max(e), 4),
                    "measured_ms": sorted(round(s * 1e3, 2) for _, s in v)})
    return out


def live(archive: Path, skip: tuple = ()) -> dict:
    """Each run's prefill passes (graphed ones: padded tokens within the graph limit) by padded token
    class: count, median GPU ms, real tokens and rows beside the chunk."""
    out = {}
    with tarfile.open(archive) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if not m.name.endswith("/passes.jsonl"):
                continue
            groups = defaultdict(list)
            for line in tar.extractfile(m):
                r = json.loads(line)
                if not r.get("prefill_tokens"):
                    continue
                rows = r["drafts"] + r["verifies"]
                tokens = r["prefill_tokens"] + r["drafts"] + r["verify_tokens"]
                t = padded_tokens(tokens, 1 + rows, skip)
                if t > 2048:  # eager: not a graph's class
                    continue
                groups[t].append((r["gpu_ms"], tokens, rows))
            out[m.name.split("/")[-2]] = [
                {"padded_tokens": t, "passes": len(v), "median_gpu_ms": round(statistics.median(x for x, _, _ in v), 2),
                 "tokens": [min(x for _, x, _ in v), max(x for _, x, _ in v)],
                 "median_rows_beside": statistics.median(x for _, _, x in v)} for t, v in sorted(groups.items())]
    return out


def _sizes(flag: str, text: str) -> tuple:
    try:
        return tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        print(f"error: {flag} {text!r}: expected token counts separated by commas (448,896)", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="append", help="a sweep's name under results/calibration (repeatable)")
    ap.add_argument("--runs", default=str(Path(__file__).parent / "results" / "validate" / "validate_runs.tar.gz"),
                    help="a validation archive of per-pass files ('' for none)")
    ap.add_argument("--skip", default="", help="token sizes the rule skipped when the sweeps were measured (448,896)")
    ap.add_argument("--runs-skip", default=",".join(map(str, RULE_SKIP)),
                    help="... when the runs were measured (default today's rule: %(default)s)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "token_classes.json"))
    a = ap.parse_args()
    sweeps = a.sweep or ["h100-llama-3.1-8b", "h200-llama-3.1-8b"]
    skip, runs_skip = _sizes("--skip", a.skip), _sizes("--runs-skip", a.runs_skip)
    files = [CAL / f"{s}.{ext}" for s in sweeps for ext in ("measurements.jsonl", "fit.json")]
    missing = next((p for p in files + ([Path(a.runs)] if a.runs else []) if not p.is_file()), None)
    if missing is not None:
        print(f"error: {missing}: no such file", file=sys.stderr)
        sys.exit(2)
    res = {**header("token_classes"), "skip": list(skip), "sweeps": {s: classes(s, skip) for s in sweeps}}
    if a.runs:
        res["runs_skip"] = list(runs_skip)
        res["runs"] = live(Path(a.runs), runs_skip)
    for s, rows in res["sweeps"].items():
        print(s)
        for r in rows:
            print(f"  {'prefill' if r['prefill'] else 'decode ':8s} {r['padded_tokens']:6d} tokens  {r['points']:3d} points  "
                  f"mean {100 * r['mean_error']:+6.1f} %  ({100 * r['min_error']:+.1f} .. {100 * r['max_error']:+.1f})")
    for run, rows in res.get("runs", {}).items():
        print(run, " ".join(f"{r['padded_tokens']}:{r['median_gpu_ms']}({r['passes']})" for r in rows))
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
