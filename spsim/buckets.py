"""Sizes rounded up to a few values, so CUDA graphs see few distinct shapes: the padded-shape rule.

Both worlds need it: the runtime pads its passes with it (gpu_runtime/padding.py, shapes.py) and
the calibrated cost model prices the padded passes the runtime computes (spsim/cost/padding.py).
"""

from __future__ import annotations

SCRATCH_PAGES = 16  # pages kept outside the pool for dummy requests (the filler's query fits in them)


def bucket(n: int, least: int = 16) -> int:
    """`n` rounded up to a size of the form 2^k x {1, 1.25, 1.5, 1.75} (at least `least`): few
    distinct sizes, at most 25 % of padding."""
    n = max(int(n), least)
    p = 1 << (n - 1).bit_length()  # the power of two >= n
    for step in (p // 2 + p // 8, p // 2 + p // 4, p // 2 + 3 * p // 8):  # 1.25, 1.5, 1.75 x p / 2
        if n <= step and step >= least:
            return step
    return p


def pad_count(n: int) -> int:
    """`n` rounded up to 0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, ... (2^k and 1.5 x 2^k): request counts."""
    if n <= 2:
        return n
    p = 1 << (n - 1).bit_length()
    return p * 3 // 4 if n <= p * 3 // 4 else p


def pow2(n: int, least: int = 1) -> int:
    """`n` rounded up to a power of two, at least `least` (itself a power of two)."""
    return 1 << max(int(least) - 1, int(n) - 1).bit_length()


def rule_graphed(tokens: int, requests: int, limit: int) -> bool:
    """Whether the shape rule graphs a pass of `tokens` tokens over `requests` requests: its tokens
    with the rule's dummy rows (requests padded to a power of two, one token each) and at least
    one filler token within `limit` (gpu_runtime/graphs.py PREFILL_GRAPH_TOKENS). The bound is on
    the padded pass, not its real tokens, because the start-up set holds padded shapes
    (gpu_runtime/startup.py): 2,000 real tokens over 65 requests pad past the limit, into a token
    class no graph was captured in. (Arrays: spsim/cost/padding.py `rule_graphed_vec`.)"""
    return int(tokens) + (pow2(requests) - int(requests) if requests else 0) < limit


RULE_FINE = 256  # the shape rule's token sizes: powers of two up to this, then `bucket`'s 25 % steps
# `bucket` sizes the rule skips (to the next power of two): passes of these token counts ran as slow
# as, or slower than, those of the next power of two. On the H100 under Azure traffic at 4x, the
# median 448-token prefill pass took 17.7-21.2 ms against 15.4-19.0 ms at 512 (four policies), and
# both cards' sweeps priced the 448 class 24-26 % low (a 372-394-token chunk beside 3-9 rows:
# 19-20.5 ms against 17.7 ms for a 512-token chunk padded to 640); 896-token passes took what
# 1,024-token ones did (benchmarks/token_classes.py; which kernel it is: gemv.py --tokens).
RULE_SKIP = (448, 896)


def rule_size(n: int, least: int = 8, skip: tuple = RULE_SKIP) -> int:
    """Token and logits-row counts under the shape rule (gpu_runtime/shapes.py): a power of two up to
    RULE_FINE (cheap: small passes are bound by weight reads), then `bucket` (at most 25 %
    padding where a pass's tokens start to cost compute: prefill chunks of 1-2K tokens) but for
    `skip`'s sizes, which take the next power of two (another `skip`: the rule of older runs)."""
    p = pow2(n, least)
    if p <= RULE_FINE:
        return p
    b = bucket(n, least)
    return p if b in skip else b
