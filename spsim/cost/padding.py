"""The tokens and logits rows a padded pass really computes, for the calibrated cost model.

The runtime pads every pass it replays from a CUDA graph to a few shapes (gpu_runtime/padding.py):
dummy drafting and verifying requests of one token each up to a padded request count, a filler
request bringing the token count to a padded size (when it fits the scratch pages), and logits
rows rounded up. Those tokens go through every linear layer, so a profile measured on a padded
runtime has them in its pass times: the fit must see them (a 1,024-token prefill measured with
256 filler tokens is not the cost of 1,024), and a prediction must add them as the run will.
On the H200 a 1,100-token prefill beside decodes took 25 ms unpadded (`--coarse-shapes`, whose
filler would not fit), and a profile fitted as if the measured 1,024 + 256 tokens were 1,024
priced it 29.5 ms.

Modes: "none" (nothing added), "bucket" (request counts by `pad_count`, tokens and logits by
`bucket`), "pow2" (`--coarse-shapes`: powers of two), "rule" (the shape rule, the runtime's
default: prefill, drafting and verifying requests padded together to a power of two, tokens and
logits by `rule_size`, the filler always fitting). The rules are the
runtime's own (`spsim/buckets.py`, pure Python), vectorised here; tests hold the two equal.
"""

from __future__ import annotations

import numpy as np

from spsim.buckets import RULE_FINE, RULE_SKIP, bucket, pad_count, pow2, rule_size

MODES = ("none", "bucket", "pow2", "rule")
LEAST = 8  # padded token and logits counts are at least this (PassPadding._size(..., 8))
TABLE_N = 1 << 12  # counts below this are looked up in tables of the scalar rules' own values
_TABLES: dict = {}


def padded(tokens: int, logits: int, n_draft: int, n_verify: int, mode: str, scratch_tokens: int,
           n_prefill: int = 0, max_query: int = 17) -> tuple[int, int]:
    """(tokens, logits rows) a graphable pass computes once padded (scalars). `max_query` (the
    rule): a pass takes the logits rows its requests could ask for."""
    if mode == "none":
        return tokens, logits
    if mode == "rule":
        n = n_prefill + n_draft + n_verify
        row = tokens + pow2(n) - n if n else tokens
        t = rule_size(row + 1, LEAST)
        if n:
            logits = max(logits, min(pow2(n) * max_query, t - 1))
        return t, rule_size(logits, LEAST)
    count, size = (pow2, pow2) if mode == "pow2" else (pad_count, bucket)
    dummies = (count(n_draft) - n_draft if n_draft else 0) + (count(n_verify) - n_verify if n_verify else 0)
    row = tokens + dummies
    fill = size(row + 1, LEAST) - row
    if fill > scratch_tokens:
        return row, max(logits, size(logits, LEAST) if dummies else logits)
    return row + fill, size(logits, LEAST)


def padded_vec(tokens, logits, n_draft, n_verify, mode: str, scratch_tokens: int, n_prefill=0, max_query: int = 17):
    """`padded` of many passes (integer arrays)."""
    tokens, logits = np.asarray(tokens, np.int64), np.asarray(logits, np.int64)
    if mode == "none":
        return tokens, logits
    n_draft, n_verify = np.asarray(n_draft, np.int64), np.asarray(n_verify, np.int64)
    if mode == "rule":
        n_prefill = np.asarray(n_prefill, np.int64)
        n = n_prefill + n_draft + n_verify
        rows = np.where(n > 0, pow2_vec(np.maximum(n, 1)), 0)
        row = tokens + rows - n
        t = rule_size_vec(row + 1, LEAST)
        logits = np.where(n > 0, np.maximum(logits, np.minimum(rows * max_query, t - 1)), logits)
        return t, rule_size_vec(logits, LEAST)
    count, size = (pow2_vec, pow2_vec) if mode == "pow2" else (pad_count_vec, bucket_vec)
    dummies = np.where(n_draft > 0, count(n_draft) - n_draft, 0) + np.where(n_verify > 0, count(n_verify) - n_verify, 0)
    row = tokens + dummies
    fill = size(row + 1, LEAST) - row
    fits = fill <= scratch_tokens
    lpad = size(logits, LEAST)
    return np.where(fits, row + fill, row), np.where(fits | (dummies > 0), np.maximum(lpad, logits), logits)


def _looked_up(f, n: np.ndarray, *args) -> np.ndarray | None:
    """`f(x, *args)` of each entry of `n` from a table of f over 0..TABLE_N-1 (the segments' request
    and token counts: one indexing instead of a dozen array operations), or None where some entry
    is outside it."""
    if not n.ndim or not n.size or n.min() < 0 or n.max() >= TABLE_N:
        return None
    key = (f, args)
    t = _TABLES.get(key)
    if t is None:
        t = _TABLES[key] = np.array([f(x, *args) for x in range(TABLE_N)], np.int64)
    return t[n]


def rule_size_vec(n, least: int = 8) -> np.ndarray:
    """`buckets.rule_size` of an integer array."""
    n = np.asarray(n, np.int64)
    t = _looked_up(rule_size, n, least)
    if t is not None:
        return t
    p = pow2_vec(n, least)
    b = bucket_vec(n, least)
    return np.where((p <= RULE_FINE) | np.isin(b, RULE_SKIP), p, b)


def rule_graphed_vec(tokens, requests, limit: int) -> np.ndarray:
    """`buckets.rule_graphed` of many passes (integer arrays)."""
    r = np.asarray(requests, np.int64)
    return np.asarray(tokens, np.int64) + np.where(r > 0, pow2_vec(np.maximum(r, 1)) - r, 0) < limit


def pow2_vec(n, least: int = 1) -> np.ndarray:
    """`buckets.pow2` of an integer array (exact: through bit lengths, not floating logs)."""
    n = np.asarray(n, np.int64)
    t = _looked_up(pow2, n, least)
    if t is not None:
        return t
    m = np.maximum(n, least) - 1
    return np.left_shift(np.int64(1), _bit_length(m))


def bucket_vec(n, least: int = 16) -> np.ndarray:
    """`buckets.bucket` of an integer array: 2^k x {1, 1.25, 1.5, 1.75}, at least `least`."""
    n = np.asarray(n, np.int64)
    t = _looked_up(bucket, n, least)
    if t is not None:
        return t
    n = np.maximum(n, least)
    p = np.left_shift(np.int64(1), _bit_length(n - 1))
    out = p.copy()
    for num in (7, 6, 5):  # largest step first: the smallest step >= n (and >= least) wins last
        step = p // 2 + (p * (num - 4)) // 8
        out = np.where((n <= step) & (step >= least), step, out)
    return out


def pad_count_vec(n) -> np.ndarray:
    """`buckets.pad_count` of an integer array: 0, 1, 2, 3, 4, 6, 8, 12, 16, ..."""
    n = np.asarray(n, np.int64)
    t = _looked_up(pad_count, n)
    if t is not None:
        return t
    p = np.left_shift(np.int64(1), _bit_length(np.maximum(n, 1) - 1))
    return np.where(n <= 2, n, np.where(n <= p * 3 // 4, p * 3 // 4, p))


def _bit_length(m: np.ndarray) -> np.ndarray:
    """int.bit_length of each non-negative integer (exact below 2^53: the float exponent)."""
    return np.frexp(np.asarray(m, np.int64).astype(np.float64))[1].astype(np.int64)
