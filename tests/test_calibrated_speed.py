"""The calibrated model's fast work-item tail: `work_ratios` (units per pass, runs of passes with the
same units, ratios cached by KV block size and units, each computed on Python scalars) is exactly
`work_ratios_plain` (the direct vector computation, every pass), bit for bit, on random passes:
one query block or many per request, one round of work items or many, any live mask and rank order,
a tile class forced by `qmax`, and segments whose passes repeat their units (decode steps)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spsim.cost import CalibratedCostModel, CalibratedParams

PARAMS = CalibratedParams(attn_tile_eff=(0.15, 0.37, 0.42), attn_sms=132, prefill_split=True,
                          prefill_graph_tokens=2048)
MODELS = {}


def model(name: str, item: float, sms: int) -> CalibratedCostModel:
    """One model per (shape, item cost, SMs) for the whole module: its cache fills across examples."""
    key = (name, item, sms)
    if key not in MODELS:
        MODELS[key] = CalibratedCostModel(name, "h200", params=replace(PARAMS, attn_item_tokens=item, attn_sms=sms),
                                          table_q=64)
    return MODELS[key]


def fresh(cm: CalibratedCostModel) -> CalibratedCostModel:
    return CalibratedCostModel(cm.model, cm.gpu, params=cm.p, table_q=64)


models = st.builds(model, st.sampled_from(["llama-3.1-8b", "llama-3.2-3b"]), st.sampled_from([128.0, 0.0, 77.3]),
                   st.sampled_from([132, 132, 16, 400]))


@st.composite
def passes(draw):
    """(q, kv, live, qmax, rank): n passes of r request slots."""
    n = draw(st.integers(1, 12))
    r = draw(st.integers(1, 48))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    qtop = draw(st.sampled_from([1, 2, 5, 10, 40, 300, 3000]))  # 1: decode; >32: many query blocks
    ktop = draw(st.sampled_from([1, 200, 5000, 130000]))
    q = rng.integers(1, qtop + 1, (n, r))
    kv = q + rng.integers(0, ktop, (n, r))
    live = rng.random((n, r)) < draw(st.sampled_from([1.0, 0.8, 0.3]))
    if draw(st.booleans()):  # decode-like: each pass one token on from the last (runs of equal units)
        q = np.broadcast_to(q[:1], (n, r)).copy()
        kv = kv[:1] + np.arange(n)[:, None]
        live = np.broadcast_to(live[:1], (n, r)).copy()
    qmax = None
    if draw(st.booleans()):
        qmax = np.maximum(np.where(live, q, 0).max(axis=1), rng.integers(1, 200, n))
    rank = rng.integers(0, 3, (n, r)) if draw(st.booleans()) else None
    return q, kv, live, qmax, rank


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models, passes())
def test_work_ratios_equal_the_plain_computation(cm, p):
    q, kv, live, qmax, rank = p
    want = cm.work_ratios_plain(q, kv, live, qmax, rank)
    got = cm.work_ratios(q, kv, live, qmax, rank)  # the module's model: its cache from earlier examples
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)
    assert np.array_equal(cm.work_ratios(q, kv, live, qmax, rank), want)  # every ratio from the cache now
    assert np.array_equal(fresh(cm).work_ratios(q, kv, live, qmax, rank), want)  # an empty cache


@settings(max_examples=100, deadline=None)
@given(models, passes())
def test_each_pass_alone_equals_the_batch(cm, p):
    """A pass priced alone (`work_ratio`: the plan path) is its row of the batch."""
    q, kv, live, qmax, rank = p
    want = cm.work_ratios_plain(q, kv, live, qmax, rank)
    for i in range(len(q)):
        o = np.argsort(rank[i], kind="stable") if rank is not None else np.arange(q.shape[1])
        o = o[live[i][o]]
        if len(o):
            assert cm.work_ratio(q[i][o], kv[i][o], None if qmax is None else int(qmax[i])) == want[i]


def test_multi_round_and_many_query_blocks_are_covered():
    """The plain computation's branches the property test relies on: passes of more items than SMs
    (scheduled), prefill chunks of many query blocks, a full cache clearing itself."""
    cm = fresh(model("llama-3.1-8b", 128.0, 132))
    q = np.array([[2048, 1, 1], [1] * 3])
    kv = np.array([[12000, 5000, 7000], [30000, 100, 200]])
    live = np.ones_like(q, bool)
    want = cm.work_ratios_plain(q, kv, live)
    assert want[0] > 1.0
    assert np.array_equal(cm.work_ratios(q, kv, live), want)
    q = np.ones((3, 20), np.int64)  # 20 requests x 8 heads: 160 items, two rounds
    kv = np.arange(60).reshape(3, 20) * 1000 + 1
    want = cm.work_ratios_plain(q, kv, np.ones_like(q, bool))
    assert np.array_equal(cm.work_ratios(q, kv, np.ones_like(q, bool)), want)
    cm = fresh(cm)
    cm.WORK_CACHE_MAX = 2
    assert np.array_equal(cm.work_ratios(q, kv, np.ones_like(q, bool)), want)
    assert 0 < len(cm._work_cache) <= 2
    assert np.array_equal(cm.with_params(attn_sms=0).work_ratios(q, kv, np.ones_like(q, bool)), np.ones(3))


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.2-3b"])
def test_empty_batch(name):
    cm = model(name, 128.0, 132)
    z = np.zeros((0, 3), np.int64)
    assert len(cm.work_ratios(z, z, z.astype(bool))) == 0
