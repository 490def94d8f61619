"""Out-of-range numbers are one-line errors naming the option (exit 2), never a traceback or a
silent default; `acceptance show` titles its table in words."""

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
    r = runner.invoke(app, ["trace", "gen", str(p), "-n", "8", "--qps", "2", "--seed", "1",
                            "--prompt", "uniform:low=500,high=3000", "--output", "uniform:low=5,high=30"])
    assert r.exit_code == 0, r.output
    return p


def _one_line_exit_2(args, message):
    p = subprocess.run([sys.executable, "-m", "spsim.cli", *args], capture_output=True, text=True)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert message in p.stderr, p.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-2"])
def test_qps_must_be_finite_and_positive(trace_file, value):
    r = runner.invoke(app, ["replay", str(trace_file), "--qps", value])
    assert isinstance(r.exception, SpsimError) and "--qps must be a finite number > 0" in str(r.exception)
    r = runner.invoke(app, ["compare", str(trace_file), "-P", "ar", "--qps", value])
    assert isinstance(r.exception, SpsimError) and "--qps must be a finite number > 0" in str(r.exception)


@pytest.mark.parametrize("args,message", [
    (["--replicas", "0"], "--replicas must be >= 1"),
    (["--concurrency", "0"], "--concurrency must be >= 1"),
    (["--concurrency", "-4"], "--concurrency must be >= 1"),
    (["--limit", "0"], "--limit must be >= 1"),
    (["--limit", "-1"], "--limit must be >= 1"),
    (["--kv-pages", "0"], "--kv-pages must be >= 1"),
    (["--token-budget", "0"], "--token-budget must be >= 1"),
    (["--draft-budget", "-5"], "--draft-budget must be >= 1"),
    (["--max-draft", "-1"], "--max-draft must be in 0..64 (got -1)"),
    (["--tp", "0"], "--tp must be >= 1"),
    (["--page-size", "0"], "--page-size must be >= 1"),
    (["--slo-ttft", "nan"], "--slo-ttft must be a finite number > 0"),
    (["--slo-tpot", "0"], "--slo-tpot must be a finite number > 0"),
])
def test_zero_and_negative_settings(trace_file, args, message):
    for cmd in (["replay", str(trace_file)], ["compare", str(trace_file), "-P", "ar"]):
        r = runner.invoke(app, cmd + args)
        assert isinstance(r.exception, SpsimError), (cmd, args, r.output)
        assert message in str(r.exception)


def test_compare_seeds_must_be_positive(trace_file):
    r = runner.invoke(app, ["compare", str(trace_file), "--seeds", "0"])
    assert isinstance(r.exception, SpsimError) and "--seeds must be >= 1" in str(r.exception)


@pytest.mark.parametrize("args,message", [
    (["--k", "0"], "--k must be >= 1"),
    (["--k", "-3"], "--k must be >= 1"),
    (["--requests", "0"], "--requests must be >= 1"),
    (["--output-tokens", "1"], "--output-tokens must be >= 2"),
    (["--context", "0"], "--context must be >= 1"),
    (["--budget", "-1"], "--budget must be >= 1"),
])
def test_acceptance_sample_ranges(tmp_path, args, message):
    r = runner.invoke(app, ["acceptance", "sample", "sparsespec-llama8b", "-o", str(tmp_path / "e.jsonl"), *args])
    assert isinstance(r.exception, SpsimError), r.output
    assert message in str(r.exception)
    assert not (tmp_path / "e.jsonl").exists()


def test_acceptance_sample_k0_one_line():
    _one_line_exit_2(["acceptance", "sample", "sparsespec-llama8b", "-o", "/tmp/spsim-never.jsonl", "--k", "0"],
                     "--k must be >= 1")


@pytest.mark.parametrize("args,message", [
    (["--k-max", "0"], "--k-max must be >= 1"),
    (["--requests", "0"], "--requests must be >= 1"),
    (["--context", "0"], "--context must be >= 1"),  # 0 used to mean "the preset's" silently
    (["--budget", "0"], "--budget must be >= 1"),
])
def test_acceptance_show_ranges(args, message):
    r = runner.invoke(app, ["acceptance", "show", "sparsespec-llama8b", *args])
    assert isinstance(r.exception, SpsimError), r.output
    assert message in str(r.exception)


def test_acceptance_out_files_checked_first(tmp_path):
    r = runner.invoke(app, ["acceptance", "sample", "sparsespec-llama8b", "-o", "/dev/null/e.jsonl"])
    assert isinstance(r.exception, SpsimError) and "/dev/null is not a folder" in str(r.exception)
    r = runner.invoke(app, ["acceptance", "sample", "sparsespec-llama8b", "-o", str(tmp_path)])
    assert isinstance(r.exception, SpsimError) and "is a folder" in str(r.exception)
    r = runner.invoke(app, ["acceptance", "fit", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "a" / "f.json")])
    assert isinstance(r.exception, SpsimError) and "does not exist" in str(r.exception)
    r = runner.invoke(app, ["acceptance", "fit", str(tmp_path / "missing.jsonl"), "-o", "f.json", "--holdout", "nan"])
    assert isinstance(r.exception, SpsimError) and "--holdout must be in [0, 1)" in str(r.exception)


def test_acceptance_show_title_is_words():
    r = runner.invoke(app, ["acceptance", "show", "sparsespec-llama8b", "--k-max", "3", "--requests", "30"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "{" not in text and "'method'" not in text
    assert "verify-quest draft KV, context 32,768, budget 3,277 tokens, 128 output tokens" in text
