"""Every reader against hostile input: extreme and non-finite values, bad bytes at random lines,
NUL bytes, CRLF, blank and empty files.

Whatever the input: only `InputError` escapes (one line, naming the file), no numpy warning, a
bounded time, and no silent drop: every data row is either in the trace or counted in `skipped`
(an `EmptyTrace` error counts them too). `--skip-invalid` never stops at a row.
"""

from __future__ import annotations

import json
import signal
import warnings
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spsim.errors import InputError
from spsim.traces import read_trace, write_trace
from spsim.traces.limits import MAX_TOKENS
from spsim.traces.report import EmptyTrace

BIG = "1" + "0" * 400
COUNTS = ["1", "7", "5000", "0", "-1", "2.5", str(MAX_TOKENS), str(MAX_TOKENS + 1), "1e20", "1e30",
          "9223372036854775807", "9223372036854775808", "18446744073709551616", BIG, "-" + BIG,
          "nan", "inf", "-inf", "1e400", "1e-300", "abc", ""]
TIMES = ["0", "-5", "1e20", "1e300", "-1e300", "nan", "inf", "-inf", "1e400", BIG, "abc", ""]
AZURE_TIMES = ["", "garbage", "nan", "9999-12-31 00:00:00", "1600-01-01 00:00:00", "2023-13-45 99:99:99",
               "2023-11-16 18:15:46.6805900+99:00"]
EXTRAS = ["x", "", "18446744073709551615", "-9223372036854775809", "1e400", "nan", "-1", BIG]
JUNK = [b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf0\x9f", b"\x80", b"\x00", b"\xef\xbb\xbf"]
JSON_ONLY = ["1" * 5000, "[" * 3000 + "]" * 3000, "true", "[1]", "{}", "null"]

CSV = {
    "azure-2023": ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
    "azure-2024": ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
    "burstgpt": ["Timestamp", "Session ID", "Elapsed time", "Model", "Request tokens", "Response tokens",
                 "Total tokens", "Log Type"],
    "burstgpt6": ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"],
    "vidur": ["arrived_at", "num_prefill_tokens", "num_decode_tokens", "pd_ratio"],
}
READER = {"burstgpt6": "burstgpt"}
FORMATS = ["canonical", "mooncake", *CSV]


def valid_time(fmt: str, i: int) -> str:
    if fmt.startswith("azure"):
        return f"2023-11-16 18:{i // 60:02d}:{i % 60:02d}.6805900" + ("+00:00" if fmt == "azure-2024" else "")
    return str(1000 * i if fmt == "mooncake" else 0.5 * i)


def json_value(text: str) -> str:
    """A cell text as JSON source: numbers as written, NaN/Infinity as Python's json spells them."""
    spelled = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "": "null", "abc": '"abc"', "x": '"x"'}
    return spelled.get(text, text)


@st.composite
def cell(draw, kind: str, fmt: str, i: int, hostile: bool):
    """A cell: valid in a friendly row, else often extreme."""
    if not hostile or draw(st.integers(0, 2)) == 0:
        return valid_time(fmt, i) if kind == "time" else str(draw(st.integers(1, 3000)))
    pool = {"time": AZURE_TIMES if fmt.startswith("azure") else TIMES, "count": COUNTS, "extra": EXTRAS}[kind]
    if fmt in ("canonical", "mooncake"):
        pool = pool + JSON_ONLY
    return draw(st.sampled_from(pool))


@st.composite
def row(draw, fmt: str, i: int) -> str:
    hostile = draw(st.integers(0, 2)) == 0
    odd = lambda options: draw(st.sampled_from(options)) if hostile else options[0]  # noqa: E731
    extra = draw(cell("extra", fmt, i, hostile))
    t, p, o = (draw(cell(k, fmt, i, hostile)) for k in ("time", "count", "count"))
    if fmt == "mooncake":
        ids = odd([None, "[]", "[0, 1]", "[9223372036854775808]", "[-1]", "[1.5]", '"x"', f"[{BIG}]",
                   json.dumps(list(range(300)))])
        more = "" if ids is None else f', "hash_ids": {ids}'
        return (f'{{"timestamp": {json_value(t)}, "input_length": {json_value(p)}, '
                f'"output_length": {json_value(o)}{more}, "x": {json_value(extra)}}}')
    if fmt == "canonical":
        slo = odd(["", ', "slo": {"ttft_s": 2}', ', "slo": {"ttft_s": 1e400}', ', "slo": {"ttft_s": NaN}',
                   f', "slo": {{"tpot_s": {BIG}}}', ', "slo": 5'])
        pre = odd(["", ', "prefix_blocks": [1, 2]', ', "prefix_blocks": [9223372036854775807]',
                   f', "prefix_blocks": [{BIG}]', f', "prefix_blocks": {list(range(200))}'])
        return (f'{{"id": "r{i}", "arrival_s": {json_value(t)}, "prompt_tokens": {json_value(p)}, '
                f'"output_tokens": {json_value(o)}{slo}{pre}, "extra": {{"x": {json_value(extra)}}}}}')
    cols = CSV[fmt]
    cells = {c: draw(cell("extra", fmt, i, hostile)) for c in cols}
    cells[cols[0]] = t
    for c in ("ContextTokens", "Request tokens", "num_prefill_tokens"):
        cells[c] = p
    for c in ("GeneratedTokens", "Response tokens", "num_decode_tokens"):
        cells[c] = o
    return ",".join(cells[c].replace(",", ";") for c in cols)


def _is_header(line: bytes) -> bool:
    try:
        obj = json.loads(line.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(obj, dict) and "spsim_trace" in obj


@st.composite
def trace_file(draw, fmt: str) -> tuple[bytes, int, int | None]:
    """File bytes, the number of data rows in it, and the header's line (None: none)."""
    n = draw(st.integers(0, 12))
    lines = [draw(row(fmt, i)).encode("utf-8") for i in range(n)]
    head = None
    if fmt in CSV:
        head = ",".join(CSV[fmt]).encode()
    elif fmt == "canonical" and draw(st.booleans()):
        head = json.dumps({"spsim_trace": 1, "source_format": "fuzz", "block_size": 16}).encode()
    if head is not None:
        lines.insert(0, head)
    broken = set()
    for ln in draw(st.lists(st.integers(0, max(len(lines) - 1, 0)), max_size=3)):
        if lines:
            junk = draw(st.sampled_from(JUNK))
            at = draw(st.integers(0, len(lines[ln])))
            lines[ln] = lines[ln][:at] + junk + lines[ln][at:]
            broken.add(ln)
    # a broken header is a bad row. Whether junk broke it is decided as a reader would: a BOM at
    # the very start of the file is the signature readers strip, and one inside a JSON string (or
    # any junk that leaves valid UTF-8 JSON with the header's key) leaves a header
    header_is_row = fmt == "canonical" and head is not None and 0 in broken and not _is_header(lines[0])
    for at in sorted(draw(st.lists(st.integers(1, len(lines) + 1), max_size=3)), reverse=True):
        lines.insert(min(at, len(lines)), draw(st.sampled_from([b"", b"  ", b"\t"])))  # blank: not a row
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = eol.join(lines) + (eol if draw(st.booleans()) else b"")
    if n == 0 and head is None:
        data = draw(st.sampled_from([b"", b"\n\n", data]))
    rows = n + int(header_is_row)
    head_line = None if head is None or header_is_row else 1 + next(i for i, x in enumerate(lines) if x.strip())
    return data, rows, head_line


@contextmanager
def bounded(seconds: float):
    """Fail instead of hanging: SIGALRM after `seconds`."""
    def expire(*_):
        raise TimeoutError(f"read took more than {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def attempt(path, fmt, skip):
    with bounded(10), warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy cast or pandas warnings are failures too
        try:
            return read_trace(path, format=READER.get(fmt, fmt), skip_invalid=skip)
        except InputError as e:
            return e


def check_trace(t, rows: int):
    assert len(t) >= 1
    assert len(t) + sum(t.skipped.values()) == rows, (len(t), t.skipped, rows)
    assert ((t.prompt_tokens >= 1) & (t.prompt_tokens <= MAX_TOKENS)).all()
    assert ((t.output_tokens >= 1) & (t.output_tokens <= MAX_TOKENS)).all()
    assert np.isfinite(t.arrival_s).all() and t.arrival_s[0] == 0 and (np.diff(t.arrival_s) >= 0).all()
    assert len(set(t.ids.tolist())) == len(t)
    assert sum(t.warnings.values()) <= len(t)


def check_error(e: InputError, path: str, rows: int, head_line: int | None, skip: bool):
    msg = str(e)
    assert "\n" not in msg and msg.startswith(path), msg
    if isinstance(e, EmptyTrace):
        assert sum(e.skipped.values()) == rows, (msg, rows)
    elif skip:  # skipping stops only at file-level problems, never at a row
        assert e.line is None or e.line == head_line, msg


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                                     HealthCheck.too_slow])
@given(data=st.data())
def test_no_traceback_no_hang_no_silent_drop(tmp_path, fmt, data):
    raw, rows, head_line = data.draw(trace_file(fmt))
    path = tmp_path / f"t.{'jsonl' if fmt in ('canonical', 'mooncake') else 'csv'}"
    path.write_bytes(raw)
    small = data.draw(st.sampled_from([None, 1, 3]))
    with mock.patch("spsim.traces.jsonl.CHUNK_ROWS", small or 200_000), \
            mock.patch("spsim.traces.csvfile.BLOCK_BYTES", 50 * small if small else 16 << 20):
        strict, lenient = attempt(str(path), fmt, False), attempt(str(path), fmt, True)
    for got, skip in ((strict, False), (lenient, True)):
        event(f"{'skip' if skip else 'strict'}: " + (type(got).__name__ if isinstance(got, InputError) else "read"))
        if isinstance(got, InputError):
            check_error(got, str(path), rows, head_line, skip)
        else:
            check_trace(got, rows)
    if not isinstance(strict, InputError):  # what error mode accepts, skip mode reads the same way
        assert not isinstance(lenient, InputError) and strict.ids.tolist() == lenient.ids.tolist()
    if not isinstance(lenient, InputError):  # and it converts: no negative or wrapped numbers written
        write_trace(lenient, tmp_path / "c.jsonl")
        back = attempt(str(tmp_path / "c.jsonl"), "canonical", False)
        assert not isinstance(back, InputError), str(back)
        assert back.prompt_tokens.tolist() == lenient.prompt_tokens.tolist()
        assert back.skipped == lenient.skipped and back.warnings == lenient.warnings
