"""benchmarks/revalidate.py re-predicts committed GPU validation runs on the CPU: with the profile a
run was predicted with, it gives that run's prediction again, exactly (the simulator is
deterministic given the run's recorded settings). If this fails after a change to the simulator,
the policies or the cost model, the committed validation no longer describes today's predictions:
run the GPU validation again (docs/validation.md) and commit its results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "tests/fixtures/validate"  # copies of the committed GPU validation runs
RUN = RUNS / "validate_mooncake_offline_n50_ar.json"
# the profile that run was predicted with: the shipped one
PROFILE = ROOT / "calibration/profiles/h200-llama-3.1-8b.json"

sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_committed_run_is_predicted_again_exactly():
    from revalidate import repredict

    r = json.loads(RUN.read_text())
    assert Path(r["profile"]).name == PROFILE.name
    now = repredict(r, str(PROFILE))
    for k in ("output_throughput", "duration", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "p90_ttft_ms"):
        assert now[k]["predicted"] == pytest.approx(r["metrics"][k]["predicted"], rel=1e-9), k
        assert now[k]["measured"] == r["metrics"][k]["measured"]


def test_the_shipped_profiles_predictions_are_the_committed_ones():
    """docs/validation.md quotes the runs predicted on the GPU machine with the profile shipped now
    (`revalidate_shipped_8b.json`): every one comes out again, error for error."""
    from revalidate import repredict

    table = json.loads((RUNS / "revalidate_shipped_8b.json").read_text())
    assert len(table["runs"]) == 7
    for row in table["runs"]:
        r = json.loads((RUNS / row["file"]).read_text())
        now = repredict(r, str(PROFILE))
        for k, err in row["now"].items():
            assert now[k]["rel_error"] == pytest.approx(err, rel=1e-9, abs=1e-12), (row["file"], k)
            assert err == pytest.approx(r["metrics"][k]["rel_error"], rel=1e-9, abs=1e-12), (row["file"], k)


def test_cli_table_and_skips(tmp_path):
    out = tmp_path / "t.json"
    three_b = RUNS / "validate_mooncake_offline_n50_ar_3b.json"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks/revalidate.py"), str(RUN), str(three_b),
                          "--profile", str(PROFILE), "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "skipped 1 file(s): model is not llama-3.1-8b" in res.stdout
    t = json.loads(out.read_text())
    assert len(t["runs"]) == 1 and t["runs"][0]["policy"] == "ar"
    assert t["runs"][0]["then"] == pytest.approx(t["runs"][0]["now"], rel=1e-9)


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
