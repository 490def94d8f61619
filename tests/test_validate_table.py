"""benchmarks/validate_table.py renders the validation index as docs/validation.md's table: each
run's start-up set, what ran outside it while measured, each target's error with misses in bold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests/fixtures/validate_table"  # an H100 index; one run's JSON trimmed to what the table reads

sys.path.insert(0, str(ROOT / "benchmarks"))


def _rows(text: str) -> dict:
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    return {(r[0].strip(), r[1].strip()): [c.strip() for c in r] for r in rows[1:]}


def test_a_run_row_shows_its_startup_set_its_eager_pass_and_its_misses():
    from validate_table import table

    rows = _rows(table(FIX))
    fk = rows[("fixed-k:k=4", "short 4x")]
    assert fk[2] == "1,016 / 52 / 9.2"  # graphs / s / GiB of its process's start-up set
    assert fk[3] == "0 / **1** / **1**"  # one pass ran eager and compiled a kernel while measured
    # throughput +1.4 % within 3 %; mean TPOT -5.6 % outside 3 % and outside the two runs' range
    assert fk[4] == "+1.4 %" and fk[6] == "**-5.6 %**"


def test_loads_and_runs_without_a_result_are_named():
    from validate_table import table

    rows = _rows(table(FIX))
    assert rows[("ar", "offline")][2] == "its JSON is missing"
    assert rows[("ar", "closed loop of 16")][2] == "skipped: no time"
    assert rows[("sync:k=4", "short 4x")][2].startswith("skipped")
    assert table(FIX).startswith("kernels `ba238c7863d7` on NVIDIA H100")


def test_a_missing_index_is_one_line_and_exit_code_2(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks/validate_table.py"), str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "validate_index.json" in p.stderr
