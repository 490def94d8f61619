"""What a new user meets on bad input: the error names the file, line, column or parameter the
user can act on, in words (no Python internals), with a non-zero exit."""

from __future__ import annotations

import pytest

from spsim.errors import InputError, SpecError
from spsim.spec import build
from spsim.traces import read_trace
from traces.lengths import Fixed, Lognormal


def test_malformed_json_names_the_column_where_the_line_breaks_off(tmp_path):
    # the break-off is at the end of line 2 (column 35), not at "column 1" of the next
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5\n')
    with pytest.raises(InputError, match=r"t\.jsonl:2: malformed JSON: Expecting ',' delimiter at column 35$"):
        read_trace(str(p))


@pytest.mark.parametrize("cls, name, params, words", [
    (Fixed, "fixed", {}, "fixed: missing parameter value (expected fixed:value=...)"),
    (Lognormal, "lognormal", {"median": 100}, "lognormal: missing parameter sigma (expected lognormal:median=...,sigma=...)"),
])
def test_a_spec_missing_a_required_parameter_says_which(cls, name, params, words):
    with pytest.raises(SpecError) as e:
        build(cls, name, params)
    assert str(e.value) == words and "__init__" not in str(e.value)


@pytest.mark.parametrize("args, words", [
    (["-n", "0"], "-n must be >= 1 (got 0)"),
    (["--qps", "0"], "--qps must be a finite number > 0 (got 0.0)"),
    (["--qps", "nan"], "--qps must be a finite number > 0 (got nan)"),
    (["--arrival", "gamma", "--cv", "0"], "--cv must be a finite number > 0 (got 0.0)"),
    (["--slo-ttft", "-1"], "--slo-ttft must be a finite number > 0 (got -1.0)"),  # wrote a trace no reader takes
    (["--slo-tpot", "inf"], "--slo-tpot must be a finite number > 0 (got inf)"),
])
def test_trace_gen_names_the_option_out_of_range(tmp_path, args, words):
    from typer.testing import CliRunner

    from spsim.cli import app

    out = tmp_path / "t.jsonl"
    r = CliRunner().invoke(app, ["trace", "gen", str(out), "-n", "3", *args])
    assert isinstance(r.exception, SpecError) and str(r.exception) == words and not out.exists()


def test_a_csv_trace_named_jsonl_says_so(tmp_path):
    p = tmp_path / "az.jsonl"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n")
    with pytest.raises(InputError, match=r"az\.jsonl:1: a CSV trace \(azure header\) in a file named as JSON lines: "
                                         r"rename it \.csv or pass --format azure$"):
        read_trace(str(p))
    assert len(read_trace(str(p), format="azure")) == 1


def test_record_files_share_one_reader_naming_line_and_column(tmp_path):
    """Accept events, calibration points and measurements read through `spsim.jsonlines`."""
    from spsim.calibration.trace_points import read_points
    from spsim.events import read_events

    p = tmp_path / "r.jsonl"
    p.write_text('\n{"a": 2\n')
    for read in (read_events, read_points):
        with pytest.raises(InputError, match=r"r\.jsonl:2: not JSON \(Expecting ',' delimiter at column 8\)$"):
            read(p)
    p.write_text("[1]\n")
    for read in (read_events, read_points):
        with pytest.raises(InputError, match=r"r\.jsonl:1: expected a JSON object$"):
            read(p)
