"""Pass padding's sizes (padding.py): few distinct shapes, never fewer than asked, scratch bounds."""

import numpy as np

from spsim.buckets import bucket, pow2
from spsim.gpu_runtime.padding import PassPadding, pad_count


def test_pad_count_sizes():
    sizes = [pad_count(n) for n in range(0, 200)]
    assert sizes[:5] == [0, 1, 2, 3, 4] and pad_count(5) == 6 and pad_count(7) == 8 and pad_count(9) == 12
    assert all(s >= n for n, s in enumerate(sizes)) and all(s <= max(2, 1.5 * n) for n, s in enumerate(sizes))
    assert len(set(sizes)) == 17  # 0..4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256


def test_dummies_filler_and_logit_rows():
    p = PassPadding(scratch_first_page=1000, page_size=16)
    assert p.drafters(0) == [] and len(p.drafters(5)) == 1 and len(p.verifiers(9)) == 3
    assert all(r < 0 for r in p.drafters(5) + p.verifiers(9) + [p.FILLER_RID])
    assert len(set(p.drafters(5) + p.verifiers(9) + [p.FILLER_RID])) == 1 + 3 + 1  # distinct ids
    for t in range(1, 600):
        q = p.filler_tokens(t)
        assert (q >= 1 and t + q == bucket(t + 1, 8)) or q == 0
        assert q <= 16 * 16
    rows = list(range(7))
    out = p.logit_rows(rows, [40, 41])
    assert out[:7] == rows and len(out) == bucket(7, 8) and set(out[7:]) <= {40, 41}
    assert np.array_equal(p.table, np.arange(1000, 1016))


def test_coarse_padding_is_powers_of_two():
    """--coarse-shapes: every count and size a power of two, never fewer than asked."""
    p = PassPadding(scratch_first_page=1000, page_size=16, coarse=True)
    assert p.drafters(0) == [] and p.verifiers(0) == []
    for n in range(1, 130):
        for got in (n + len(p.drafters(n)), n + len(p.verifiers(n))):
            assert got >= n and got & (got - 1) == 0 and got < 2 * n + 1
    for t in range(1, 250):
        q = p.filler_tokens(t)
        assert q >= 1 and t + q == pow2(t + 1, 8)
    out = p.logit_rows(list(range(9)), [40])
    assert len(out) == 16 and out[9:] == [40] * 7
    sizes = {n + len(p.drafters(n)) for n in range(1, 129)}
    assert len(sizes) == 8 < len({pad_count(n) for n in range(1, 129)})  # 1, 2, 4, ..., 128
