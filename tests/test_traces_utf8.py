"""Bytes that are not UTF-8: reported at their own line, skipped (and counted) under --skip-invalid.

Before: bad bytes on line 101 of a JSONL file were reported at line 1 (the chunk's start), a CSV
with bad bytes in its first 8 KB gave no line at all, and --skip-invalid aborted the whole file.
"""

from __future__ import annotations

import gzip
from unittest import mock

import pytest

from spsim.errors import InputError
from spsim.traces import read_trace

BAD = [b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\x80abc"]
ROWS = {  # format -> (header or None, row i as bytes)
    "canonical": (None, lambda i: b'{"id": "r%d", "arrival_s": %d, "prompt_tokens": 10, "output_tokens": 2}' % (i, i)),
    "mooncake": (None, lambda i: b'{"timestamp": %d, "input_length": 10, "output_length": 2, "note": "ok"}' % (1000 * i)),
    "azure-2023": (b"TIMESTAMP,ContextTokens,GeneratedTokens",
                   lambda i: b"2023-11-16 18:%02d:%02d.6805900,10,2" % (i // 60, i % 60)),
    "burstgpt": (b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
                 lambda i: b"%d,ChatGPT,10,2,12,Conversation log" % i),
    "vidur": (b"arrived_at,num_prefill_tokens,num_decode_tokens", lambda i: b"%d,10,2" % i),
}


def write(tmp_path, fmt: str, n: int, bad_at: dict[int, bytes], name: str | None = None) -> str:
    """n rows; `bad_at` = {line: bytes inserted in the middle of that line}."""
    head, row = ROWS[fmt]
    lines = ([head] if head else []) + [row(i) for i in range(n)]
    for ln, junk in bad_at.items():
        s = lines[ln - 1]
        lines[ln - 1] = s[: len(s) // 2] + junk + s[len(s) // 2:]
    p = tmp_path / (name or ("t.jsonl" if head is None else "t.csv"))
    data = b"\n".join(lines) + b"\n"
    p.write_bytes(gzip.compress(data) if p.name.endswith(".gz") else data)
    return str(p)


@pytest.mark.parametrize("fmt", list(ROWS))
@pytest.mark.parametrize("line", [3, 101, 150])
@pytest.mark.parametrize("junk", BAD)
def test_bad_bytes_name_their_line_and_skip_only_that_row(tmp_path, fmt, line, junk):
    path = write(tmp_path, fmt, 150, {line: junk})
    with pytest.raises(InputError) as e:
        read_trace(path, format=fmt)
    assert (e.value.line, e.value.problem) == (line, "not UTF-8 text"), str(e.value)
    t = read_trace(path, format=fmt, skip_invalid=True)
    assert t.skipped == {"not UTF-8 text": 1}
    assert len(t) == 149
    if fmt != "canonical":  # ids are line numbers: only the bad line is missing
        assert str(line) not in t.ids.tolist() and str(line - 1) in t.ids.tolist()


@pytest.mark.parametrize("fmt", ["canonical", "vidur"])
def test_small_chunks_and_gzip(tmp_path, fmt):
    path = write(tmp_path, fmt, 40, {7: b"\xff", 23: b"\xfe"}, name=f"t.{'jsonl' if fmt == 'canonical' else 'csv'}.gz")
    with mock.patch("spsim.traces.jsonl.CHUNK_ROWS", 5), mock.patch("spsim.traces.csvfile.BLOCK_BYTES", 64):
        with pytest.raises(InputError, match=r"\.gz:7: not UTF-8 text"):
            read_trace(path)
        t = read_trace(path, skip_invalid=True)
    assert len(t) == 38 and t.skipped == {"not UTF-8 text": 2}


def test_bad_header_and_truncated_last_line(tmp_path):
    path = write(tmp_path, "vidur", 5, {1: b"\xff"})
    with pytest.raises(InputError) as e:
        read_trace(path, format="vidur", skip_invalid=True)  # a header cannot be skipped
    assert e.value.line == 1 and "UTF-8" in e.value.problem
    p = tmp_path / "trunc.csv"  # a multi-byte character cut off at the end of the file
    p.write_bytes(b"arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n1,2,2\xc3")
    with pytest.raises(InputError, match=r"trunc.csv:3: not UTF-8 text"):
        read_trace(p)
    assert len(read_trace(p, skip_invalid=True)) == 1


def test_unknown_extension_with_bad_bytes_is_still_detected(tmp_path):
    path = write(tmp_path, "vidur", 20, {12: b"\xff"}, name="t.txt")
    with pytest.raises(InputError, match=r"t.txt:12: not UTF-8 text"):
        read_trace(path)
    assert read_trace(path, skip_invalid=True).meta["source_format"] == "vidur"


def test_corrupt_gzip_is_one_line_error(tmp_path):
    for name in ("t.csv.gz", "t.jsonl.gz", "t.gz"):
        p = tmp_path / name
        p.write_bytes(b"this is not gzip data at all")
        with pytest.raises(InputError, match="cannot read"):
            read_trace(p)
    p = tmp_path / "cut.csv.gz"  # a gzip stream cut short
    whole = gzip.compress(b"arrived_at,num_prefill_tokens,num_decode_tokens\n" + b"".join(b"%d,%d,1\n" % (i, i) for i in range(9000)))
    p.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match="cannot read"):
        read_trace(p)


def test_duplicate_csv_column_names_are_an_error(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens,x,x\n0,1,1,1,1\n")
    with pytest.raises(InputError, match=r"d.csv:1: x: duplicate column name"):
        read_trace(p)
