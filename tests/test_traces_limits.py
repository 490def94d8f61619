"""Values no real trace holds, in every reader: huge counts and times, NaN and infinity.

A length of 1e20 used to wrap to -9223372036854775808 (int64) with only a numpy warning and exit 0;
now it is `FILE:LINE: field: too large (max ...)`, or a counted skip under --skip-invalid.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from spsim.errors import InputError
from spsim.traces import read_trace
from spsim.traces.limits import MAX_TOKENS

TOO_LARGE = f"too large (max {MAX_TOKENS:,})"
# format -> (header line or None, time column, prompt column, output column, a valid time per row)
FORMATS = {
    "canonical": (None, "arrival_s", "prompt_tokens", "output_tokens", lambda i: str(i)),
    "mooncake": (None, "timestamp", "input_length", "output_length", lambda i: str(1000 * i)),
    "azure-2023": ("TIMESTAMP,ContextTokens,GeneratedTokens", "TIMESTAMP", "ContextTokens", "GeneratedTokens",
                   lambda i: f"2023-11-16 18:15:{10 + i}.6805900"),
    "azure-2024": ("TIMESTAMP,ContextTokens,GeneratedTokens", "TIMESTAMP", "ContextTokens", "GeneratedTokens",
                   lambda i: f"2024-05-10 00:00:{10 + i}.00943+00:00"),
    "burstgpt": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type", "Timestamp",
                 "Request tokens", "Response tokens", lambda i: str(i)),
    "vidur": ("arrived_at,num_prefill_tokens,num_decode_tokens", "arrived_at", "num_prefill_tokens",
              "num_decode_tokens", lambda i: str(0.5 * i)),
}
JSON_SPELLING = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def line_text(fmt: str, i: int, t: str, p: str, o: str) -> str:
    """One row with raw cell texts (numbers spelled as in the file)."""
    head, tcol, pcol, ocol, _ = FORMATS[fmt]
    if head is None:
        j = lambda x: JSON_SPELLING.get(x, x)  # noqa: E731
        ident = f'"id": "r{i}", ' if fmt == "canonical" else ""
        return "{" + f'{ident}"{tcol}": {j(t)}, "{pcol}": {j(p)}, "{ocol}": {j(o)}' + "}"
    if fmt == "burstgpt":
        return f"{t},ChatGPT,{p},{o},0,Conversation log"
    return f"{t},{p},{o}"


def write(tmp_path, fmt: str, rows: list[tuple[str | None, str, str]]) -> tuple[str, list[int]]:
    """File with the given (time or None for a valid one, prompt, output) rows; their line numbers."""
    head = FORMATS[fmt][0]
    lines = [head] if head else []
    where = []
    for i, (t, p, o) in enumerate(rows):
        where.append(len(lines) + 1)
        lines.append(line_text(fmt, i, FORMATS[fmt][4](i) if t is None else t, p, o))
    path = tmp_path / ("t.jsonl" if head is None else "t.csv")
    path.write_text("\n".join(lines) + "\n")
    return str(path), where


def read(path, fmt, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy cast warning is a failure, not a diagnostic
        return read_trace(path, format=fmt, **kw)


HUGE = ["1e20", "1e30", "9223372036854775807", "9223372036854775808", "18446744073709551616",
        "99999999999999999999999", str(2**31)]


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("which", [2, 3])
def test_huge_counts_are_errors_naming_line_and_field(tmp_path, fmt, value, which):
    cells = [None, "100", "10"]
    cells[which - 1] = value
    path, where = write(tmp_path, fmt, [(None, "100", "10"), tuple(cells), (None, "100", "10")])
    with pytest.raises(InputError) as e:
        read(path, fmt)
    assert (e.value.line, e.value.field, e.value.problem) == (where[1], FORMATS[fmt][which], TOO_LARGE)
    t = read(path, fmt, skip_invalid=True)
    assert len(t) == 2 and t.skipped == {f"{FORMATS[fmt][which]}: {TOO_LARGE}": 1}
    assert (t.prompt_tokens == 100).all() and (t.output_tokens == 10).all()


def test_the_largest_allowed_count_is_read_exactly(tmp_path):
    path, _ = write(tmp_path, "vidur", [(None, str(MAX_TOKENS), str(MAX_TOKENS))])
    t = read(path, "vidur")
    assert t.prompt_tokens.tolist() == [MAX_TOKENS] == t.output_tokens.tolist()


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_non_finite_counts_name_the_field(tmp_path, fmt, value):
    path, where = write(tmp_path, fmt, [(None, "100", "10"), (None, value, "10")])
    with pytest.raises(InputError) as e:
        read(path, fmt)
    assert (e.value.line, e.value.field) == (where[1], FORMATS[fmt][2])
    assert e.value.problem in ("not finite", "not a number", "negative")


@pytest.mark.parametrize("fmt", ["canonical", "mooncake", "burstgpt", "vidur"])
@pytest.mark.parametrize("value,problem", [
    ("1e300", "too large"), ("1e20", "too large"), ("-1e300", None), ("nan", None), ("inf", "not finite"),
    ("1e400", "not finite")])
def test_arrival_times_must_be_finite_and_bounded(tmp_path, fmt, value, problem):
    path, where = write(tmp_path, fmt, [(None, "100", "10"), (value, "100", "10")])
    with pytest.raises(InputError) as e:
        read(path, fmt)
    assert (e.value.line, e.value.field) == (where[1], FORMATS[fmt][1])
    if problem:
        assert e.value.problem.startswith(problem)


def test_json_integers_beyond_float_and_int64(tmp_path):
    """Python's json gives exact big ints; they must not overflow the float/int64 columns."""
    big = "1" + "0" * 400
    rows = [
        ('{"timestamp": 0, "input_length": %s, "output_length": 1}' % big, "input_length", "too large"),
        ('{"timestamp": %s, "input_length": 5, "output_length": 1}' % big, "timestamp", "too large"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [%s]}' % big, "hash_ids", "block id too large"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [9223372036854775808]}', "hash_ids", "block id too large"),
        ('{"timestamp": 0, "input_length": 5, "output_length": -%s}' % big, "output_length", "negative"),
    ]
    for text, field, problem in rows:
        p = tmp_path / "m.jsonl"
        p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n' + text + "\n")
        with pytest.raises(InputError) as e:
            read(p, "mooncake")
        assert (e.value.line, e.value.field) == (2, field) and e.value.problem.startswith(problem), str(e.value)
    p = tmp_path / "c.jsonl"
    p.write_text('{"id": "a", "arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "slo": {"ttft_s": %s}}\n' % big)
    with pytest.raises(InputError, match=r":1: slo.ttft_s: too large"):
        read(p, "canonical")


def test_big_extra_values_are_kept_exactly(tmp_path):
    """Extra columns: integers past int64 are not wrapped (uint64 -1) nor rounded through float."""
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "1,18446744073709551615,0.5,ChatGPT,5,5,10,Conversation log\n")
    t = read(p, "burstgpt")
    assert str(t.extra["Session ID"][0]) == "18446744073709551615"
    m = tmp_path / "m.jsonl"
    m.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "user": 123456789012345678901234567890}\n')
    assert int(read(m, "mooncake").extra["user"][0]) == 123456789012345678901234567890


def test_cli_convert_rejects_with_exit_2_and_writes_nothing(tmp_path):
    src = tmp_path / "v.csv"
    src.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,1\n1,1e20,1\n2,10,1\n")
    dst = tmp_path / "out.jsonl"
    r = subprocess.run([sys.executable, "-m", "spsim.cli", "trace", "convert", str(src), str(dst)],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"error: {src}:3: num_prefill_tokens: {TOO_LARGE}"
    assert not dst.exists()
    r = subprocess.run([sys.executable, "-m", "spsim.cli", "trace", "convert", str(src), str(dst), "--skip-invalid"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and f"skipped 1 row: 1 num_prefill_tokens: {TOO_LARGE}" in r.stderr
    rows = [json.loads(x) for x in dst.read_text().splitlines()[1:]]
    assert [x["prompt_tokens"] for x in rows] == [10, 10]


def test_azure_timestamps_too_far_apart_for_int64_nanoseconds(tmp_path):
    p = tmp_path / "az.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1700-01-01 00:00:00,1,1\n2250-01-01 00:00:00,1,1\n")
    with pytest.raises(InputError, match=r"az.csv:3: TIMESTAMP: too far from the first row's time"):
        read(p, "azure")
    assert len(read(p, "azure", skip_invalid=True)) == 1
