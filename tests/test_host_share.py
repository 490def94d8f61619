"""benchmarks/host_share.py on a committed GPU sweep: the host's share of each pass and the fit
three ways; a sweep without device times is one line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks/host_share.py"


def test_host_share_of_the_3b_sweep(tmp_path):
    out = tmp_path / "h.json"
    meas = ROOT / "tests/fixtures/calibration/serial-3b.measurements.jsonl"  # timed serially
    res = subprocess.run([sys.executable, str(SCRIPT), str(meas), "--out", str(out)], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    assert 0 < d["host_share_median"] < 0.5
    for g in ("ar", "verify", "draft", "mixed", "prefill"):
        v = d["groups"][g]
        assert v["wall_ms"] > v["device_ms"] > 0 and v["prep_ms"] > 0, g
    assert set(d["anchors"]) == {"anchor:ar", "anchor:draft:static"}
    for a in d["anchors"].values():  # the wall moves more than the device over the sweep
        assert a["wall"]["median_abs_rel"] > a["device"]["median_abs_rel"]
    h = d["heldout_error"]
    assert h["device_fit"]["median_abs_rel"] < h["wall_fit"]["median_abs_rel"]
    assert h["wall_fit"]["n"] == h["device_fit"]["n"] == h["device_fit_plus_host_model"]["n"] > 30


def test_a_sweep_without_device_times_is_one_line(tmp_path):
    meas = ROOT / "tests/fixtures/calibration/wall-only-8b.measurements.jsonl"  # first lines of a sweep without device times
    res = subprocess.run([sys.executable, str(SCRIPT), str(meas)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "needs a GPU sweep's points with gpu_s" in res.stderr
    assert "Traceback" not in res.stderr
