"""`spsim run` from the command line (CPU, `tiny`): outputs, wall-clock arrivals, bad input."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from spsim.cli import app  # noqa: E402


def write_trace(path, gaps=0.05):
    rows = [{"spsim_trace": 1}] + [{"id": f"r{i}", "arrival_s": i * gaps, "prompt_tokens": p, "output_tokens": o}
                                   for i, (p, o) in enumerate([(200, 12), (400, 8), (300, 10)])]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_run_with_wall_clock_arrivals_writes_everything(tmp_path):
    tr = write_trace(tmp_path / "t.jsonl", gaps=0.2)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(tr), "--model", "tiny", "--device", "cpu", "-p", "fixed-k:k=3",
                                   "--draft-budget", "64", "--out", str(out), "--dump-tokens", str(tmp_path / "tok.json")])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] == 3 and s["config"]["load"] == "trace" and s["runtime"]["device"] == "cpu"
    assert s["runtime"]["acceptance"] == "real"  # run's default, not replay's preset
    req = (out / "requests.csv").read_text().splitlines()
    assert len(req) == 4
    # wall clock: the last request cannot be served before it arrives (0.4 s after the first)
    import pandas as pd

    df = pd.read_csv(out / "requests.csv")
    assert (df["first_token_s"] >= df["arrival_s"]).all() and df["arrival_s"].max() == pytest.approx(0.4)
    toks = json.loads((tmp_path / "tok.json").read_text())
    assert {k: len(v) for k, v in toks.items()} == {"r0": 12, "r1": 8, "r2": 10}
    assert (out / "events.jsonl").read_text().startswith('{"spsim_accept_events": 1')
    assert len((out / "passes.jsonl").read_text().splitlines()) == s["runtime"]["passes"]


@pytest.mark.parametrize("args,message", [
    (["--device", "gpu"], "--device must be cuda or cpu"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--policy", "oracle"], "not real acceptance"),
    (["--kv-pages", "0"], "--kv-pages must be >= 1"),
    (["--model", "gpt9"], "unknown model config"),
    (["--dtype", "fp7"], "--dtype must be one of"),
    (["--weights", "/nonexistent/w"], "/nonexistent/w"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    """Each is an SpsimError (which `spsim`'s entry point prints as one line, exit 2)."""
    from spsim.errors import SpsimError

    tr = write_trace(tmp_path / "t.jsonl")
    res = CliRunner().invoke(app, ["run", str(tr), "--model", "tiny", "--device", "cpu", "--offline", *args])
    assert isinstance(res.exception, SpsimError), (res.output, res.exception)
    assert message in str(res.exception) and res.exception.exit_code == 2


def test_a_run_where_nothing_completes_says_why():
    from spsim.cli_report import run_notes

    notes = run_notes({"completed": 0, "rejected": 3, "rejected_reasons": {"context_window": 3}})
    assert notes and notes[0].startswith("no request completed: 3 context_window (prompt + output longer")
    assert run_notes({"completed": 5, "rejected": 0, "rejected_reasons": {}}) == []
