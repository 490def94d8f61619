"""`spsim replay` / `spsim compare` / `spsim models` / `spsim policies` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from spsim.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("tr") / "t.jsonl"
    r = runner.invoke(app, ["trace", "gen", str(p), "-n", "40", "--qps", "4", "--seed", "3",
                            "--prompt", "uniform:low=2000,high=30000", "--output", "uniform:low=20,high=120"])
    assert r.exit_code == 0, r.output
    return p


def test_replay_writes_summary_and_requests(trace_file, tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, ["replay", str(trace_file), "--policy", "fixed-k:k=4", "--out", str(out), "--replicas", "2"])
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    req = pd.read_csv(out / "requests.csv")
    assert s["completed"] == 40 == len(req)
    assert s["config"]["policy"] == "fixed-k:k=4,stagger=True"
    assert int(req["output_tokens"].sum()) == s["total_output_tokens"]
    assert "TTFT" in r.output and "output throughput" in r.output


def test_replay_json_is_deterministic(trace_file):
    a = runner.invoke(app, ["replay", str(trace_file), "--policy", "aspire", "--json", "--seed", "5"])
    b = runner.invoke(app, ["replay", str(trace_file), "--policy", "aspire", "--json", "--seed", "5"])
    assert a.exit_code == 0 and a.stdout == b.stdout  # stdout: warnings about the load go to stderr
    assert json.loads(a.stdout)["completed"] == 40


def test_compare_table_and_report(trace_file, tmp_path):
    out = tmp_path / "cmp"
    r = runner.invoke(app, ["compare", str(trace_file), "-P", "ar,fixed-k:k=4,aspire,oracle", "--seeds", "2",
                            "--out", str(out), "--concurrency", "8"])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "compare.json").read_text())
    rows = {row["policy"]: row for row in doc["rows"]}
    assert rows["ar"]["output_throughput_vs_ref"] == pytest.approx(1.0)
    assert rows["oracle"]["clairvoyant"] and not rows["aspire"]["clairvoyant"]
    assert rows["fixed-k:k=4"]["output_throughput_std"] is not None
    assert (out / "report.html").stat().st_size > 1000
    assert "clairvoyant reference" in r.output and "upper bound" not in r.output


def test_models_and_policies_list():
    r = runner.invoke(app, ["models"])
    assert r.exit_code == 0 and "llama-3.1-70b" in r.output and "h200" in r.output
    r = runner.invoke(app, ["policies"])
    assert r.exit_code == 0
    for name in ("ar", "sync", "fixed-k", "entropy", "aspire", "oracle"):
        assert name in r.output


@pytest.mark.parametrize("args,message", [
    (["--policy", "nope"], "unknown policy 'nope'"),
    (["--policy", "fixed-k:k=-1"], "k must be >= 0"),
    (["--policy", "fixed-k:k=4,q=1"], "unknown parameter 'q'"),
    (["--max-batch", "0"], "--max-batch must be >= 1"),
    (["--draft-kv", "blah"], "unknown draft-KV method"),
    (["--model", "gpt9"], "unknown model 'gpt9'"),
    (["--model", "llama-3.1-70b", "--gpu", "h100-sxm"], "use tp>=2"),
])
def test_bad_options_one_line_exit_2(trace_file, args, message):
    p = subprocess.run([sys.executable, "-m", "spsim.cli", "replay", str(trace_file), *args],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert message in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_warnings_print_as_one_line(capsys):
    """`spsim`'s entry point shows a warning as `warning: ...` on stderr, not Python's file:line and
    source line."""
    import warnings

    from spsim import cli

    cli._show_warning(UserWarning("p.json: profile measured with torch 0.1"), UserWarning, "/x/build.py", 30)
    err = capsys.readouterr().err
    assert err.strip() == "warning: p.json: profile measured with torch 0.1"
    assert warnings.showwarning is not cli._show_warning  # installed by main() only, not on import
