"""How much of a calibration sweep's measured pass time is the host's, and how much of the fit's
error it explains; from a committed measurements file, on the CPU.

Each GPU-swept point records its wall-clock pass time (`seconds`, what the profile is fitted to),
the device's time (`gpu_s`: CUDA events around the forward) and the host's input preparation
(`prep_s`). This prints and writes (JSON):

- per group: median wall, device and preparation time, and the rest of the host's part
  (sampling, bookkeeping, synchronisation);
- the drift anchors (the same two passes re-measured every 12th point): how much their wall and
  device times move over the sweep;
- held-out error of the calibrated model fitted three ways: to wall time (the profile), to device
  time alone, and to wall time whose host part is scaled by the `anchor:ar` host part at that
  moment (a drift correction; not what the profile does);
- a host model on its own (least squares on requests, drafts, tokens, pages, flags) added to the
  device-time fit, against held-out wall times.

    python3 benchmarks/host_share.py benchmarks/results/calibration/h200-llama-3.1-8b.measurements.jsonl \
        --out benchmarks/results/host_share_h200_8b.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
from harness import header

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # a checkout without an install


def _err(pred, meas) -> dict:
    e = np.abs(np.asarray(pred) / np.asarray(meas) - 1)
    return {"n": int(len(e)), "median_abs_rel": round(float(np.median(e)), 4),
            "p95_abs_rel": round(float(np.percentile(e, 95)), 4)}


def _features(p) -> list[float]:
    nd, nv = len(p.drafts), len(p.verifies)
    pages = (sum(c for c, _ in p.drafts) + sum(c for c, _ in p.verifies)) / 16
    spec = any(q > 1 for _, q in p.verifies)
    return [1, nd, nv, sum(n for _, n in p.prefill) / 1e3, pages / 1e4, spec, nd > 0, bool(p.prefill)] + \
        [float(p.method == m and nd > 0) for m in range(5)]


def main(argv=None) -> int:
    from spsim.calibration.calibrate import runtime_of
    from spsim.calibration.fit import _current, _gpu_times, fit
    from spsim.calibration.records import read_anchors, read_measurements

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measurements")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    if not Path(a.measurements).is_file():
        print(f"{a.measurements}: not found", file=sys.stderr)
        return 2
    sessions, ms = read_measurements(a.measurements)
    if not sessions:
        print(f"{a.measurements}: no measuring session in it", file=sys.stderr)
        return 2
    s = sessions[-1]
    ok, _ = _current([m for m in ms if m.ok])
    gpu = _gpu_times(ok) if ok else None
    if gpu is None:
        print(f"{a.measurements}: needs a GPU sweep's points with gpu_s (device time)", file=sys.stderr)
        return 2
    wall = np.array([m.seconds for m in ok])
    prep = np.array([float(np.median(m.record["prep_s"])) for m in ok])
    groups = {}
    for g in sorted({m.point.group for m in ok}):
        sel = np.array([m.point.group == g for m in ok])
        groups[g] = {k: round(float(np.median(v[sel])) * 1e3, 3) for k, v in
                     (("wall_ms", wall), ("device_ms", gpu), ("prep_ms", prep), ("other_host_ms", wall - gpu - prep))}
        groups[g]["points"] = int(sel.sum())
    anchors = {}
    an = read_anchors(a.measurements)
    for label in sorted({x["label"] for x in an}):
        xs = [x for x in an if x["label"] == label and x.get("ok")]
        w = np.array([x["seconds"] for x in xs])
        d = np.array([float(np.median(x["gpu_s"])) for x in xs])
        dev = lambda v: {"median_abs_rel": round(float(np.median(np.abs(v / np.median(v) - 1))), 4),  # noqa: E731
                         "max_abs_rel": round(float(np.max(np.abs(v / np.median(v) - 1))), 4)}
        anchors[label] = {"n": len(xs), "wall": dev(w), "device": dev(d)}

    rt = runtime_of(sessions)
    model = s["model_name"]

    # one fit on wall time also fits device time (the report's gpu_time, with per-point predictions)
    _, rep_wall = fit(ok, model, runtime=rt)
    # drift-corrected: each point's host part scaled by the anchor:ar host part around it
    ar = [x for x in an if x["label"] == "anchor:ar" and x.get("ok")]
    corrected = None
    if ar:
        lines = np.array([x["line"] for x in ar])
        host = np.array([x["seconds"] - float(np.median(x["gpu_s"])) for x in ar])
        f = []
        for m in ok:
            j = np.searchsorted(lines, m.line)
            f.append(np.mean([host[k] for k in (j - 1, j) if 0 <= k < len(host)]) / np.median(host))
        # the records without gpu_s: no second (device-time) solve wanted here
        recs = [dataclasses.replace(m, seconds=float(v), record={k: x for k, x in m.record.items() if k != "gpu_s"})
                for m, v in zip(ok, gpu + (wall - gpu) / np.array(f))]
        corrected = fit(recs, model, runtime=rt)[1]["heldout_error"]
    # a host model of its own beside the device-time fit
    pred_dev = {p["id"]: p["predicted_gpu_s"] for p in rep_wall["predictions"]}
    held = np.array([m.point.heldout for m in ok])
    X = np.array([_features(m.point) for m in ok], float)
    coef, *_ = np.linalg.lstsq(X[~held], (wall - gpu)[~held], rcond=None)
    two = np.array([pred_dev[m.point.key] for m in ok]) + X @ coef
    out = {
        **header("host_share"),
        "command": "host_share.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "measurements": {"file": Path(a.measurements).name, "device": s.get("device_name"), "model": model,
                         "date": s.get("date"), "points": len(ok)},
        "host_share_median": round(float(np.median(1 - gpu / wall)), 4),
        "groups": groups, "anchors": anchors,
        "heldout_error": {"wall_fit": _err_of(rep_wall["heldout_error"]),
                          "device_fit": _err_of(rep_wall["gpu_time"]["heldout_error"]),
                          "wall_fit_drift_corrected": None if corrected is None else
                          {"n": corrected["n"], "median_abs_rel": round(corrected["median_abs_rel"], 4),
                           "p95_abs_rel": round(corrected["p95_abs_rel"], 4)},
                          "device_fit_plus_host_model": _err(two[held], wall[held])},
    }
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


def _err_of(h: dict) -> dict:
    return {k: round(h[k], 4) if isinstance(h[k], float) else h[k] for k in ("n", "median_abs_rel", "p95_abs_rel")}


if __name__ == "__main__":
    sys.exit(main())
