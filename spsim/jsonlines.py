"""JSON-lines files read one record at a time (accept events, calibration points, measurements, pass
logs): blank lines skipped; a line that is not a JSON object is an error naming the file, line and
column; with `torn_ok`, a last line an interrupted write left unfinished (no line break) is dropped
with a warning. Traces have their own chunked reader (`traces/jsonl.py`)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .errors import InputError, SpsimError


def json_lines(path: str | Path, what: str, torn_ok: bool = False) -> Iterator[tuple[int, dict]]:
    """(line number, record) of each non-blank line; `what` names the file in read errors."""
    path = Path(path)
    try:
        with open(path) as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:  # without its line break, so an error at the line's end has that line's column
                    rec = json.loads(line.rstrip("\r\n"))
                except json.JSONDecodeError as e:
                    if torn_ok and not line.endswith("\n"):  # only the last line can lack one
                        warnings.warn(f"{path}:{i}: dropped a torn last line (an interrupted write)", stacklevel=3)
                        return
                    raise InputError(path, i, None, f"not JSON ({e.msg} at column {e.colno})") from None
                if not isinstance(rec, dict):
                    raise InputError(path, i, None, "expected a JSON object")
                yield i, rec
    except (OSError, UnicodeDecodeError) as e:
        raise SpsimError(f"{path}: cannot read {what} ({e})") from None


def jsonable(o):
    """`json.dumps`'s `default` for numpy values: numbers and arrays as Python's."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))
