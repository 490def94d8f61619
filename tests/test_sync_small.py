"""`sync` (auto k) decides small batches (< 8 requests) on Python floats (`Sync._choose_small`): the
choice must be exactly the array path's (`argmax` of `_rates`), or runs would differ by batch size.
Under the roofline and under the shipped H200 profile (whose once-per-pass speculation terms both
paths add)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st


_COSTS: dict = {}


def _cost(kind: str):
    if kind not in _COSTS:
        from spsim.cost import RooflineCostModel

        if kind == "roofline":
            _COSTS[kind] = RooflineCostModel()
        else:
            from spsim.cost.shipped import PROFILES
            from spsim.cost import read_profile
            from spsim.cost.calibrated import CalibratedCostModel

            _COSTS[kind] = CalibratedCostModel.from_profile(read_profile(PROFILES / "h200-llama-3.1-8b.json"))
    return _COSTS[kind]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 100_000), n=st.integers(1, 7), k_max=st.integers(1, 16),
       method=st.sampled_from([0, 1, 2, 3, 4]), ctx_hi=st.sampled_from([600, 40000, 200000]),
       rem_hi=st.sampled_from([2, 5, 500]), cost=st.sampled_from(["roofline", "calibrated"]))
def test_small_batches_choose_as_the_array_path(seed, n, k_max, method, ctx_hi, rem_hi, cost):
    from spsim.policies.base import DecodeView, PolicyContext
    from spsim.policies.sync import Sync

    rng = np.random.default_rng(seed)
    if cost == "calibrated":  # its tables stop at the profile's 128K window
        ctx_hi = min(ctx_hi, 120_000)
    pol = Sync(k_max=k_max)
    pol.bind(PolicyContext(_cost(cost)))
    ids = np.arange(n, dtype=np.int64)
    pol.acc.update(ids, rng.integers(1, 9, n), rng.integers(0, 9, n))
    view = DecodeView(ids=ids, context=rng.integers(1, ctx_hi, n), drafted=np.zeros(n, np.int64),
                      remaining=rng.integers(1, rem_hi + 1, n), committed=rng.integers(0, 300, n),
                      budget=2048, method=method,
                      last_entropy=np.full(n, np.nan), sum_entropy=np.zeros(n), num_decode=n, prefill_tokens=0,
                      max_draft=16)
    a = pol.acc.get(view.ids, view.committed)
    K = min(pol.k_max, view.max_draft)
    small = pol._choose_small(a, view, K)
    assert small is not None  # the roofline's tables serve these batches
    rates = pol._rates(a[None, :], view.context[None, :], view.remaining[None, :], view, K)[0]
    assert small == int(np.argmax(rates))
