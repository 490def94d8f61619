"""Pieces every reader shares: chunk accumulation into columns, extra-column typing, finishing a Trace."""

from __future__ import annotations

import numpy as np

from .rowcheck import RowChecker
from .trace import Trace

CHUNK_ROWS = 200_000  # rows per parsed chunk: bounds the transient Python objects per chunk


def str_ids(numbers: np.ndarray) -> np.ndarray:
    """Row numbers -> fixed-width numpy strings (no Python object per row)."""
    numbers = np.asarray(numbers, np.int64)
    width = len(str(int(numbers.max()))) if len(numbers) else 1
    return numbers.astype(f"U{width}")


def extra_column(values: list, present: np.ndarray | None = None) -> np.ndarray:
    """Type a column of JSON values: int64, float64 (NaN = missing/null), bool, str, else object."""
    n = len(values)
    if present is None:
        present = np.array([v is not None for v in values], bool)
    vals = [v for v, ok in zip(values, present) if ok and v is not None]
    if vals and all(isinstance(v, bool) for v in vals) and len(vals) == n:
        return np.array(values, bool)
    # integers past int64 stay exact Python ints (object column), never rounded through float
    big = any(isinstance(v, int) and not -2**63 <= v < 2**63 for v in vals)
    if vals and all(isinstance(v, int) and not isinstance(v, bool) for v in vals) and len(vals) == n and not big:
        return np.array(values, np.int64)
    if vals and not big and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        return np.array([np.nan if v is None else v for v in values], np.float64)
    if vals and all(isinstance(v, str) for v in vals) and len(vals) == n:
        return np.array(values, dtype=str) if n else np.empty(0, "U1")
    out = np.empty(n, object)
    out[:] = values
    return out


class Columns:
    """Accumulates kept rows chunk by chunk; `finish` concatenates into a Trace."""

    def __init__(self):
        self.parts: dict[str, list[np.ndarray]] = {}
        self.prefix_lens: list[np.ndarray] = []
        self.prefix_ids: list[np.ndarray] = []
        self.extra: dict[str, list[np.ndarray]] = {}
        self.rows = 0

    def add(self, keep: np.ndarray, prefix: tuple[np.ndarray, np.ndarray] | None = None,
            extra: dict[str, np.ndarray] | None = None, **cols: np.ndarray) -> None:
        """`cols` are full-chunk arrays; `keep` selects the rows that passed validation.

        `prefix` = (per-row lengths, flat ids) for the whole chunk.
        """
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(np.asarray(v)[keep])
        if prefix is not None:
            lens, flat = prefix
            rows_kept = np.repeat(keep, lens)
            self.prefix_lens.append(lens[keep])
            self.prefix_ids.append(flat[rows_kept])
        for k, v in (extra or {}).items():
            if k not in self.extra:  # column first seen in this chunk: earlier rows lack it
                self.extra[k] = [_missing_like(v, self.rows)]
            self.extra[k].append(v[keep])
        for k in self.extra:
            if extra is None or k not in extra:
                self.extra[k].append(_missing_like(self.extra[k][0], int(keep.sum())))
        self.rows += int(keep.sum())

    def col(self, name: str, dtype=None) -> np.ndarray:
        parts = self.parts.get(name, [])
        if not parts:
            return np.empty(0, dtype or np.float64)
        out = np.concatenate(parts)
        return out.astype(dtype, copy=False) if dtype is not None else out

    def prefix(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        if not self.prefix_lens:
            return None, None
        lens = np.concatenate(self.prefix_lens).astype(np.int64)
        indptr = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=indptr[1:])
        return indptr, np.concatenate(self.prefix_ids).astype(np.int64)

    def extras(self) -> dict[str, np.ndarray]:
        return {k: _concat(v) for k, v in self.extra.items()}


def _missing_like(v: np.ndarray, n: int) -> np.ndarray:
    if v.dtype.kind in "iuf":
        return np.full(n, np.nan)
    if v.dtype.kind == "U":
        return np.full(n, "", v.dtype)
    out = np.empty(n, object)
    return out


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    kinds = {p.dtype.kind for p in parts if len(p)}
    if kinds <= {"i", "u"}:
        return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)
    if kinds <= {"i", "u", "f"}:
        return np.concatenate([p.astype(np.float64) for p in parts])
    if kinds <= {"U"}:
        return np.concatenate(parts)
    if kinds <= {"b"}:
        return np.concatenate(parts)
    out = np.empty(sum(len(p) for p in parts), object)
    out[:] = [x for p in parts for x in p.tolist()]
    return out


def finish(cols: Columns, checker: RowChecker, arrival_s: np.ndarray, ids: np.ndarray,
           meta: dict, slo: tuple[np.ndarray, np.ndarray] | None = None) -> Trace:
    """Build the Trace: arrivals shifted so the first is 0, skip counts attached."""
    arrival_s = np.asarray(arrival_s, np.float64)
    if len(arrival_s):
        arrival_s = arrival_s - arrival_s[0]
    indptr, pids = cols.prefix()
    t = Trace(ids=ids, arrival_s=arrival_s,
              prompt_tokens=cols.col("prompt", np.int64), output_tokens=cols.col("output", np.int64),
              prefix_indptr=indptr, prefix_ids=pids,
              slo_ttft_s=None if slo is None else slo[0], slo_tpot_s=None if slo is None else slo[1],
              extra=cols.extras(), meta=meta, skipped=dict(sorted(checker.skipped.items())),
              warnings=dict(sorted(checker.warnings.items())))
    return t
