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


def work_ratios_plain(cm, q, kv, live, qmax=None, rank=None) -> np.ndarray:
    """`cm.work_ratios` computed directly, every pass as vectors (no cache; the reference):
    `work_ratio` of many passes: row i holds pass i's requests where `live` (other entries
    are ignored), in pass order, or in the order of `rank` (a stable sort of row i's rank).
    Exact, with no per-pass Python where the plan has at most `attn_sms` items (one round: the
    makespan is the longest item, the ratio closed-form; the order does not matter); the rest
    are scheduled (`cm._makespan`)."""
    P = cm.p
    S = int(P.attn_sms)
    n = len(q)
    if not S:
        return np.ones(n)
    hkv = max(1, cm.model.kv_heads // cm.tp)
    cls = cm.tile_class(np.where(live, q, 0).max(axis=1) if qmax is None else np.asarray(qmax))
    bn, qb, cap = cm._wi_bn[cls], cm._wi_qb[cls][:, None], cm._wi_cap[cls]
    nqb = np.where(live, -(-q // qb), 0)  # query blocks (q >= 1)
    J = int(nqb.max()) if n else 0
    if J <= 1:  # one query block per request (every decode pass): units = requests
        uv = live
        u_end = np.minimum(kv, np.maximum(0, kv - q + np.minimum(qb, q)))
    else:  # units in request order, query blocks inner (as the plan)
        j = np.arange(J)
        uv = (j < nqb[:, :, None]).reshape(n, -1)
        q3, kv3 = q[:, :, None], kv[:, :, None]
        u_end = np.minimum(kv3, np.maximum(0, kv3 - q3 + np.minimum((j + 1) * qb[:, :, None], q3))).reshape(n, -1)
    ub = np.where(uv, -(-u_end // bn[:, None]), 0)  # KV blocks of each unit (one head)
    ub1 = np.where(uv, np.maximum(ub, 1), 0)  # a unit of no blocks is still an item
    umax = ub.max(axis=1)
    total = hkv * ub.sum(axis=1)

    def count(s):  # items of the plan at split s (blocks): every head has the same units
        return hkv * (-(-ub1 // s[:, None])).sum(axis=1)

    # plan_attention's split: the smallest giving <= S items (lo), at most ATTN_MIN_SPLIT tokens
    # (cap), at least w = total / (S x waves): max(1, min(cap, lo), w). Where w gives <= S items
    # it is that; else the smallest in (w, min(cap, umax)] giving <= S items, or that bound
    split = np.maximum(1, -(-total // max(1, int(S * cm.ATTN_WAVES))))
    items = count(split)
    hi = np.minimum(cap, np.maximum(1, umax))
    grow = (items > S) & (split < hi)
    if grow.any():
        # bounds: items >= total / s (so s >= total / S) and items <= units x heads + total / s
        # (so s = total / (S - units x heads) is enough); more units than S: none is (hi)
        room = S - hkv * uv.sum(axis=1)
        hi = np.where(room > 0, np.minimum(hi, -(-total // np.maximum(room, 1))), hi)
        lo = np.where(room > 0, np.minimum(np.maximum(split + 1, -(-total // S)), hi), hi)
        act = grow & (lo < hi)
        while act.any():
            mid = (lo + hi) // 2
            ok = count(np.maximum(mid, 1)) <= S  # rows not searching may hold 0 (no work): unused
            hi = np.where(act & ok, mid, hi)
            lo = np.where(act & ~ok, mid + 1, lo)
            act = lo < hi
        split = np.where(grow, lo, split)
        items = np.where(grow, count(split), items)
    any_live = items > 0
    c = float(P.attn_item_tokens)
    work = (total * bn).astype(np.float64) + c * items  # all items' tokens
    longest = (np.minimum(umax, split) * bn).astype(np.float64) + c
    ideal = np.where(any_live, work, 1.0) / S
    r = np.where(any_live, np.maximum(1.0, longest / ideal), 1.0)
    for i in np.flatnonzero(any_live & (items > S)).tolist():  # more than one round
        u, v = ub[i], uv[i]
        if rank is not None:  # units of a request stay together (query blocks inner)
            o = np.argsort(rank[i], kind="stable")
            u, v = u.reshape(len(o), -1)[o].ravel(), v.reshape(len(o), -1)[o].ravel()
        span = cm._makespan(u[v], int(split[i]), int(bn[i]), hkv, c, S)
        r[i] = max(1.0, span / ideal[i])
    return r

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
    want = work_ratios_plain(cm, q, kv, live, qmax, rank)
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
    want = work_ratios_plain(cm, q, kv, live, qmax, rank)
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
    want = work_ratios_plain(cm, q, kv, live)
    assert want[0] > 1.0
    assert np.array_equal(cm.work_ratios(q, kv, live), want)
    q = np.ones((3, 20), np.int64)  # 20 requests x 8 heads: 160 items, two rounds
    kv = np.arange(60).reshape(3, 20) * 1000 + 1
    want = work_ratios_plain(cm, q, kv, np.ones_like(q, bool))
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


@pytest.mark.parametrize("gpu_model", [("h200", "llama-3.1-8b"), ("h200", "llama-3.2-3b")])
@pytest.mark.parametrize("variant", [{}, {"padding": "none"}, {"padding": "pow2"}, {"padding": "rule"},
                                     {"attn_sms": 0}, {"attn_tile_eff": None}])
def test_plain_decodes_equal_their_segment(gpu_model, variant):
    """Plain decodes priced apart (`PlanBatch.plain`, and decode grids of plain passes: the step
    path's one-pass ones) are the general grid pricing, bit for bit, under the shipped profiles
    and variants of them."""
    from spsim.cost import load_cost_model
    from spsim.cost.batch import PlanBatch
    from spsim.cost.shipped import profile_path

    cm = load_cost_model(str(profile_path(*gpu_model)))
    if variant:
        cm = cm.with_params(**variant)
    general = cm.with_params()
    general._plain_times = lambda ctx: None  # the general machinery (the reference)
    rng = np.random.default_rng(7)
    for r, n, top in [(1, 1, 50), (3, 40, 3000), (7, 200, 500), (8, 13, 70000), (40, 300, 9000), (130, 5, 2000)]:
        context = rng.integers(0, top, r).tolist()
        plain = PlanBatch.plain(context, n)
        seg = PlanBatch.decode(plain.kind, plain.query, plain.context, plain.draft_pos, 0, 0)
        want = general.times(seg)
        for got in (cm.times(PlanBatch.plain(context, n)), cm.times(seg)):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got, want)
        one = PlanBatch.decode(seg.kind[:1], seg.query[:1], rng.integers(0, top, (1, r)), seg.draft_pos[:1],
                               seg.budget + 64, seg.method + 1)  # a step's pass: any contexts, a drafting run's
        assert np.array_equal(cm.times(one), general.times(one))
