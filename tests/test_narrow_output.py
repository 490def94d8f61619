"""Output piped or at 80 columns (issue 39, item 6): no header or figure cut with an ellipsis, and
the best figure marked without relying on colour."""

from __future__ import annotations

from typer.testing import CliRunner

from spsim.cli import app

runner = CliRunner()
NARROW = {"COLUMNS": "80", "NO_COLOR": "1"}


def test_models_at_80_columns_cuts_nothing():
    r = runner.invoke(app, ["models"], env=NARROW)
    assert r.exit_code == 0, r.output
    assert "…" not in r.output and r.output.count("131,072") == 6 and "smollm2-135m" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80


def test_compare_at_80_columns_cuts_nothing_and_marks_the_best_in_plain_text():
    r = runner.invoke(app, ["compare", "mooncake", "--limit", "8", "-P", "ar,sync:k=4,fixed-k:k=8,aspire,oracle",
                            "--acceptance", "sparsespec-llama8b", "--cost", "roofline"], env=NARROW)
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout, r.stdout
    for word in ("fixed-k:k=8", "(clairvoyant", "reference)", "tok/verify", "prefill GPU share"):
        assert word in r.stdout, word
    assert "in green" not in r.stdout and "* best figure" in r.stdout
    rows = [line for line in r.stdout.splitlines() if line.startswith("│ ") and "│" in line[2:]]
    starred = [line for line in rows if "*" in line]
    assert len(starred) >= 10  # one best per figure: on its value's line
    assert all(line.split("│")[-2].strip()[:1] != "*" for line in starred)  # oracle: never marked best
