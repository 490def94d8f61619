"""Readers for the public CSV traces: Azure LLM inference (2023, 2024), BurstGPT, Vidur.

Columns are found by header name, so column order and extra columns do not matter; columns the
canonical schema lacks are kept in `extra`. Ids are the source line numbers (header = line 1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spsim.errors import InputError

from .common import Columns, finish, str_ids
from .csvfile import csv_chunks, extra_from_frame, read_header
from .report import EmptyTrace
from .rowcheck import RowChecker, count_checks, numeric, time_checks
from .trace import Trace

AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT = ("Timestamp", "Request tokens", "Response tokens")
VIDUR = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")


def _require(path: str, header: list[str], names: tuple[str, ...], fmt: str) -> None:
    missing = [c for c in names if c not in header]
    if missing:
        raise InputError(path, 1, missing[0], f"column missing from the {fmt} header (found: {', '.join(header)})")


def _read(path: str, skip_invalid: bool, names: tuple[str, ...], fmt: str, time_parser,
          drop_zero_output: str | None = None) -> Trace:
    """Shared loop: parse time + two counts per chunk, validate, keep, then build the Trace."""
    header = read_header(path)
    _require(path, header, names, fmt)
    tcol, pcol, ocol = names
    checker = RowChecker(path, skip_invalid)
    cols, base, first_raw = Columns(), None, None
    for lines, df, line_errors in csv_chunks(path):
        if df is None:
            checker.apply(lines, [], line_errors)
            continue
        t, t_checks, raw = time_parser(tcol, df[tcol])
        t_ok = ~np.logical_or.reduce([c[2] for c in t_checks])
        if base is None and t_ok.any():
            base = t[np.flatnonzero(t_ok)[0]]
        p, p_miss, p_nan = numeric(df[pcol])
        o, o_miss, o_nan = numeric(df[ocol])
        checks = list(t_checks)
        if t.dtype.kind == "i" and base is not None:  # ns: keep differences of kept rows well inside int64
            far = t_ok & (np.abs(t.astype(np.float64) - float(base)) > 2.0**61)
            checks.append((tcol, "too far from the first row's time (over 73 years)", far))
            t_ok &= ~far
        if drop_zero_output is not None:  # a failed request is not a bad row, whatever else it holds
            checks.append((None, drop_zero_output, o == 0, True))
        checks += count_checks(pcol, p, p_miss, p_nan)
        checks += count_checks(ocol, o, o_miss, o_nan, zero_ok=drop_zero_output is not None)
        rel = np.where(t_ok, t - (base if base is not None else 0), 0)  # bad times: placeholders, never kept
        keep = checker.apply(lines, checks, line_errors, _seconds(rel), tcol)
        if first_raw is None and keep.any():
            first_raw = raw.iloc[int(np.flatnonzero(keep)[0])]
        cols.add(keep, t=rel, line=lines, prompt=np.where(keep, p, 0).astype(np.int64),
                 output=np.where(keep, o, 0).astype(np.int64),
                 extra=extra_from_frame(df, set(names)))
    if cols.rows == 0:
        raise EmptyTrace(path, checker.skipped)
    rel = cols.col("t")
    meta = {"source_format": fmt}
    if first_raw is not None:
        meta["start_time"] = first_raw if isinstance(first_raw, str) else float(first_raw)
    return finish(cols, checker, _seconds(rel - rel[0]), str_ids(cols.col("line", np.int64)), meta)


def _seconds(x: np.ndarray) -> np.ndarray:
    """Integer nanoseconds -> float seconds; floats are already seconds."""
    return x / 1e9 if x.dtype.kind in "iu" else x.astype(np.float64, copy=False)


def _datetime(name: str, col: pd.Series):
    """ISO timestamps (7 fractional digits; 2024 adds a timezone and mixed precision) -> int64 ns."""
    s = col.astype("string").str.strip()
    missing = (s.isna() | (s == "")).to_numpy(bool)
    ts = pd.to_datetime(s, format="ISO8601", utc=True, errors="coerce")
    bad = ts.isna().to_numpy() & ~missing
    ns = ts.dt.tz_localize(None).to_numpy("datetime64[ns]").view(np.int64).copy()
    ns[missing | bad] = 0
    return ns, [(name, "missing", missing),
                (name, "not a timestamp (expected e.g. 2023-11-16 18:15:46.6805900)", bad)], s


def _float_seconds(name: str, col: pd.Series):
    v, missing, nan = numeric(col)
    return v, time_checks(name, v, missing, nan, negative_ok=True), col


def read_azure(path: str, skip_invalid: bool = False) -> Trace:
    t = _read(path, skip_invalid, AZURE, "azure", _datetime)
    st = t.meta.get("start_time", "")
    tz = isinstance(st, str) and (st.endswith("Z") or "+" in st[10:] or "-" in st[19:])
    t.meta["source_format"] = "azure-2024" if tz else "azure-2023"
    return t


def read_burstgpt(path: str, skip_invalid: bool = False) -> Trace:
    return _read(path, skip_invalid, BURSTGPT, "burstgpt", _float_seconds,
                 drop_zero_output="failed request (Response tokens = 0)")


def read_vidur(path: str, skip_invalid: bool = False) -> Trace:
    return _read(path, skip_invalid, VIDUR, "vidur", _float_seconds)


def sniff_csv(header: list[str]) -> str | None:
    h = set(header)
    for fmt, names in (("azure", AZURE), ("burstgpt", BURSTGPT), ("vidur", VIDUR)):
        if set(names) <= h:
            return fmt
    return None
