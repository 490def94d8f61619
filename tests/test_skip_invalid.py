"""`--skip-invalid` on replay/compare: bad rows skipped, reported on stderr by reason and counted in
the written summary; without it a bad row is the usual one-line error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from spsim.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def bad_trace(tmp_path_factory):
    p = tmp_path_factory.mktemp("tr") / "bad.jsonl"
    rows = [{"spsim_trace": 1}]
    for i in range(10):
        rows.append({"id": f"r{i}", "arrival_s": i * 0.5, "prompt_tokens": 800 + 100 * i, "output_tokens": 20})
    rows[4]["output_tokens"] = -3  # line 5 (the header is line 1)
    rows[7]["prompt_tokens"] = "many"  # line 8
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


@pytest.mark.parametrize("command", [["replay", "-p", "ar"], ["compare", "-P", "ar"]])
def test_bad_row_without_flag_is_one_line(bad_trace, command):
    p = subprocess.run([sys.executable, "-m", "spsim.cli", command[0], str(bad_trace), *command[1:]],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert f"{bad_trace}:5" in p.stderr


def test_replay_skip_invalid_reports_and_counts(bad_trace, tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, ["replay", str(bad_trace), "-p", "ar", "--skip-invalid", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"{bad_trace}: skipped 2 rows:" in r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] == 8
    assert s["trace_skipped"]["rows"] == 2 and sum(s["trace_skipped"]["by_reason"].values()) == 2


def test_replay_json_keeps_stdout_clean(bad_trace):
    r = runner.invoke(app, ["replay", str(bad_trace), "-p", "ar", "--skip-invalid", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["trace_skipped"]["rows"] == 2
    assert "skipped 2 rows" in r.stderr


def test_compare_skip_invalid(bad_trace, tmp_path):
    out = tmp_path / "cmp"
    r = runner.invoke(app, ["compare", str(bad_trace), "-P", "ar,fixed-k:k=4", "--skip-invalid", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"{bad_trace}: skipped 2 rows:" in r.stderr
    doc = json.loads((out / "compare.json").read_text())
    assert doc["trace_skipped"]["rows"] == 2
    assert all(row["completed"] == 8 for row in doc["rows"])


def test_clean_trace_reports_zero(tmp_path):
    r = runner.invoke(app, ["replay", "mooncake", "-p", "ar", "--limit", "20", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["trace_skipped"] == {"rows": 0, "by_reason": {}}
