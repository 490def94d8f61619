"""The validation index as the table docs/validation.md shows: one row per run of the standing
matrix (`validate_gpu.py --append`), its start-up set, what ran outside it while measured, and each
target metric's error, a miss in bold.

    python3 benchmarks/validate_table.py [benchmarks/results/validate] [--out FILE]

CPU only: reads `validate_index.json` and the per-run JSONs beside it (their `runtime.cuda_graphs`
and `metrics`). A metric misses where it is outside its target and the prediction is outside the
measured runs' range (`--repeat`); a run misses on graphs where it captured a graph or ran a
decode-like pass eager while measured. Prints markdown (a heading line naming the kernel version,
GPU and profile, then the table); `--out` also writes it. Exit code 2 with one line on a missing
or unreadable index.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "p99_e2el_ms")
HEAD = ("policy", "load", "start-up graphs / s / GiB", "captures / eager / compiles", "throughput", "mean TTFT",
        "mean TPOT", "p99 TPOT", "mean E2EL", "p99 E2EL")


def load_label(run: dict) -> str:
    """The matrix's name for a run's load: short- or long-context arrivals (at Nx the trace's rate),
    offline, or a closed loop."""
    mode = run.get("mode") if isinstance(run.get("mode"), dict) else {}  # ("trace arrivals": a string)
    if mode.get("offline"):
        return "offline"
    if mode.get("concurrency"):
        return f"closed loop of {mode['concurrency']}"
    if mode.get("qps"):
        return f"{mode['qps']:g} req/s"
    speed = run.get("speed") or 1.0
    ctx = "long" if run.get("trace") == "mooncake" else "short"
    return f"{ctx} {speed:g}x"


POLICY_ORDER = ("ar", "sync:k=4", "fixed-k:k=4", "entropy", "aspire")  # validate_gpu.py's defaults


def order(run: dict) -> tuple:
    """Rows by load (short-context arrivals by rate, long-context, offline, closed loop), then by
    the matrix's policy order, whatever order the calls ran them in."""
    label = load_label(run)
    kind = 0 if label.startswith("short") else 1 if label.startswith("long") else \
        2 if label == "offline" else 3 if label.startswith("closed") else 4
    pol = run.get("policy", "")
    return (kind, run.get("speed") or 1.0, POLICY_ORDER.index(pol) if pol in POLICY_ORDER else len(POLICY_ORDER), pol)


def _pct(metric: dict) -> str:
    s = f"{metric['rel_error'] * 100:+.1f} %"
    miss = metric.get("within") is False and not metric.get("in_measured_range")
    return f"**{s}**" if miss else s


def row(run: dict, doc: dict | None) -> list[str]:
    """One table row: the index's entry and, where present, the run's own JSON."""
    cells = [run["policy"], load_label(run)]
    if run.get("status") != "done" or doc is None:
        status = "its JSON is missing" if run.get("status") == "done" else str(run.get("status", "missing"))
        return cells + [status] + [""] * (len(HEAD) - 3)
    cg = doc.get("runtime", {}).get("cuda_graphs", {})
    st = cg.get("startup") or {}
    cells.append(f"{st.get('graphs', 0):,} / {st.get('seconds', 0):.0f} / {st.get('bytes', 0) / 2**30:.1f}"
                 if st else "none")
    comp = doc.get("runtime", {}).get("kernel_compiles", {}).get("count", 0)
    bad = lambda x: f"**{x}**" if x else str(x)  # noqa: E731
    cells.append(f"{bad(cg.get('captures', 0))} / {bad(cg.get('eager', 0))} / {bad(comp)}")
    m = doc.get("metrics", {})
    cells += [_pct(m[k]) if k in m else "" for k in METRICS]
    return cells


def table(folder: Path) -> str:
    index = json.loads((folder / "validate_index.json").read_text())
    lines = [f"kernels `{index.get('kernel_version')}` on {index.get('machine', {}).get('device', '?')}, "
             f"profile `{Path(str(index.get('profile'))).name}`, repeat {index.get('repeat', 1)}, "
             f"{len(index.get('runs', []))} runs", "",
             "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for run in sorted(index.get("runs", []), key=order):
        f = folder / str(run.get("file", ""))
        doc = json.loads(f.read_text()) if run.get("file") and f.is_file() else None
        lines.append("| " + " | ".join(row(run, doc)) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", default=str(Path(__file__).parent / "results" / "validate"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    try:
        text = table(Path(a.folder))
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"validate_table.py: {a.folder}: no readable validate_index.json ({type(e).__name__}: {e})",
              file=sys.stderr)
        sys.exit(2)
    print(text, end="")
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
