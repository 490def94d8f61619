"""JSON Lines input, chunked: each non-blank line is parsed on its own so errors name their line."""

from __future__ import annotations

import json
from itertools import chain
from collections.abc import Iterator

import numpy as np

from spsim.errors import InputError

from .common import CHUNK_ROWS
from .limits import MAX_BLOCK_ID
from .textfile import NOT_UTF8, has_bad_bytes, open_text


def json_chunks(path: str, chunk_rows: int | None = None) -> Iterator[tuple[list[int], list[dict], list[tuple]]]:
    """Per chunk: (line numbers, parsed objects, malformed lines as (line, field, problem))."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    seen_any = False
    with open_text(path) as f:
        lineno = 0
        while True:
            raw = f.take(chunk_rows)
            if not raw:
                break
            nums = [lineno + 1 + i for i, r in enumerate(raw) if r.strip()]
            texts = [r for r in raw if r.strip()]
            lineno += len(raw)
            seen_any |= bool(texts)
            if texts:
                yield _parse(nums, texts)
    if not seen_any:
        raise InputError(path, None, None, "empty file")


def _parse(nums: list[int], texts: list[str]) -> tuple[list[int], list[dict], list[tuple]]:
    if not has_bad_bytes("".join(texts)):
        try:  # one C-level parse for the whole chunk; per line only when something is wrong
            objs = json.loads("[" + ",".join(texts) + "]")
            if len(objs) == len(texts) and all(type(o) is dict for o in objs):
                return nums, objs, []
        except (ValueError, RecursionError):
            pass
    lines, objs, errors = [], [], []
    for ln, raw in zip(nums, texts):
        if has_bad_bytes(raw):
            errors.append((ln, None, NOT_UTF8))
            continue
        try:  # without its line break, so the column of an error at the line's end is that line's
            obj = json.loads(raw.rstrip("\r\n"))
        except RecursionError:
            errors.append((ln, None, "malformed JSON: nested too deeply"))
            continue
        except json.JSONDecodeError as e:
            errors.append((ln, None, f"malformed JSON: {e.msg} at column {e.colno}"))
            continue
        except ValueError:  # an integer literal past Python's int/str digit limit (4300)
            errors.append((ln, None, "malformed JSON: number with too many digits"))
            continue
        if not isinstance(obj, dict):
            errors.append((ln, None, f"malformed line: expected a JSON object, found {type(obj).__name__}"))
            continue
        lines.append(ln)
        objs.append(obj)
    return lines, objs, errors


def first_object(path: str) -> dict | None:
    """The first non-blank line as a JSON object, or None (for format detection)."""
    with open_text(path) as f:
        for raw in f:
            if raw.strip():
                try:
                    obj = json.loads(raw)
                except (ValueError, RecursionError):
                    return None
                return obj if isinstance(obj, dict) else None
    return None


def numbers(values: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """JSON values -> (float64, missing, not-a-number). Strings and booleans are not numbers."""
    n = len(values)
    v = np.zeros(n)
    missing = np.zeros(n, bool)
    nan = np.zeros(n, bool)
    for i, x in enumerate(values):
        if x is None:
            missing[i] = True
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            try:
                v[i] = x
            except OverflowError:  # an exact JSON integer past float range: too large, whatever the field
                v[i] = np.finfo(np.float64).max * (1 if x > 0 else -1)
        else:
            nan[i] = True
    return v, missing, nan


def all_int_lists(lists: list) -> bool:
    """Fast chunk-level check that every value is a list of non-negative ints (None = absent)."""
    present = [x for x in lists if x is not None]
    if set(map(type, present)) - {list}:
        return False
    flat = list(chain.from_iterable(present))
    return not (set(map(type, flat)) - {int}) and (not flat or (min(flat) >= 0 and max(flat) <= MAX_BLOCK_ID))


def int_list_problem(x) -> str | None:
    """Why `x` is not a list of non-negative ints (None when it is)."""
    if not isinstance(x, list):
        return f"expected a list of integers, found {type(x).__name__}"
    for y in x:
        if not isinstance(y, int) or isinstance(y, bool):
            return f"expected a list of integers, found {json.dumps(y)}"
        if y < 0:
            return "negative block id"
        if y > MAX_BLOCK_ID:
            return f"block id too large (max {MAX_BLOCK_ID})"
    return None
