"""Trace transforms: pure functions Trace -> Trace (arrivals stay shifted so the first is 0)."""

from __future__ import annotations

import numpy as np

from spsim.errors import InputError, SpecError

from .common import _concat, _missing_like
from .trace import Trace


def _rezero(t: Trace) -> Trace:
    if len(t):
        t.arrival_s = t.arrival_s - t.arrival_s[0]
    return t


def rescale_qps(t: Trace, qps: float) -> Trace:
    """Stretch or compress time so the trace's QPS (count / span) becomes `qps`; order unchanged."""
    if not qps > 0:
        raise InputError("--rescale-qps", None, None, f"target QPS must be > 0, got {qps}")
    span = float(t.arrival_s[-1]) if len(t) else 0.0
    if span <= 0:
        raise InputError(t.meta.get("name", "trace"), None, "arrival_s",
                         "cannot rescale: all requests arrive at once (span 0)")
    out = t.take(np.arange(len(t)))
    out.arrival_s = t.arrival_s * (len(t) / (qps * span))
    return out


def window(t: Trace, start_s: float = 0.0, end_s: float | None = None) -> Trace:
    """Requests arriving in [start_s, end_s), re-zeroed at the first kept one."""
    keep = t.arrival_s >= start_s
    if end_s is not None:
        keep &= t.arrival_s < end_s
    return _rezero(t.take(np.flatnonzero(keep)))


def _count(n: int) -> int:
    if n < 0:  # clamping to 0 would turn a sign error into an empty trace
        raise SpecError(f"count must be >= 0, got {n}")
    return n


def first(t: Trace, n: int) -> Trace:
    return t.take(np.arange(min(_count(n), len(t))))


def sample(t: Trace, n: int, seed: int = 0) -> Trace:
    """`n` requests chosen uniformly at random without replacement, kept in time order."""
    n = min(_count(n), len(t))
    idx = np.sort(np.random.default_rng(seed).choice(len(t), size=n, replace=False))
    return _rezero(t.take(idx))


def filter_lengths(t: Trace, min_prompt: int | None = None, max_prompt: int | None = None,
                   min_output: int | None = None, max_output: int | None = None) -> Trace:
    """Keep requests whose lengths lie in the given inclusive bounds (counted in `filtered`)."""
    keep = np.ones(len(t), bool)
    for arr, lo, hi in ((t.prompt_tokens, min_prompt, max_prompt), (t.output_tokens, min_output, max_output)):
        if lo is not None:
            keep &= arr >= lo
        if hi is not None:
            keep &= arr <= hi
    out = _rezero(t.take(np.flatnonzero(keep)))
    if (~keep).any():
        out.meta["filtered_by_length"] = int(out.meta.get("filtered_by_length", 0)) + int((~keep).sum())
    return out


def clip_lengths(t: Trace, max_prompt: int | None = None, max_output: int | None = None) -> Trace:
    """Cap prompt/output lengths; prefix blocks past a clipped prompt are dropped with it."""
    for name, v in (("max_prompt", max_prompt), ("max_output", max_output)):
        if v is not None and v < 1:
            raise InputError(f"--clip-{name[4:]}", None, None, f"must be >= 1, got {v}")
    out = t.take(np.arange(len(t)))
    if max_output is not None:
        out.output_tokens = np.minimum(out.output_tokens, max_output)
    if max_prompt is not None:
        out.prompt_tokens = np.minimum(out.prompt_tokens, max_prompt)
        if out.prefix_indptr is not None and out.block_size:
            lens = np.minimum(np.diff(out.prefix_indptr), -(-out.prompt_tokens // out.block_size))
            starts = out.prefix_indptr[:-1]
            indptr = np.zeros(len(out) + 1, np.int64)
            np.cumsum(lens, out=indptr[1:])
            out.prefix_ids = out.prefix_ids[np.repeat(starts - indptr[:-1], lens) + np.arange(indptr[-1])]
            out.prefix_indptr = indptr
    return out


def merge(traces: list[Trace]) -> Trace:
    """Overlay traces on one clock (each starts at 0), ordered by arrival (stable).

    Ids stay as they are when unique across inputs, else become `<k>:<id>` (k = input index).
    Prefix block ids are offset per input so blocks of different traces never look shared.
    """
    if not traces:
        raise InputError("merge", None, None, "nothing to merge")
    if len(traces) == 1:
        return traces[0]
    sizes = {t.block_size for t in traces if t.prefix_indptr is not None}
    if len(sizes) > 1:
        raise InputError("merge", None, "block_size", f"cannot merge traces with different block sizes {sorted(sizes)}")
    ids = np.concatenate([t.ids.astype(str) for t in traces])
    srt = np.sort(ids)
    if (srt[1:] == srt[:-1]).any():  # ids collide across inputs: make them unique
        ids = np.concatenate([np.char.add(f"{k}:", t.ids.astype(str)) for k, t in enumerate(traces)])
    arrival = np.concatenate([t.arrival_s for t in traces])
    order = np.argsort(arrival, kind="stable")
    any_prefix = any(t.prefix_indptr is not None for t in traces)
    any_slo = any(t.slo_ttft_s is not None for t in traces)
    pi = pids = None
    if any_prefix:
        lens, flat, offset = [], [], 0
        for t in traces:
            if t.prefix_indptr is None:
                lens.append(np.zeros(len(t), np.int64))
                continue
            lens.append(np.diff(t.prefix_indptr))
            flat.append(t.prefix_ids + offset)
            offset += int(t.prefix_ids.max()) + 1 if len(t.prefix_ids) else 0
        lens = np.concatenate(lens)
        pi = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=pi[1:])
        pids = np.concatenate(flat) if flat else np.empty(0, np.int64)
    nan = lambda t, a: a if a is not None else np.full(len(t), np.nan)  # noqa: E731
    keys = list(dict.fromkeys(k for t in traces for k in t.extra))
    extra = {}
    for k in keys:
        like = next(t.extra[k] for t in traces if k in t.extra)
        extra[k] = _concat([t.extra[k] if k in t.extra else _missing_like(like, len(t)) for t in traces])
    skipped: dict[str, int] = {}
    warnings: dict[str, int] = {}
    for t in traces:
        for r, c in t.skipped.items():
            skipped[r] = skipped.get(r, 0) + c
        for r, c in t.warnings.items():
            warnings[r] = warnings.get(r, 0) + c
    meta = {"source_format": "merged", "merged": [t.meta.get("name", t.meta.get("source_format")) for t in traces]}
    if sizes:
        meta["block_size"] = sizes.pop()
    whole = Trace(ids, arrival, np.concatenate([t.prompt_tokens for t in traces]),
                  np.concatenate([t.output_tokens for t in traces]), pi, pids,
                  np.concatenate([nan(t, t.slo_ttft_s) for t in traces]) if any_slo else None,
                  np.concatenate([nan(t, t.slo_tpot_s) for t in traces]) if any_slo else None,
                  extra, meta, skipped, warnings)
    return _rezero(whole.take(order))
