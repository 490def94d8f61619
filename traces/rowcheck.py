"""Row validation shared by every reader: raise on the first bad row, or skip it and count why.

Readers hand over one chunk of parsed columns at a time (numpy arrays plus the source line of
each row); checks are vectorised, so validating 27 M rows is a few numpy passes per chunk.
A row's skip reason is its first failing check, in the order the reader lists them, so the count
by reason adds up to the number of rows skipped.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from spsim.errors import InputError

from .limits import MAX_TIME_S, MAX_TOKENS


def reason(field: str | None, problem: str) -> str:
    return f"{field}: {problem}" if field else problem


class RowChecker:
    def __init__(self, path: str, skip_invalid: bool):
        self.path = str(path)
        self.skip_invalid = skip_invalid
        self.skipped: Counter[str] = Counter()
        self.warnings: Counter[str] = Counter()  # kept rows that look wrong: reason -> count
        self.last_arrival = -np.inf  # latest kept arrival across chunks (rows must not go back in time)

    def apply(self, lines: np.ndarray, checks: list[tuple], line_errors: list[tuple] = (),
              arrival: np.ndarray | None = None, time_field: str | None = None) -> np.ndarray:
        """Validate one chunk; returns the keep-mask over its rows.

        `checks` = [(field, problem, bad_mask[, drop]), ...] in priority order: a row's first failing
        check is its reason. `drop=True` marks rows the format defines as not-requests (BurstGPT's
        failed rows): always skipped and counted, never an error. `line_errors` = [(line, field,
        problem)] for rows that never made it into the arrays (malformed lines). With `arrival`,
        rows earlier than a previous kept row fail too (timestamps must not go back in time).
        """
        n = len(lines)
        checks = list(checks)
        code = np.zeros(n, np.int16)  # 0 = fine, else 1 + index of the first failing check
        for j, chk in enumerate(checks):
            code[(code == 0) & chk[2]] = j + 1
        prev = None
        if arrival is not None:
            ok = np.flatnonzero(code == 0)
            a = arrival[ok]
            prev = np.full(n, np.nan)
            if len(ok):
                run = np.maximum.accumulate(a)
                p = np.empty_like(a)
                p[0] = self.last_arrival
                p[1:] = np.maximum(run[:-1], self.last_arrival)
                prev[ok] = p
                late = np.zeros(n, bool)
                late[ok] = a < p
                checks.append((time_field, "timestamp earlier than a previous row", late))
                code[late] = len(checks)
        # errors: the first failing row in file order, whether malformed or failing a check
        is_err = code > 0
        for j, chk in enumerate(checks):
            if len(chk) > 3 and chk[3]:
                is_err &= code != j + 1
        if not self.skip_invalid:
            first = int(lines[np.flatnonzero(is_err)[0]]) if is_err.any() else None
            le = min(line_errors, key=lambda e: e[0]) if line_errors else None
            if le is not None and (first is None or le[0] < first):
                raise InputError(self.path, le[0], le[1], le[2])
            if first is not None:
                i = int(np.flatnonzero(is_err)[0])
                field, problem = checks[code[i] - 1][:2]
                if code[i] == len(checks) and arrival is not None and problem.startswith("timestamp earlier"):
                    problem = f"timestamps not sorted: {arrival[i]:.9g} is earlier than {prev[i]:.9g} on a previous row"
                raise InputError(self.path, first, field, problem)
        for _, field, problem in line_errors:
            self.skipped[reason(field, problem)] += 1
        for c, k in enumerate(np.bincount(code, minlength=len(checks) + 1)[1:]):
            if k:
                field, problem = checks[c][:2]
                self.skipped[reason(field, problem)] += int(k)
        keep = code == 0
        if arrival is not None and keep.any():
            self.last_arrival = max(self.last_arrival, float(arrival[keep].max()))
        return keep


def numeric(col) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A parsed column -> (float64 values, missing mask, not-a-number mask)."""
    s = pd.Series(col) if not isinstance(col, pd.Series) else col
    missing = s.isna().to_numpy()
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
        v = s.to_numpy(np.float64, na_value=np.nan)
        return v, missing, np.zeros(len(s), bool)
    st = s.astype("string").str.strip()
    missing = missing | (st == "").fillna(True).to_numpy(bool)
    v = pd.to_numeric(st, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    return v, missing, np.isnan(v) & ~missing


def _present(field: str, missing: np.ndarray, nan: np.ndarray, finite: np.ndarray) -> list:
    """The checks every numeric field starts with: present, numeric, finite."""
    return [(field, "missing", missing), (field, "not a number", nan),
            (field, "not finite", ~finite & ~missing & ~nan)]


def count_checks(field: str, v: np.ndarray, missing: np.ndarray, nan: np.ndarray,
                 zero_ok: bool = False) -> list[tuple[str, str, np.ndarray]]:
    """Checks for a token count: present, numeric, finite, a whole number in 1..MAX_TOKENS."""
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(v)
        return _present(field, missing, nan, finite) + [
            (field, "negative", finite & (v < 0)),
            (field, f"too large (max {MAX_TOKENS:,})", finite & (v > MAX_TOKENS)),  # else int64 wraps
            (field, "not a whole number", finite & (v != np.floor(v))),
            (field, "must be > 0", np.zeros(len(v), bool) if zero_ok else finite & (v == 0)),
        ]


def time_checks(field: str, v: np.ndarray, missing: np.ndarray, nan: np.ndarray,
                negative_ok: bool = False, unit: str = "s") -> list[tuple[str, str, np.ndarray]]:
    """Checks for an arrival time in `unit` (s or ms): present, numeric, finite, within MAX_TIME_S."""
    limit = MAX_TIME_S * (1000 if unit == "ms" else 1)
    shown = f"{limit:.0e}".replace("e+", "e")
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(v)
        return _present(field, missing, nan, finite) + [
            (field, "negative", np.zeros(len(v), bool) if negative_ok else finite & (v < 0)),
            (field, f"too large (max {shown} {unit})", finite & (v > limit)),
            (field, f"too small (min -{shown} {unit})", finite & (v < -limit)),
        ]
