"""Settings that run but cannot do what they say are remarked on before the run, and a replica
count no one process can simulate is refused (issue 39, item 11)."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from spsim.cli import app
from spsim.cli_report import setting_notes
from spsim.config import ServingConfig


def test_too_many_replicas_is_one_line_before_any_work():
    """`--replicas 100000` set up for 20 s without a remark."""
    p = subprocess.run([sys.executable, "-m", "spsim.cli", "replay", "mooncake", "--limit", "20", "--replicas",
                        "100000"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines() == ["error: --replicas must be <= 1,024 (got 100,000): one process "
                                             "simulates every replica"]


def test_replicas_no_request_reaches_are_remarked():
    assert setting_notes(ServingConfig(replicas=30), 20) == ["--replicas 30 for 20 requests: 10 replicas never get one"]
    assert setting_notes(ServingConfig(replicas=2), 1) == ["--replicas 2 for 1 request: 1 replica never gets one"]
    assert setting_notes(ServingConfig(replicas=20), 20) == []


def test_a_draft_length_above_max_draft_is_remarked():
    """`fixed-k:k=100000` was accepted without a word, and ran as k=16 (the batcher verifies at --max-draft)."""
    (note,) = setting_notes(ServingConfig(policy="fixed-k:k=100000"), 20)
    assert note.startswith("fixed-k:k=100000: k=100,000 is above --max-draft 16")
    assert setting_notes(ServingConfig(policy="fixed-k:k=16"), 20) == []
    assert setting_notes(ServingConfig(policy="sync", max_draft=4), 20) == []  # defaults are the policy's own
    notes = setting_notes(ServingConfig(max_draft=8), 20, ["ar", "sync:k_max=12", "aspire:k_max=8", "fixed-k:k=9"])
    assert [n.split(":")[0] for n in notes] == ["sync", "fixed-k"]


def test_replay_and_compare_say_it(tmp_path):
    for args in (["replay", "-p", "fixed-k:k=40"], ["compare", "-P", "ar,fixed-k:k=40"]):
        r = CliRunner().invoke(app, [*args, "mooncake", "--limit", "3", "--replicas", "4", "--cost", "roofline"])
        assert r.exit_code == 0, r.output
        assert "--replicas 4 for 3 requests: 1 replica never gets one" in r.output
        assert "fixed-k:k=40: k=40 is above --max-draft 16" in r.output


def test_a_draft_budget_covering_every_context_is_named_before_a_real_run():
    """SmolLM2 at the defaults: the 2,048-token draft budget covered the whole context, fixed-k
    reported acceptance 1.000 and nothing said its drafts were not sparse (issue 39, item 4)."""
    (note,) = setting_notes(ServingConfig(policy="fixed-k:k=4"), 8, longest=1800)
    assert note.startswith("drafts are not sparse") and "1,800" in note
    assert setting_notes(ServingConfig(policy="fixed-k:k=4", draft_budget=128), 8, longest=1800) == []
    assert setting_notes(ServingConfig(policy="ar"), 8, longest=1800) == []
    assert setting_notes(ServingConfig(policy="fixed-k:k=4"), 8) == []  # replay: no real drafts to judge


def test_max_draft_is_bounded_before_any_work():
    """`--max-draft 100000` was accepted; entropy then asked numpy for 822 GiB (at 1,000: 103 s, 4 GB)."""
    import pytest

    from spsim.errors import SpsimError

    with pytest.raises(SpsimError, match=r"--max-draft must be in 0\.\.64 \(got 100,000\)"):
        ServingConfig(max_draft=100_000).validate()
    assert ServingConfig(max_draft=64).validate().max_draft == 64
    r = CliRunner().invoke(app, ["replay", "mooncake", "--limit", "3", "-p", "entropy", "--max-draft", "1000"])
    assert isinstance(r.exception, SpsimError) and "--max-draft must be in 0..64" in str(r.exception)
