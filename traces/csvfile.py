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

from .textfile import NOT_UTF8, has_bad_bytes, open_text

BLOCK_BYTES = 16 << 20


def read_header(path: str) -> list[str]:
    """The first non-blank line's fields, named as `csv_chunks` names them."""
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                return _header(path, lineno, line)
    raise InputError(path, None, None, "empty file")


def _header(path: str, lineno: int, line: str) -> list[str]:
    if has_bad_bytes(line):
        raise InputError(path, lineno, None, f"{NOT_UTF8} in the header")
    names = [c.strip() or f"column_{j}" for j, c in enumerate(next(csv.reader([line])))]
    seen = set()
    for c in names:
        if c in seen:  # pandas cannot name two columns alike, and a reader could not tell them apart
            raise InputError(path, lineno, c, "duplicate column name")
        seen.add(c)
    return names


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
        while header is None:  # the first non-blank line is the header
            line = f.readline()
            if not line:
                raise InputError(path, None, None, "empty file")
            lineno += 1
            if line.strip():
                header = _header(path, lineno, line)
        while True:
            block = f.read(BLOCK_BYTES)
            if not block:
                break
            if not block.endswith("\n"):
                block += f.readline()
            if not block.endswith("\n"):  # last line of a file without a final newline
                block += "\n"
            fast = None if has_bad_bytes(block) else _well_formed(block, len(header))
            if fast is not None:  # every line has the right number of fields: no per-line work
                yield lineno + 1 + np.arange(fast), _frame(block, header), []
                lineno += fast
                continue
            good, lines, errors = [], [], []
            for line in block.splitlines(keepends=True):
                lineno += 1
                if not line.strip():
                    continue  # blank lines hold no row
                if has_bad_bytes(line):
                    errors.append((lineno, None, NOT_UTF8))
                    continue
                n = _nfields(line)
                if n != len(header):
                    errors.append((lineno, None, f"malformed line: expected {len(header)} fields, found {n}"))
                    continue
                good.append(line if line.endswith("\n") else line + "\n")
                lines.append(lineno)
            df = _frame("".join(good), header) if good else None
            if good or errors:
                yield np.array(lines, np.int64), df, errors


def _well_formed(block: str, ncols: int) -> int | None:
    """Number of lines if each has exactly ncols fields (no quotes, no blank lines), else None."""
    if '"' in block:
        return None
    b = np.frombuffer(block.encode(), np.uint8)
    nl = np.flatnonzero(b == 10)
    # commas before each newline, differenced: the commas on each line
    per_line = np.diff(np.concatenate([[0], np.searchsorted(np.flatnonzero(b == 44), nl)]))
    lengths = np.diff(np.concatenate([[-1], nl]))  # including the newline
    if len(nl) == 0 or not ((per_line == ncols - 1).all() and (lengths > 1).all()):
        return None
    return len(nl)


def _frame(text: str, header: list[str]) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(text), header=None, names=header, skipinitialspace=True,
                       keep_default_na=False, na_values=[""], skip_blank_lines=False)


def extra_from_frame(df: pd.DataFrame, used: set[str]) -> dict[str, np.ndarray]:
    """Source columns the canonical schema lacks, as compact numpy arrays (strings fixed-width)."""
    out = {}
    for c in df.columns:
        if c in used:
            continue
        s = df[c]
        if pd.api.types.is_bool_dtype(s.dtype):
            out[c] = s.to_numpy(bool)
        elif pd.api.types.is_signed_integer_dtype(s.dtype) or (
                pd.api.types.is_unsigned_integer_dtype(s.dtype) and (s.max() if len(s) else 0) <= np.iinfo(np.int64).max):
            out[c] = s.to_numpy(np.int64)
        elif pd.api.types.is_float_dtype(s.dtype):
            out[c] = s.to_numpy(np.float64)
        else:  # text, and integers past int64 (kept exact as their digits, not wrapped)
            out[c] = s.astype("string").fillna("").to_numpy(str).astype(str)
    return out
