"""How much a machine's speed moved during a calibration sweep: the drift controls
(`calibration.design.anchor_points`, re-measured every `ANCHOR_EVERY` points) of a measurements
file, each split into device time (CUDA events around the forward), input preparation and the
rest of the host's work, with the GPU clocks nvidia-smi reported beside them.

    python3 benchmarks/calibration_drift.py benchmarks/results/calibration/h200-llama-3.1-8b.measurements.jsonl \\
        --out benchmarks/results/calibration_drift_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install


def spread(x) -> dict:
    x = np.asarray(x, float)
    med = float(np.median(x))
    return {"n": int(len(x)), "median_ms": round(med * 1e3, 3), "min_ms": round(float(x.min()) * 1e3, 3),
            "max_ms": round(float(x.max()) * 1e3, 3), "max_over_min": round(float(x.max() / x.min()), 4),
            "p90_over_median": round(float(np.percentile(x, 90) / med), 4)}


def summarise(path: str) -> dict:
    from spsim.calibration.records import read_anchors
    from spsim.errors import SpsimError

    if not Path(path).is_file():
        raise SpsimError(f"{path}: no such file")
    anchors = [a for a in read_anchors(path) if a.get("ok")]
    if not anchors:
        raise SpsimError(f"{path}: no drift controls (measured before they existed?)")
    out = {}
    for label in sorted({a["label"] for a in anchors}):
        rows = [a for a in anchors if a["label"] == label]
        med = lambda k: [float(np.median(a[k])) for a in rows if a.get(k)]  # noqa: E731
        total, gpu, prep = med("samples"), med("gpu_s"), med("prep_s")
        rest = [t - g - p for t, g, p in zip(total, gpu, prep)]
        clocks = sorted({a["clocks"].get("clocks.sm") for a in rows if a.get("clocks")} - {None})
        out[label] = {"point": rows[0]["point"], "times": len(rows),
                      "span_s": round(rows[-1]["t_s"] - rows[0]["t_s"], 1), "pass": spread(total),
                      "device": spread(gpu) if gpu else None, "prep": spread(prep) if prep else None,
                      "host_rest": spread(rest) if rest else None,
                      "corr_device_prep": round(float(np.corrcoef(gpu, prep)[0, 1]), 3) if len(gpu) > 2 else None,
                      "sm_clocks_mhz": clocks}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("measurements")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from spsim.errors import SpsimError

    try:
        controls = summarise(a.measurements)
    except (SpsimError, OSError) as e:  # a bad or missing file: one line, exit code 2
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    from harness import header

    res = {**header("calibration_drift"), "measurements": a.measurements, "controls": controls}
    sessions = [json.loads(line)["session"] for line in Path(a.measurements).read_text().splitlines()
                if line.startswith('{"spsim_calibration"')]
    if sessions:
        s = sessions[-1]
        res["measured_on"] = {k: s.get(k) for k in ("device_name", "date", "versions", "git")}  # the sweep's GPU
    text = json.dumps(res, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
