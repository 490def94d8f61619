"""Readers for JSON Lines traces: spsim's canonical format and Mooncake's.

Canonical: optional header `{"spsim_trace": 1, "block_size": ..., "source_format": ...}`, then one
object per request: `id`, `arrival_s`, `prompt_tokens`, `output_tokens`, optional `prefix_blocks`,
`slo` {`ttft_s`, `tpot_s`}, `extra` {...}. Mooncake: `timestamp` (ms), `input_length`,
`output_length`, `hash_ids` (512-token prefix blocks); ids are the source line numbers.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from spsim.errors import InputError

from .common import Columns, extra_column, finish, str_ids
from .jsonl import all_int_lists, int_list_problem, json_chunks, numbers
from .limits import MAX_TIME_S, MAX_TOKENS
from .prefixcheck import too_few, too_few_reason, too_many, too_many_problem
from .report import EmptyTrace
from .rowcheck import RowChecker, count_checks, time_checks
from .trace import SCHEMA_VERSION, Trace

CANONICAL_FIELDS = ("id", "arrival_s", "prompt_tokens", "output_tokens", "prefix_blocks", "slo", "extra")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
MOONCAKE_BLOCK = 512


def _extra_columns(dicts: list[dict | None]) -> dict[str, np.ndarray]:
    keys: dict[str, None] = {}
    for d in dicts:
        if d:
            keys.update(dict.fromkeys(d))
    out = {}
    for k in keys:
        vals = [None if d is None else d.get(k) for d in dicts]
        present = np.array([d is not None and k in d for d in dicts], bool)
        out[k] = extra_column(vals, present)
    return out


def _prefix(lists: list[list | None]) -> tuple[np.ndarray, np.ndarray]:
    lens = np.fromiter((0 if x is None else len(x) for x in lists), np.int64, len(lists))
    flat = np.fromiter((y for x in lists if x for y in x), np.int64, int(lens.sum()))
    return lens, flat


def _split(lines: list[int], objs: list[dict], line_errors: list, problem) -> tuple[np.ndarray, list[dict]]:
    """(line numbers, rows) of the rows `problem` finds nothing wrong with; the others go to
    `line_errors` as (line, field, problem), for the row checker to stop at or count."""
    good_lines, good = [], []
    for ln, o in zip(lines, objs):
        if (why := problem(o)) is not None:
            line_errors.append((ln, *why))
        else:
            good_lines.append(ln)
            good.append(o)
    return np.array(good_lines, np.int64), good


def read_mooncake(path: str, skip_invalid: bool = False) -> Trace:
    checker = RowChecker(path, skip_invalid)
    cols, base = Columns(), None
    for lines, objs, line_errors in json_chunks(path):
        lists_ok = all_int_lists([o.get("hash_ids") for o in objs])

        def hash_problem(o, lists_ok=lists_ok):
            why = None if lists_ok or "hash_ids" not in o else int_list_problem(o["hash_ids"])
            return ("hash_ids", why) if why else None

        lines, good = _split(lines, objs, line_errors, hash_problem)
        t, t_miss, t_nan = numbers([o.get("timestamp") for o in good])
        p, p_miss, p_nan = numbers([o.get("input_length") for o in good])
        q, q_miss, q_nan = numbers([o.get("output_length") for o in good])
        hashes = [o.get("hash_ids") for o in good]
        prefix = _prefix(hashes)
        checks = (time_checks("timestamp", t, t_miss, t_nan, negative_ok=True, unit="ms")
                  + count_checks("input_length", p, p_miss, p_nan) + count_checks("output_length", q, q_miss, q_nan)
                  + [("hash_ids", too_many_problem("input_length", MOONCAKE_BLOCK), too_many(prefix[0], p, MOONCAKE_BLOCK))])
        if base is None and len(t):
            ok = ~t_miss & ~t_nan & np.isfinite(t) & (np.abs(t) <= MAX_TIME_S * 1000)
            base = t[np.flatnonzero(ok)[0]] if ok.any() else None
        rel = t - (base or 0.0)  # ms from the first row
        keep = checker.apply(lines, checks, line_errors, rel, "timestamp")
        present = np.array([h is not None for h in hashes], bool)
        few = too_few(prefix[0], np.where(keep, p, 0).astype(np.int64), present & keep, MOONCAKE_BLOCK)
        if few.any():
            checker.warnings[too_few_reason("hash_ids", MOONCAKE_BLOCK)] += int(few.sum())
        rest = [{k: v for k, v in o.items() if k not in MOONCAKE_FIELDS} for o in good]
        cols.add(keep, t=rel, line=lines, prompt=np.where(keep, p, 0).astype(np.int64),
                 output=np.where(keep, q, 0).astype(np.int64), prefix=prefix, extra=_extra_columns(rest))
    if cols.rows == 0:
        raise EmptyTrace(path, checker.skipped)
    ms = cols.col("t")
    meta = {"source_format": "mooncake", "block_size": MOONCAKE_BLOCK}
    meta["start_timestamp_ms"] = _num(base + ms[0])
    return finish(cols, checker, (ms - ms[0]) / 1000.0, str_ids(cols.col("line", np.int64)), meta)


def _num(x: float):
    return int(x) if float(x).is_integer() else float(x)


def _row_problem(o: dict, lists_ok: bool = False) -> tuple[str, str] | None:
    """Structural problems of one canonical row (types the vectorised checks cannot see)."""
    for k in o:
        if k not in CANONICAL_FIELDS:
            return k, f"unknown field (known: {', '.join(CANONICAL_FIELDS)})"
    if "id" not in o or o["id"] is None:
        return "id", "missing"
    i = o["id"]
    if isinstance(i, bool) or not isinstance(i, (str, int)):
        return "id", "expected a string"
    if i == "":
        return "id", "empty"
    if not lists_ok and "prefix_blocks" in o and (why := int_list_problem(o["prefix_blocks"])):
        return "prefix_blocks", why
    slo = o.get("slo")
    if slo is not None:
        if not isinstance(slo, dict):
            return "slo", "expected an object with ttft_s and/or tpot_s"
        for k, v in slo.items():
            if k not in ("ttft_s", "tpot_s"):
                return f"slo.{k}", "unknown field (known: ttft_s, tpot_s)"
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                return f"slo.{k}", "not a number"
            if v is not None and not (v >= 0 and v != float("inf")):
                return f"slo.{k}", "must be a finite number >= 0"
            if v is not None and v > MAX_TIME_S:  # also keeps exact JSON integers within float range
                return f"slo.{k}", f"too large (max {MAX_TIME_S:.0e} s)".replace("e+", "e")
    if o.get("extra") is not None and not isinstance(o["extra"], dict):
        return "extra", "expected an object"
    return None


def read_canonical(path: str, skip_invalid: bool = False) -> Trace:
    checker = RowChecker(path, skip_invalid)
    cols = Columns()
    meta: dict = {}
    header_skipped: Counter[str] = Counter()
    any_prefix = any_slo = False
    first = True
    for lines, objs, line_errors in json_chunks(path):
        if first and objs and "spsim_trace" in objs[0] and lines[0] == min([lines[0]] + [e[0] for e in line_errors]):
            meta = _header(path, lines[0], objs[0], header_skipped, checker)
            lines, objs = lines[1:], objs[1:]
        first = False
        lists_ok = all_int_lists([o.get("prefix_blocks") for o in objs])
        lines, good = _split(lines, objs, line_errors, lambda o: _row_problem(o, lists_ok))
        a, a_miss, a_nan = numbers([o.get("arrival_s") for o in good])
        p, p_miss, p_nan = numbers([o.get("prompt_tokens") for o in good])
        q, q_miss, q_nan = numbers([o.get("output_tokens") for o in good])
        prefix = _prefix([o.get("prefix_blocks") for o in good])
        checks = (time_checks("arrival_s", a, a_miss, a_nan)
                  + count_checks("prompt_tokens", p, p_miss, p_nan) + count_checks("output_tokens", q, q_miss, q_nan))
        if meta.get("block_size"):  # with a block size, blocks past the prompt are impossible
            bs = meta["block_size"]
            checks.append(("prefix_blocks", too_many_problem("prompt_tokens", bs), too_many(prefix[0], p, bs)))
        keep = checker.apply(lines, checks, line_errors, a, "arrival_s")
        slos = [o.get("slo") or {} for o in good]
        any_prefix |= any("prefix_blocks" in o for o in good)
        any_slo |= any(s for s in slos)
        ids = [str(o["id"]) for o in good]
        cols.add(keep, t=a, line=lines, prompt=np.where(keep, p, 0).astype(np.int64),
                 output=np.where(keep, q, 0).astype(np.int64),
                 id=np.array(ids, dtype=str) if ids else np.empty(0, "U1"),
                 ttft=np.array([np.nan if s.get("ttft_s") is None else s["ttft_s"] for s in slos], np.float64),
                 tpot=np.array([np.nan if s.get("tpot_s") is None else s["tpot_s"] for s in slos], np.float64),
                 prefix=prefix, extra=_extra_columns([o.get("extra") for o in good]))
    if cols.rows == 0:
        raise EmptyTrace(path, checker.skipped + header_skipped)
    ids = cols.col("id")
    keep = _unique_ids(path, checker, ids, cols.col("line", np.int64))
    checker.skipped.update(header_skipped)
    meta.setdefault("source_format", "canonical")
    if not any_prefix and "block_size" not in meta:
        cols.prefix_lens.clear()
    t = finish(cols, checker, cols.col("t"), ids,
               meta, (cols.col("ttft"), cols.col("tpot")) if any_slo else None)
    return t if keep is None else t.take(np.flatnonzero(keep))


def _header(path: str, line: int, head: dict, skipped: Counter, checker: RowChecker) -> dict:
    """The header line -> metadata; its skip and warning counts (rows dropped or flagged upstream)
    go to `skipped` and the checker, so a converted file reports them as its source did."""
    if head["spsim_trace"] != SCHEMA_VERSION:
        raise InputError(path, line, "spsim_trace",
                         f"unsupported schema version {head['spsim_trace']!r} (this spsim reads {SCHEMA_VERSION})")
    for key in ("skipped", "warnings"):
        counts = head.get(key) or {}
        if not isinstance(counts, dict) or not all(type(c) is int and c >= 0 for c in counts.values()):
            raise InputError(path, line, key, "expected an object of reason: count")
    bs = head.get("block_size")
    if bs is not None and not (type(bs) is int and 0 < bs <= MAX_TOKENS):
        raise InputError(path, line, "block_size", "expected a positive integer")
    skipped.update(head.get("skipped") or {})
    checker.warnings.update(head.get("warnings") or {})
    return {k: v for k, v in head.items() if k not in ("spsim_trace", "skipped", "warnings")}


def _unique_ids(path: str, checker: RowChecker, ids: np.ndarray, lines: np.ndarray) -> np.ndarray | None:
    """Ids must be unique: error at the first repeat, or (skipping) keep each id's first row."""
    if len(ids) == 0:
        return None
    order = np.argsort(ids, kind="stable")  # sort-based: numpy's hash unique is slow on strings
    repeat = np.zeros(len(ids), bool)
    repeat[order[1:]] = ids[order[1:]] == ids[order[:-1]]  # stable: later rows of an id are repeats
    if not repeat.any():
        return None
    keep = ~repeat
    dup = np.flatnonzero(repeat)
    if not checker.skip_invalid:
        raise InputError(path, int(lines[dup[0]]), "id", f"duplicate id {str(ids[dup[0]])!r}")
    checker.skipped["id: duplicate"] += len(dup)
    return keep
