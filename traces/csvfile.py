"""Chunked CSV reading with exact source line numbers.

pandas alone renumbers rows when it skips blank or malformed lines, so lines are split here first
(a few MB at a time), malformed ones (wrong number of fields) are reported by line, and only the
well-formed block goes to pandas' C parser. Memory stays one chunk, whatever the file's size.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import numpy as np
import pandas as pd

from spsim.errors import InputError

from .common import open_text

BLOCK_BYTES = 16 << 20


def read_header(path: str) -> list[str]:
    with open_text(path) as f:
        try:
            for line in f:
                if line.strip():
                    return [c.strip() for c in next(csv.reader([line]))]
        except UnicodeDecodeError:
            raise InputError(path, None, None, "not a UTF-8 text file") from None
    raise InputError(path, None, None, "empty file")


def _nfields(line: str) -> int:
    if '"' in line:
        return len(next(csv.reader([line])))
    return line.count(",") + 1


def csv_chunks(path: str) -> Iterator[tuple[np.ndarray, pd.DataFrame | None, list[tuple]]]:
    """Per block: (source line of each well-formed row, their raw columns, malformed lines as
    (line, field, problem)), for `RowChecker.apply`."""
    with open_text(path) as f:
        lineno = 0
        header = None
        try:
            while True:
                block = f.readlines(BLOCK_BYTES)
                if not block:
                    break
                good, lines, errors = [], [], []
                for line in block:
                    lineno += 1
                    if not line.strip():
                        continue  # blank lines hold no row
                    if header is None:
                        header = [c.strip() for c in next(csv.reader([line]))]
                        header = [c or f"column_{j}" for j, c in enumerate(header)]
                        continue
                    n = _nfields(line)
                    if n != len(header):
                        errors.append((lineno, None, f"malformed line: expected {len(header)} fields, found {n}"))
                        continue
                    good.append(line if line.endswith("\n") else line + "\n")
                    lines.append(lineno)
                df = None
                if good:
                    df = pd.read_csv(io.StringIO("".join(good)), header=None, names=header,
                                     skipinitialspace=True, keep_default_na=False, na_values=[""])
                if good or errors:
                    yield np.array(lines, np.int64), df, errors
        except UnicodeDecodeError:
            raise InputError(path, lineno + 1, None, "not UTF-8 text") from None
    if header is None:
        raise InputError(path, None, None, "empty file")


def extra_from_frame(df: pd.DataFrame, used: set[str]) -> dict[str, np.ndarray]:
    """Source columns the canonical schema lacks, as compact numpy arrays (strings fixed-width)."""
    out = {}
    for c in df.columns:
        if c in used:
            continue
        s = df[c]
        if pd.api.types.is_bool_dtype(s.dtype):
            out[c] = s.to_numpy(bool)
        elif pd.api.types.is_integer_dtype(s.dtype):
            out[c] = s.to_numpy(np.int64)
        elif pd.api.types.is_float_dtype(s.dtype):
            out[c] = s.to_numpy(np.float64)
        else:
            out[c] = s.astype("string").fillna("").to_numpy(str).astype(str)
    return out
