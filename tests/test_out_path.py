"""A bad --out fails before the run (one line naming the path, exit 2), not with a traceback after it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from spsim.cli import app
from spsim.errors import SpsimError

runner = CliRunner()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("tr") / "t.jsonl"
    r = runner.invoke(app, ["trace", "gen", str(p), "-n", "12", "--qps", "2", "--seed", "1",
                            "--prompt", "uniform:low=500,high=3000", "--output", "uniform:low=5,high=30"])
    assert r.exit_code == 0, r.output
    return p


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if a simulation starts: the check must come first."""
    import spsim.simulator.engine as engine

    def boom(*a, **k):
        raise AssertionError("simulated before checking --out")

    monkeypatch.setattr(engine, "simulate", boom)
    import spsim.compare as compare

    monkeypatch.setattr(compare, "simulate", boom)


def _bad_outs(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    return {"file": (f, "exists and is not a folder"),
            "under a file": (f / "sub", f"{f} is not a folder"),
            "/dev/null/x": ("/dev/null/x", "/dev/null is not a folder"),
            "unwritable": ("/sys/spsim-out", "cannot write there")}


@pytest.mark.parametrize("command", ["replay", "compare"])
@pytest.mark.parametrize("case", ["file", "under a file", "/dev/null/x", "unwritable"])
def test_bad_out_fails_before_the_run(trace_file, tmp_path, no_simulation, command, case):
    out, message = _bad_outs(tmp_path)[case]
    args = [command, str(trace_file), "--out", str(out)] + (["-P", "ar"] if command == "compare" else ["-p", "ar"])
    r = runner.invoke(app, args)
    assert isinstance(r.exception, SpsimError), r.output
    assert str(out) in str(r.exception) and message in str(r.exception)


def test_results_file_that_is_a_folder(trace_file, tmp_path, no_simulation):
    (tmp_path / "summary.json").mkdir()
    r = runner.invoke(app, ["replay", str(trace_file), "--out", str(tmp_path)])
    assert isinstance(r.exception, SpsimError) and "summary.json is a folder" in str(r.exception)


@pytest.mark.parametrize("command", ["replay", "compare"])
def test_bad_out_one_line_exit_2(trace_file, command):
    p = subprocess.run([sys.executable, "-m", "spsim.cli", command, str(trace_file), "--out", "/dev/null/x"],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "/dev/null/x" in p.stderr


def test_good_out_still_written(trace_file, tmp_path):
    out = tmp_path / "new" / "deeper"
    r = runner.invoke(app, ["replay", str(trace_file), "-p", "ar", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "summary.json").is_file() and (out / "requests.csv").is_file()


def test_results_left_by_another_command_are_warned_of(trace_file, tmp_path):
    """`replay --out` into a folder left by `spsim run` kept its events.jsonl and passes.jsonl beside
    the new summary without a word (issue 39, item 9)."""
    out = tmp_path / "runs"
    out.mkdir()
    for name in ("summary.json", "requests.csv", "events.jsonl", "passes.jsonl"):  # what `spsim run` writes
        (out / name).write_text("{}\n")
    r = runner.invoke(app, ["replay", str(trace_file), "--policy", "ar", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (f"warning: --out {out} holds events.jsonl, passes.jsonl from an earlier run, which this command does "
            "not write") in " ".join(r.output.split())
    assert (out / "events.jsonl").exists()  # the user's files stay
    (out / "events.jsonl").unlink()
    (out / "passes.jsonl").unlink()
    r = runner.invoke(app, ["replay", str(trace_file), "--policy", "ar", "--out", str(out)])
    assert r.exit_code == 0 and "warning: --out" not in r.output, r.output  # its own files: no remark
