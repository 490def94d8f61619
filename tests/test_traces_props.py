"""Property tests: broken and valid traces in every format.

A small reference validator (a plain loop, independent of the vectorised readers) says which row is
the first bad one and why; the readers must raise exactly there (error mode) or skip exactly those
rows with the same counts by reason (skip mode), and keep every field of the rest. Converting to
canonical and back must keep every field too.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spsim.errors import InputError
from spsim.traces import read_trace, write_trace

FIELDS = {  # time, prompt, output column names per format
    "canonical": ("arrival_s", "prompt_tokens", "output_tokens"),
    "mooncake": ("timestamp", "input_length", "output_length"),
    "azure-2023": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "azure-2024": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt8": ("Timestamp", "Request tokens", "Response tokens"),
    "burstgpt6": ("Timestamp", "Request tokens", "Response tokens"),
    "vidur": ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
}
EXT = {"canonical": "jsonl", "mooncake": "jsonl"}
BASE = dt.datetime(2024, 5, 10, 0, 0, 0)
T0_MS = 5_000_000  # rows start here, so "unsorted" can go earlier without going negative
AZURE_NAN = "not a timestamp (expected e.g. 2023-11-16 18:15:46.6805900)"
FAILED = "failed request (Response tokens = 0)"

# corruption kinds -> which column they hit and the problem the reader must report
TOKEN_KINDS = {"missing": "missing", "negative": "negative", "nan": "not a number",
               "zero": "must be > 0", "fraction": "not a whole number"}
TIME_KINDS = {"missing": "missing", "nan": "not a number", "unsorted": None}


@st.composite
def rows(draw, fmt):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    t = (T0_MS + np.cumsum(gaps)).tolist()
    out = []
    for i in range(n):
        r = {"t": t[i], "p": draw(st.integers(1, 200_000)), "o": draw(st.integers(1, 5000))}
        if fmt == "canonical":
            r["prefix"] = draw(st.lists(st.integers(0, 50), max_size=6))
        if fmt == "mooncake":  # one hash per 512-token block, as Mooncake writes them (prefixcheck.py)
            start = draw(st.integers(0, 50))
            r["prefix"] = list(range(start, start - (-r["p"] // 512)))
        if fmt == "canonical":
            r["slo"] = draw(st.sampled_from([None, {"ttft_s": 1.5}, {"ttft_s": 2.0, "tpot_s": 0.05}]))
            r["extra"] = {"user": draw(st.sampled_from(["a", "b"])), "turn": i}
        if fmt == "mooncake":
            r["extra"] = {"session": i % 3}
        if fmt.startswith("burstgpt"):
            r["extra"] = {"Model": draw(st.sampled_from(["ChatGPT", "GPT-4"])), "Log Type": "Conversation log"}
            if fmt == "burstgpt8":
                r["extra"].update({"Session ID": i % 4, "Elapsed time": i * 0.5})
        if fmt == "vidur":
            r["extra"] = {"pd_ratio": 1.25}
        out.append(r)
    return out


@st.composite
def broken(draw, fmt):
    rs = draw(rows(fmt))
    kinds = [("time", k) for k in TIME_KINDS] + [(c, k) for c in ("prompt", "output") for k in TOKEN_KINDS]
    kinds.append(("line", "malformed"))
    if fmt == "canonical":
        kinds += [("time", "negative"), ("id", "missing")]
    hits = draw(st.lists(st.tuples(st.integers(0, len(rs) - 1), st.sampled_from(kinds)), max_size=4,
                         unique_by=lambda h: h[0]))
    for i, kind in hits:
        rs[i]["bad"] = kind
    blank = draw(st.lists(st.integers(0, len(rs)), max_size=2))  # blank lines before these rows
    header = draw(st.booleans()) if fmt == "canonical" else False
    return rs, set(blank), header


def eff_t(r: dict) -> int:
    """The time actually written for row r ("unsorted" rows go back to 0 ms)."""
    return 0 if r.get("bad") == ("time", "unsorted") else r["t"]


def _ts(ms: int, fmt: str) -> str:
    t = BASE + dt.timedelta(milliseconds=ms)
    s = t.strftime("%Y-%m-%d %H:%M:%S.%f") + "0"  # 7 fractional digits, as Azure writes them
    if fmt == "azure-2024":  # timezone, and mixed precision: trailing zeros dropped
        s = s.rstrip("0").rstrip(".") + "+00:00"
    return s


def serialize(fmt: str, rs: list[dict], blank: set, header: bool, final_newline: bool = True) -> tuple[str, list[int]]:
    """File text and the line number of each row."""
    tcol, pcol, ocol = FIELDS[fmt]
    lines, where = [], []
    csv_cols = None
    if fmt == "canonical" and header:
        lines.append(json.dumps({"spsim_trace": 1, "source_format": "canonical"}))
    if fmt.startswith("azure") or fmt == "vidur" or fmt.startswith("burstgpt"):
        extra_cols = list(rs[0].get("extra", {}))
        csv_cols = [tcol, pcol, ocol] + extra_cols
        if fmt == "burstgpt8":
            csv_cols = ["Timestamp", "Session ID", "Elapsed time", "Model", "Request tokens", "Response tokens",
                        "Total tokens", "Log Type"]
        if fmt == "burstgpt6":
            csv_cols = ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]
        lines.append(",".join(csv_cols))
    for i, r in enumerate(rs):
        if i in blank:
            lines.append("")
        col, kind = r.get("bad", (None, None))
        if fmt in ("canonical", "mooncake"):
            if fmt == "canonical":
                d = {"id": f"r{i}", tcol: r["t"] / 1000, pcol: r["p"], ocol: r["o"], "prefix_blocks": r["prefix"]}
                if r["slo"]:
                    d["slo"] = r["slo"]
                d["extra"] = r["extra"]
            else:
                d = {tcol: r["t"], pcol: r["p"], ocol: r["o"], "hash_ids": r["prefix"], **r["extra"]}
            key = {"time": tcol, "prompt": pcol, "output": ocol, "id": "id"}.get(col)
            val = {"negative": -5, "nan": "abc", "zero": 0, "fraction": 2.5, "unsorted": 0}.get(kind)
            if kind == "missing":
                del d[key]
            elif kind == "negative" and col == "time":
                d[key] = -1.0
            elif kind is not None and kind != "malformed":
                d[key] = val
            text = '{"broken": ' if kind == "malformed" else json.dumps(d)
        else:
            cells = {tcol: _ts(r["t"], fmt) if fmt.startswith("azure") else str(r["t"] / 1000),
                     pcol: str(r["p"]), ocol: str(r["o"]), **{k: str(v) for k, v in r.get("extra", {}).items()}}
            if fmt.startswith("burstgpt"):
                cells["Total tokens"] = str(r["p"] + r["o"])
            key = {"time": tcol, "prompt": pcol, "output": ocol}.get(col)
            if kind == "unsorted":
                cells[key] = _ts(0, fmt) if fmt.startswith("azure") else "0.0"
            elif kind is not None and kind != "malformed":
                cells[key] = {"missing": "", "negative": "-5", "nan": "abc", "zero": "0", "fraction": "2.5"}[kind]
            text = ",".join(cells[c] for c in csv_cols) + (",1" if kind == "malformed" else "")
        where.append(len(lines) + 1)
        lines.append(text)
    return "\n".join(lines) + ("\n" if final_newline else ""), where


def reference(fmt: str, rs: list[dict]) -> list[tuple[int, str | None, str | None]]:
    """Per row: (status, field, problem) with status 0 keep, 1 error, 2 always-skip (BurstGPT failure)."""
    tcol, pcol, ocol = FIELDS[fmt]
    names = {"time": tcol, "prompt": pcol, "output": ocol, "id": "id"}
    out, latest = [], -np.inf
    for r in rs:
        col, kind = r.get("bad", (None, None))
        t = eff_t(r)
        if kind == "malformed":
            out.append((1, None, "malformed"))
            continue
        if fmt.startswith("burstgpt") and col == "output" and kind == "zero":
            out.append((2, None, FAILED))
            continue
        if kind is not None and kind != "unsorted":
            problem = TIME_KINDS[kind] if col == "time" and kind != "negative" else TOKEN_KINDS.get(kind, kind)
            if col == "time" and kind == "nan" and fmt.startswith("azure"):
                problem = AZURE_NAN
            out.append((1, names[col], problem))
            continue
        if t < latest:
            out.append((1, tcol, "timestamp"))
            continue
        latest = t
        out.append((0, None, None))
    return out


def _norm(reason: str) -> str:
    return "malformed" if reason.startswith("malformed") else reason


def _write(tmp_path, fmt, text):
    p = tmp_path / f"t.{EXT.get(fmt, 'csv')}"
    p.write_text(text)
    return str(p)


def _check_fields(fmt, trace, rs, kept):
    """Every field of the kept rows, as the reader should have produced them."""
    good = [rs[i] for i in kept]
    t = np.array([eff_t(r) for r in good], float)
    assert np.allclose(trace.arrival_s, (t - t[0]) / 1000, atol=1e-6)
    assert trace.prompt_tokens.tolist() == [r["p"] for r in good]
    assert trace.output_tokens.tolist() == [r["o"] for r in good]
    if "prefix" in good[0]:
        assert [trace.prefix_blocks(i).tolist() for i in range(len(good))] == [r["prefix"] for r in good]
    for k in good[0].get("extra", {}):
        if not (fmt.startswith("burstgpt") and k == "Total tokens"):
            assert trace.extra[k].tolist() == [r["extra"][k] for r in good], k
    if fmt == "canonical":
        assert trace.ids.tolist() == [f"r{i}" for i in kept]
        ttft = [np.nan if not r["slo"] else r["slo"].get("ttft_s", np.nan) for r in good]
        if any(r["slo"] for r in rs):
            np.testing.assert_array_equal(trace.slo_ttft_s, ttft)


@pytest.mark.parametrize("fmt", list(FIELDS))
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_errors_and_skips_match_reference(tmp_path, fmt, data):
    rs, blank, header = data.draw(broken(fmt))
    text, where = serialize(fmt, rs, blank, header, data.draw(st.booleans()))
    path = _write(tmp_path, fmt, text)
    # small chunks, so rows, errors and the sort order cross chunk boundaries
    small = data.draw(st.sampled_from([None, 1, 3]))
    with mock.patch("spsim.traces.jsonl.CHUNK_ROWS", small or 200_000), \
            mock.patch("spsim.traces.csvfile.BLOCK_BYTES", 40 * small if small else 16 << 20):
        _errors_and_skips(fmt, rs, where, path)


def _errors_and_skips(fmt, rs, where, path):
    ref = reference(fmt, rs)
    errors = [(where[i], f, p) for i, (s, f, p) in enumerate(ref) if s == 1]
    kept = [i for i, (s, _, _) in enumerate(ref) if s == 0]

    # error mode: stops at the first bad line, naming it and the field
    if errors:
        with pytest.raises(InputError) as e:
            read_trace(path)
        line, field, problem = errors[0]
        assert (e.value.line, e.value.field) == (line, field), str(e.value)
        assert e.value.problem.startswith(problem)
        assert str(e.value).startswith(f"{path}:{line}: ")
    elif kept:
        _check_fields(fmt, read_trace(path), rs, kept)

    # skip mode: exactly the bad rows go, counted by reason
    if not kept:
        return
    t = read_trace(path, skip_invalid=True)
    want = Counter()
    for s, f, p in ref:
        if s == 2:
            want[p] += 1
        elif s == 1:
            want["malformed" if p == "malformed" else f"{f}: {p}"] += 1
    got = Counter({_norm(k): v for k, v in t.skipped.items()})
    got = Counter({(k.split(":")[0] + ": timestamp" if "earlier than a previous" in k else k): v for k, v in got.items()})
    assert got == want
    assert len(t) == len(kept)
    _check_fields(fmt, t, rs, kept)


@pytest.mark.parametrize("fmt", list(FIELDS))
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_round_trip_through_canonical_keeps_every_field(tmp_path, fmt, data):
    rs = data.draw(rows(fmt))
    text, _ = serialize(fmt, rs, set(), data.draw(st.booleans()))
    a = read_trace(_write(tmp_path, fmt, text))
    write_trace(a, tmp_path / "c1.jsonl")
    b = read_trace(tmp_path / "c1.jsonl")
    assert_same(a, b)
    write_trace(b, tmp_path / "c2.jsonl")
    assert (tmp_path / "c1.jsonl").read_text() == (tmp_path / "c2.jsonl").read_text()


def assert_same(a, b):
    assert a.ids.tolist() == b.ids.tolist()
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)
    for x, y in ((a.prefix_indptr, b.prefix_indptr), (a.prefix_ids, b.prefix_ids),
                 (a.slo_ttft_s, b.slo_ttft_s), (a.slo_tpot_s, b.slo_tpot_s)):
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_array_equal(x, y)
    assert sorted(a.extra) == sorted(b.extra)
    for k in a.extra:
        assert a.extra[k].tolist() == b.extra[k].tolist(), k
    assert a.meta == b.meta
    assert a.skipped == b.skipped
