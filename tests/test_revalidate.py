"""benchmarks/revalidate.py re-predicts committed GPU validation runs on the CPU: the measured side
is the run's, the predicted side a simulation of the run's recorded settings under a profile,
deterministic. `revalidate_shipped_8b.json` is the table docs/validation.md quotes (the shipped 8B
profile's errors on the H200 runs); after a change to the simulator, the policies, the cost model
or the shipped profile, regenerate it (benchmarks/README.md) and update the doc's table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "tests/fixtures/validate"  # copies of the committed GPU validation runs
RUN = RUNS / "validate_mooncake_offline_n50_ar.json"
PROFILE = ROOT / "calibration/profiles/h200-llama-3.1-8b.json"  # the shipped one

sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_shipped_profiles_predictions_are_the_committed_table():
    """Every run of the table comes out again, error for error, under today's shipped profile; its
    `then` column is what the run recorded on the GPU machine."""
    from revalidate import repredict

    table = json.loads((RUNS / "revalidate_shipped_8b.json").read_text())
    assert len(table["runs"]) == 7 and Path(table["profile"]).name == PROFILE.name
    for row in table["runs"]:
        r = json.loads((RUNS / row["file"]).read_text())
        now = repredict(r, str(PROFILE))
        for k, err in row["now"].items():
            assert now[k]["rel_error"] == pytest.approx(err, rel=1e-9, abs=1e-12), (row["file"], k)
            assert now[k]["measured"] == r["metrics"][k]["measured"], (row["file"], k)
            assert row["then"][k] == pytest.approx(r["metrics"][k]["rel_error"], rel=1e-9, abs=1e-12), (row["file"], k)


def test_a_rescaled_window_is_rescaled_again():
    """A run of `validate_gpu.py`'s `speed=X` replays the window X times as fast: re-predicted
    the same way, not at the trace's own times."""
    from revalidate import _trace_of

    r = json.loads((RUNS / "validate_azure-conv_trace_w45_ar.json").read_text())
    base = _trace_of(r)
    fast = _trace_of(dict(r, window=dict(r["window"], speed=2.0)))
    assert len(fast) == len(base) and list(fast.ids) == list(base.ids)
    assert float(fast.arrival_s[-1]) < 0.6 * float(base.arrival_s[-1])


def test_cli_table_and_skips(tmp_path):
    out = tmp_path / "t.json"
    three_b = RUNS / "validate_mooncake_offline_n50_ar_3b.json"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks/revalidate.py"), str(RUN), str(three_b),
                          "--profile", str(PROFILE), "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "skipped 1 file(s): model is not llama-3.1-8b" in res.stdout
    t = json.loads(out.read_text())
    assert len(t["runs"]) == 1 and t["runs"][0]["policy"] == "ar"
    row = json.loads((RUNS / "revalidate_shipped_8b.json").read_text())["runs"]
    assert t["runs"][0]["now"] == pytest.approx(next(x["now"] for x in row if x["file"] == RUN.name), rel=1e-9)


def test_a_file_that_is_not_json_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks/revalidate.py"), str(bad), "--profile", str(PROFILE)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "cannot read" in res.stderr and "Traceback" not in res.stderr


def test_a_missing_profile_is_one_line(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks/revalidate.py"), str(RUN), "--profile",
                          str(tmp_path / "none.json")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "cost profile not found" in res.stderr and "Traceback" not in res.stderr
