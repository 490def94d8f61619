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
from spsim.cost.batch import PlanBatch


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
        MODELS[key] = CalibratedCostModel(name, "h200", params=replace(PARAMS, attn_item_tokens=item, attn_sms=sms))
    return MODELS[key]


def fresh(cm: CalibratedCostModel) -> CalibratedCostModel:
    return CalibratedCostModel(cm.model, cm.gpu, params=cm.p)


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


@pytest.mark.parametrize("max_query", [1, 5, 17])
def test_plain_segment_prices_each_pass_as_time_does(max_query):
    """A plain decode segment (the simulator's path) prices each pass as `time` (the fit's path)
    does, under the shape rule for every policy's longest query: `ar` pads its logits rows for one
    token a request (a segment once priced them for 17: +8 us a pass on the H100 profile)."""
    from spsim.cost import load_cost_model
    from spsim.cost.shipped import profile_path

    cm = load_cost_model(str(profile_path("h200", "llama-3.1-8b"))).with_params(padding="rule",
                                                                                 rule_max_query=max_query)
    rng = np.random.default_rng(3)
    for r, n, top in [(1, 3, 50), (5, 4, 1500), (3, 2, 3000), (11, 3, 4000), (40, 2, 9000)]:
        batch = PlanBatch.plain(rng.integers(0, top, r).tolist(), n)
        want = np.array([cm.time(p) for p in batch.plans])
        assert np.allclose(cm.times(batch), want, rtol=1e-12, atol=0), (r, n)


# ---- the scalar paths: one pass on Python floats, a plan's work ratio on lists, the schedule ----

@settings(max_examples=300, deadline=None)
@given(st.integers(0, 700), st.integers(0, 2**32 - 1), st.sampled_from([1e-9, 1e-3, 1.0, 1e6]))
def test_row_sum_is_numpys(n, seed, scale):
    """`_row_sum` (a pass priced on Python floats) adds as numpy's row sum, bit for bit."""
    from spsim.cost.calibrated import _row_sum

    rng = np.random.default_rng(seed)
    x = rng.lognormal(0.0, 3.0, (2, n)) * scale
    assert _row_sum(x[0].tolist()) == x.sum(axis=1)[0]
    assert _row_sum(x[1].tolist()) == x[1:].sum(axis=1)[0]


def heap_makespan(units, split, bn, hkv, c, S) -> float:
    """The schedule's definition: the item list (each unit per head: items of `split` blocks, then
    the rest), each item to the SM that frees first."""
    import heapq

    items = [float(min(u - k * split, split) * bn) + c for u in units for _ in range(hkv)
             for k in range(max(1, -(-u // split)))]
    free = [0.0] * S
    for t in items:
        heapq.heapreplace(free, free[0] + t)
    return max(free)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 400), st.integers(1, 90), st.sampled_from([1, 2, 8]), st.sampled_from([16, 132]),
       st.sampled_from([0.0, 128.0]), st.sampled_from(["fits", "sorted", "random", "prefill"]),
       st.integers(0, 2**32 - 1))
def test_makespan_is_the_heap_schedule(n, split, hkv, S, c, order, seed):
    """`_makespan` (round robin where the items ascend, a heap up to HEAP_ITEMS items, numpy's steps
    beyond) is the item-by-item schedule: exactly, items being whole tokens."""
    rng = np.random.default_rng(seed)
    if order == "prefill":  # a chunk's query blocks at some context: ascending, one block more each few
        units = (rng.integers(0, 3000) + np.arange(1, n + 1) * 32 + 63) // 64
    elif order == "fits":  # ascending, one item each: round robin
        units = np.sort(rng.integers(0, split + 1, n))
    else:
        units = rng.integers(0, 3 * split + 2, n)
        units = np.sort(units) if order == "sorted" else units
    items = hkv * int(np.maximum(1, -(-units // split)).sum())
    if items <= S:
        return  # one round: never scheduled
    got = CalibratedCostModel._makespan(units.astype(np.int64), split, 64, hkv, c, S)
    assert got == heap_makespan(units.tolist(), split, 64, hkv, c, S)


def plan_work_ratio_vectors(cm, plan):
    """`plan_work_ratio` on numpy arrays (`work_ratio` of each launch): the reference the list
    version keeps."""
    if not cm.p.attn_sms:
        return 1.0, 1.0
    sparse = np.minimum(plan.draft_budget, plan.draft_context) + plan.draft_pos + 1
    q = np.concatenate([plan.prefill_tokens, np.ones(len(plan.draft_ids), np.int64), plan.verify_query])
    kv = np.concatenate([plan.prefill_context + plan.prefill_tokens, sparse, plan.verify_context + plan.verify_query])
    ruled = cm.ruled(int(q.sum()), len(q))
    tall = PlanBatch.of([plan]).split_prefill(cm)
    dummies = (1 << (len(q) - 1).bit_length()) - len(q) if ruled else 0
    if not tall.any():
        return cm.work_ratio(q, kv, None, dummies), 1.0
    m = np.zeros(len(q), bool)
    m[:len(tall)] = tall
    r_tall = cm.work_ratio(q[m], kv[m], cm._tile_cap if ruled else None)
    if not (~m).any():
        return 1.0, r_tall
    qmax = max(int(q[~m].max()), cm.p.rule_max_query) if ruled else None
    return cm.work_ratio(q[~m], kv[~m], qmax, dummies), r_tall


@pytest.mark.parametrize("padding", ["bucket", "rule"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n_pre=st.integers(0, 3), n_dr=st.integers(0, 20), n_ver=st.integers(0, 20),
       top=st.sampled_from([300, 5000, 130000]))
def test_plan_work_ratio_on_lists_is_the_vector_one(padding, seed, n_pre, n_dr, n_ver, top):
    """A plan's work ratios computed on Python lists (the step path's prefill passes) equal the
    vector computation (the same units, so the same ratio), for both shipped shapes."""
    from spsim.plan import PassPlan

    if not n_pre + n_dr + n_ver:
        return
    rng = np.random.default_rng(seed)
    for cm in (model("llama-3.1-8b", 128.0, 132), model("llama-3.2-3b", 128.0, 132)):
        cm = cm.with_params(padding=padding)
        i64 = lambda x: np.asarray(x, np.int64)  # noqa: E731
        plan = PassPlan(prefill_ids=i64(np.arange(n_pre)), prefill_context=i64(rng.integers(0, top, n_pre)),
                        prefill_tokens=i64(rng.choice([1, 7, 130, 2048], n_pre)),
                        draft_ids=i64(np.arange(n_dr) + 100), draft_context=i64(rng.integers(1, top, n_dr)),
                        draft_pos=i64(rng.integers(0, 8, n_dr)), draft_budget=int(rng.choice([256, 2048])),
                        verify_ids=i64(np.arange(n_ver) + 200), verify_context=i64(rng.integers(1, top, n_ver)),
                        verify_query=i64(rng.integers(1, 18, n_ver)))
        assert cm.plan_work_ratio(plan) == plan_work_ratio_vectors(cm, plan)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.2-3b"])
def test_class_tables_hold_every_query_their_passes_hold(name):
    """A tile class's verify table covers every query a pass of that class can hold (the columns
    past them are never read): equal to the formula there."""
    cm = CalibratedCostModel(name, "h200", params=PARAMS)
    cm.tables_fit(5000, 18)
    c = np.arange(5000)
    for q in range(1, 18):
        cls = cm.tile_class(q)
        for k in range(cls, 4):  # a pass of class k holds queries up to its tallest
            tbl = cm.verify_table_cls(k)
            assert np.array_equal(tbl[c, q], cm.full_attn(c, np.full_like(c, q), k))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models, st.integers(1, 40), st.integers(1, 24), st.sampled_from([1, 3, 40, 1000]),
       st.sampled_from([0.0, 0.3, 0.9]), st.integers(0, 2**32 - 1))
def test_code_ratios_are_each_rows_units_ratio(cm, n, w, top, dead, seed):
    """`_code_ratios` on rows of units with -1 (no unit) anywhere or nowhere, a block size per row:
    row by row `_units_ratio` of the row's units (its entries but the -1s), bit for bit, over rows of
    one round of work items and of several (many or long units, few SMs)."""
    rng = np.random.default_rng(seed)
    code = rng.integers(1, top + 1, (n, w))  # (a pass's unit has a block at least)
    code[rng.random((n, w)) < dead] = -1
    if rng.random() < 0.5:  # runs of equal rows (decode steps)
        code = code[np.sort(rng.integers(0, n, n))]
    bn = rng.choice(np.asarray(cm._wi_bn), n)
    got = fresh(cm)._code_ratios(code, bn)
    S = int(cm.p.attn_sms)
    want = [cm._units_ratio([u for u in row if u >= 0], int(b), cm._hkv, S) for row, b in zip(code.tolist(), bn)]
    assert got.view(np.int64).tolist() == np.array(want).view(np.int64).tolist()


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["llama-3.1-8b", "llama-3.2-3b"]), st.integers(0, 20000), st.integers(0, 20000),
       st.integers(0, 40), st.integers(1, 40), st.booleans(), st.booleans())
def test_page_interval_ends_price_as_the_pages(name, w, allw, n, nreq, ruled, scores):
    """A decode pass's terms may take, for its longest requests' pages, the end of the `_page_ends`
    interval holding them (`_pass_terms`): the top-k's and (with page scores) the scores' widths are
    the same there, bit for bit."""
    cm = model(name, 128.0, 132)
    ends = cm._page_ends[scores]
    we, ae = cm._page_end(w, ends), cm._page_end(allw, ends)
    sel = lambda w, allw: cm._select_cost(1e-9, n, w, ruled or None, nreq, allw)  # noqa: E731
    assert sel(w, allw) == sel(we, ae)
    if scores:
        assert cm._rule_scale(nreq, allw, ruled) == cm._rule_scale(nreq, ae, ruled)
