"""The attention work-list split rule: how many KV blocks one work item of a pass's attention gets.

Both worlds need it: the runtime cuts each pass's attention into work items with it
(gpu_runtime/attention.py `plan_attention`) and the calibrated cost model prices the tail of that
list (spsim/cost/calibrated.py `work_ratio`) through `split_of_units`, the same rule on Python ints
(tests/test_worklist.py holds the two equal).
Pure numpy: no GPU stack.
"""

from __future__ import annotations

import functools

import numpy as np

NUM_SMS = 132  # SMs the list is planned for (the H100/H200's)
WAVES = 8.0  # work items per SM aimed at
MIN_SPLIT_TOKENS = 4096  # the split floor (shorter splits cost more in prologue, partials and merge)


def split_blocks_for(u_blocks: np.ndarray, num_sms: int = NUM_SMS, waves: float = WAVES,
                     min_split_tokens: int = MIN_SPLIT_TOKENS, bn: int = 128) -> int:
    """KV blocks per split for units of `u_blocks` blocks (see gpu_runtime/attention.py `plan_attention`)."""
    u_blocks = np.asarray(u_blocks, np.int64)
    target = max(1, int(num_sms * waves))
    total = int(u_blocks.sum())
    # Small passes: the shortest splits that still fit one wave (items <= SMs, counted per unit:
    # 4032-token splits of 32K rows made 144 items, a second wave for 12 of them, 1.5x slower).
    lo_b, hi_b = 1, max(1, int(u_blocks.max(initial=1)))
    if len(u_blocks) > num_sms:  # a unit is at least one item: no split fits one wave, the search ends at hi_b
        lo_b = hi_b
    while lo_b < hi_b:
        mid = (lo_b + hi_b) // 2
        if int(np.maximum(1, -(-u_blocks // mid)).sum()) <= num_sms:
            hi_b = mid
        else:
            lo_b = mid + 1
    floor_blocks = min(-(-min_split_tokens // bn), lo_b)
    return max(1, floor_blocks, -(-total // target))


def split_of_units(units: list[int], heads: int, bn: int, num_sms: int = NUM_SMS, waves: float = WAVES,
                   min_split_tokens: int = MIN_SPLIT_TOKENS) -> tuple[int, int]:
    """(`split_blocks_for` of `heads` copies of `units`, the work items it makes): `units` the KV
    blocks of each unit of one head (every head has the same). On Python ints, starting from the
    closed form and searching only where it gives more items than SMs: the cost model calls it for
    every distinct pass it prices."""
    nu = len(units)
    total = heads * sum(units)
    umax = max(units)
    ub1 = [u if u > 1 else 1 for u in units]  # a unit of no blocks is still an item

    def count(s):  # items of the plan at split s (blocks)
        return heads * sum([-(-u // s) for u in ub1])

    split = max(1, -(-total // max(1, int(num_sms * waves))))
    items = count(split) if umax > split else heads * nu
    hi = min(-(-min_split_tokens // bn), max(1, umax))
    if items > num_sms and split < hi:
        room = num_sms - heads * nu
        if room > 0:
            hi = min(hi, -(-total // room))
            lo = min(max(split + 1, -(-total // num_sms)), hi)
        else:
            lo = hi
        while lo < hi:
            mid = (lo + hi) // 2
            if count(mid) <= num_sms:
                hi = mid
            else:
                lo = mid + 1
        split = lo
        items = count(split)
    return split, items


@functools.lru_cache(maxsize=4096)  # a pure function of the settings' few compositions: start-up asks it thousands of times
def work_cap(units: int, max_tokens: int, bn: int, num_sms: int = NUM_SMS) -> int:
    """The most work items `units` units of up to `max_tokens` keys each get from the split rule,
    over a ladder of uniform lengths up to it: a padded plan's room, fixed by the settings (the
    shape rule, gpu_runtime/shapes.py). Plans over mixed lengths that would exceed it take longer splits."""
    best, t = 1, max(1, int(max_tokens))
    while True:
        blocks = np.full(max(1, int(units)), -(-t // bn), np.int64)
        split = split_blocks_for(blocks, num_sms=num_sms, bn=bn)
        best = max(best, int(np.maximum(1, -(-blocks // split)).sum()))
        if t <= bn:
            return best
        t = (t + 1) // 2
