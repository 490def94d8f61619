"""The calibrated cost model and its profiles: the roofline when its extra terms are zero, one price
per pass whichever path prices it (scalar, vector, many plans, simulator segments), profiles that
round-trip and register without torch, the measured KV pages as capacity, and shipped profiles as
the default cost model (the regression fixture pinned to the roofline)."""

from __future__ import annotations

import json
import warnings
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spsim.build import build, build_cost_model
from spsim.config import ServingConfig
from spsim.cost import CalibratedCostModel, CalibratedParams, load_cost_model, make_cost_model, save_profile
from spsim.cost.batch import PlanBatch
from spsim.errors import SpsimError
from spsim.plan import DraftMethod, PassPlan

ROOT = Path(__file__).resolve().parent.parent
PARAMS = CalibratedParams(
    layer_fixed_s=20e-6, gemm_eff=0.8, smooth_p=2.5, weight_scale=1.1, sample_bytes_per_logit=20,
    attn_bw_scale=1.2, attn_flops_eff=0.4, attn_req_s=0.5e-6, attn_split_s=0.3e-6, eager_pass_s=4e-3,
    verify_req_s=30e-6, draft_pass_s=(2e-3, 5e-3, 3e-3, 6e-3, 7e-3),
    draft_req_s=((40e-6, 40e-6), (60e-6, 25e-6), (50e-6, 50e-6), (70e-6, 30e-6), (80e-6, 80e-6)),
    draft_page_s=((0.0, 0.0), (2e-7, 1e-8), (1e-8, 1e-8), (1e-7, 1e-8), (3e-7, 3e-7)),
    first_pass_s=(0.0, 1.5e-3, 0.0, 1e-3, 0.0), spec_pass_s=2.5e-3, attn_tile_eff=(0.12, 0.6, 0.3), attn_p=6.0,
    eager_launch_s=14e-3, eager_p=8.0, mixed_pass_s=1.5e-3, select_col_s=(0.0, 1e-7, 2e-7, 3e-7, 4e-7),
    score_col_s=2e-8, score_attn_frac=0.4, select_base_req=2.0)


@pytest.fixture(scope="module", params=[(0, False, "none"), (132, False, "none"), (132, True, "none"),
                                        (132, True, "bucket"), (0, False, "pow2"), (132, True, "rule")],
                ids=["no-tail", "work-item-tail", "graphed-split-prefill", "padded", "padded-pow2", "shape-rule"])
def cm(request):
    """The test profile, without and with the attention's work-item tail (`attn_sms`), of a
    runtime that graphs short prefill passes and plans prefill chunks apart, and of runtimes that
    pad their graphed passes (cost/padding.py)."""
    from dataclasses import replace

    sms, split, pad = request.param
    return CalibratedCostModel("llama-3.1-8b", "h200", params=replace(PARAMS, attn_sms=sms, prefill_split=split,
                                                                      prefill_graph_tokens=2048 if split else 0,
                                                                      padding=pad),
                               info={"kv_pages_allocatable": 54321})


def test_work_item_tail_is_the_greedy_makespan_of_the_runtime_plan():
    """Two rounds on 132 SMs: 16 drafts (8 heads, one 2K item each) then 2 verifications of 9 tokens
    at 4K (8 heads, a 4096-token item and a 64-token one each): 160 items; the verification items
    start when the first round's drafts end. One round (8 drafts + 1 verification): the longest item."""
    from dataclasses import replace

    cm = CalibratedCostModel("llama-3.1-8b", "h200", params=replace(PARAMS, attn_sms=132, attn_item_tokens=0.0))
    q = np.array([1] * 16 + [9, 9])
    kv = np.array([2049] * 16 + [4105, 4105])  # a 2048-token selection + the draft; 4096 + 9
    items = [2112] * 128 + [4096, 64] * 16  # 64-token blocks of the 64-row tile
    import heapq

    free = [0.0] * 132
    for t in items:
        heapq.heapreplace(free, free[0] + t)
    assert cm.work_ratio(q, kv) == pytest.approx(max(free) / (sum(items) / 132))
    assert max(free) == 2112 + 4096
    q1, kv1 = np.array([1] * 8 + [9]), np.array([2049] * 8 + [32777])
    r1 = cm.work_ratio(q1, kv1)  # 64 draft items + 8 heads x 9 splits of 4096 (the last 64): 136 items
    assert r1 > 1.0
    assert cm.with_params(attn_sms=0).work_ratio(q, kv) == 1.0


def _heap_ratio(cm, q, kv):
    """The work-item tail by its definition: the runtime's item list, item by item on a heap."""
    import heapq

    from spsim.cost.calibrated import TILES

    S, g, hkv = cm.p.attn_sms, cm.group, cm.model.kv_heads // cm.tp
    bm = max(TILES[cm.tile_class(int(q.max()))], g)
    bn, qb = max(cm.page_size, 128 if bm <= 32 else 64), max(1, bm // g)
    units = []
    for qi, ki in zip(q.tolist(), kv.tolist()):
        for j in range(-(-qi // qb)):
            units += [-(-min(ki, max(0, ki - qi + min((j + 1) * qb, qi))) // bn)] * hkv
    lo, hi = 1, max(1, max(units))  # the smallest split giving <= S items (plan_attention's search)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if sum(max(1, -(-u // mid)) for u in units) <= S else (mid + 1, hi)
    split = max(1, min(-(-4096 // bn), lo), -(-sum(units) // (S * 8)))
    items = [min(u - k * split, split) * bn + cm.p.attn_item_tokens for u in units
             for k in range(max(1, -(-u // split)))]
    free = [0.0] * S
    for t in items:
        heapq.heapreplace(free, free[0] + t)
    return max(1.0, max(free) / (sum(items) / S))


@pytest.mark.parametrize("item", [128.0, 77.3])
def test_work_ratio_is_the_heap_schedule(item):
    """The fast schedule (one round closed-form, steps and whole rounds beyond, the cache) is the
    item-by-item heap's, on passes of one round to ~40 (prefill chunks), either model's grouping;
    many passes at once (rows in any order, by rank) are each one's."""
    from dataclasses import replace

    rng = np.random.default_rng(11)
    for name in ("llama-3.1-8b", "llama-3.2-3b"):
        cm = CalibratedCostModel(name, "h200", params=replace(PARAMS, attn_sms=132, attn_item_tokens=item))
        for _ in range(40):
            n = int(rng.integers(1, 20))
            q = rng.integers(1, int(rng.choice([2, 10, 40, 3000])), n)
            kv = q + rng.integers(0, int(rng.choice([100, 5000, 130000])), n)
            assert cm.work_ratio(q, kv) == pytest.approx(_heap_ratio(cm, q, kv), rel=1e-12, abs=0)
        q = rng.integers(1, 12, (40, 9))
        kv = q + rng.integers(0, 60000, (40, 9))
        live, rank = rng.random((40, 9)) < 0.8, rng.integers(0, 2, (40, 9))
        got = cm.work_ratios(q, kv, live, rank=rank)
        for i in range(40):
            o = np.argsort(rank[i], kind="stable")
            o = o[live[i][o]]
            assert got[i] == (cm.work_ratio(q[i][o], kv[i][o]) if len(o) else 1.0)


def random_plans(seed: int, n_plans: int = 40, big: bool = False):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_plans):
        n = int(rng.integers(70, 120) if big else rng.integers(1, 12))
        ctx, bud = rng.integers(0, 130000, n), int(rng.integers(1, 9000))  # one budget, method a pass
        meth, pos = int(rng.integers(0, len(DraftMethod))), rng.integers(0, 20, n)
        q = rng.integers(1, 3000, n)
        k = [rng.random() < 0.5 for _ in range(3)]
        pick = lambda on, a: a if on else a[:0]  # noqa: E731
        ids = np.arange(n)
        out.append(PassPlan(prefill_ids=pick(k[0], ids), prefill_tokens=pick(k[0], q), prefill_context=pick(k[0], ctx),
                            draft_ids=pick(k[1], ids), draft_context=pick(k[1], ctx), draft_budget=bud,
                            draft_method=meth, draft_pos=pick(k[1], pos), verify_ids=pick(k[2], ids),
                            verify_query=pick(k[2], q % 40 + 1), verify_context=pick(k[2], ctx)))
    return [p for p in out if not p.is_empty()]


def test_neutral_constants_are_the_roofline():
    roof, cal = make_cost_model(), CalibratedCostModel()
    for p in random_plans(1) + random_plans(2, 8, big=True):
        assert cal.time(p) == pytest.approx(roof.time(p), rel=1e-12)
    ctx, q = np.array([100, 5000, 120000]), np.array([1, 5, 9])
    for m in (0, 1, 2):
        for a, b in zip(cal.marginal(ctx, 2048, m, q), roof.marginal(ctx, 2048, m, q)):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_every_path_prices_a_pass_alike(cm):
    vec = cm.with_params()
    vec.SCALAR_MAX = -1
    plans = random_plans(3) + random_plans(4, 6, big=True)
    batch = cm.times(PlanBatch.of(plans))
    for i, p in enumerate(plans):
        t = cm.time(p)
        assert t == pytest.approx(vec.time(p), rel=1e-12) and batch[i] == pytest.approx(t, rel=1e-12)
    # marginals: one request at a time (Python numbers), vector formulas and the policies' table grids
    rng = np.random.default_rng(5)
    ctx, q = rng.integers(1, 60000, 10), rng.integers(1, 17, 10)
    b, m = 2048, int(DraftMethod.VERIFY_QUEST)
    d1, v1 = cm.marginal(ctx, b, m, q)
    d2, v2 = vec.marginal(ctx, b, m, q)
    d3, v3 = cm.marginal(ctx[:, None].repeat(3, 1), b, m, q[:, None].repeat(3, 1))
    for a, c in ((d1, d2), (v1, v2), (d1, d3[:, 0]), (v1, v3[:, 0])):
        np.testing.assert_allclose(a, c, rtol=1e-12)
    # the extra terms are in: a first verify-quest draft pays the per-request and per-page costs
    args = np.array([65536]), 2048, 1, np.array([1])
    bare = cm.with_params(draft_req_s=((0.0, 0.0),) * 5, draft_page_s=((0.0, 0.0),) * 5, verify_req_s=0.0)
    (d0, v0), (d1, v1) = cm.marginal(*args), bare.marginal(*args)
    assert d0[0] - d1[0] == pytest.approx(60e-6 + 4096 * 2e-7) and v0[0] - v1[0] == pytest.approx(30e-6)
    (d0, _), (d1, _) = cm.marginal(*args, draft_pos=np.array([3])), bare.marginal(*args, draft_pos=np.array([3]))
    assert d0[0] - d1[0] == pytest.approx(25e-6 + 4096 * 1e-8)  # a later draft: its own terms


def test_simulator_segments_equal_per_pass_time(cm):
    from spsim.cost.batch import PlanBatch

    rng = np.random.default_rng(7)
    for _ in range(30):
        n, r = int(rng.integers(1, 6)), int(rng.integers(1, 7))
        kind = rng.integers(1, 3, (n, r)).astype(np.int8)
        query = np.where(kind == 2, rng.integers(1, 40, (n, r)), 1)
        ctx = rng.integers(0, 40000, (n, r))  # past 2,048 pages: every width class of the shape rule
        dpos = np.where(kind == 2, query - 1, rng.integers(0, 20, (n, r)))
        budget = 2048 if rng.random() < 0.7 else int(rng.integers(1, 8192))
        method = int(rng.integers(0, 5))
        got = cm.times(PlanBatch.decode(kind, query, ctx, dpos, budget, method))  # its grid pricing
        for i in range(n):
            d, v = kind[i] == 1, kind[i] == 2
            # a verify-attn run keeps its verifications' page scores
            plan = PassPlan(draft_ids=np.flatnonzero(d), draft_context=ctx[i, d], draft_budget=budget,
                            draft_method=method, draft_pos=dpos[i, d], verify_ids=np.flatnonzero(v),
                            verify_query=query[i, v], verify_context=ctx[i, v],
                            keep_scores=method == DraftMethod.VERIFY_ATTN)
            assert got[i] == pytest.approx(cm.time(plan), rel=1e-12)
    for context in ([5000], [100, 70000, 3000], list(range(1000, 30000, 2500))):
        plain = PlanBatch.plain(context, 5)
        grid = PlanBatch.decode(plain.kind, plain.query, plain.context, plain.draft_pos, 0, 0)
        assert np.array_equal(cm.times(plain), cm.times(grid))


def test_profile_round_trips_and_loads_without_torch(cm, tmp_path):
    path = tmp_path / "p.json"
    save_profile(cm, path)
    back = load_cost_model(path)
    assert isinstance(back, CalibratedCostModel) and back.p == cm.p and back.kv_capacity_pages() == 54321
    for p in random_plans(9, 10):
        assert back.time(p) == cm.time(p)
    code = ("import sys\nfor m in ('torch', 'triton', 'simpy', 'plotly'): sys.modules[m] = None\n"
            f"from spsim.cost import load_cost_model\ncm = load_cost_model({str(path)!r})\n"
            "assert type(cm).__name__ == 'CalibratedCostModel'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.filterwarnings("ignore:.*profile measured with")
def test_profile_checks_shape_errors_versions_warn(cm, tmp_path):
    prof = cm.to_profile()
    prof["metadata"]["versions"] = {"torch": "0.1.0", "triton": "0.1"}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(prof))
    with pytest.raises(SpsimError, match="model_name='llama-3.1-8b'"):
        load_cost_model(path, expect={"model_name": "qwen2.5-7b"})
    with pytest.raises(SpsimError, match="page_size"):
        load_cost_model(path, expect={"page_size": 32})
    import spsim.cost.profile as P

    with pytest.MonkeyPatch.context() as mp:  # a machine whose torch could run the GPU runtime
        mp.setattr(P, "_versions", lambda: {"torch": "2.11.0", "triton": "3.6.0"})
        with pytest.warns(UserWarning, match="profile measured with torch 0.1.0"):
            load_cost_model(path)
        mp.setattr(P, "_versions", lambda: {"torch": "2.13.0+cpu", "triton": "3.6.0"})
        with warnings.catch_warnings():  # a CPU build of torch: the simulator alone, nothing to warn of
            warnings.simplefilter("error")
            load_cost_model(path)
    prof["metadata"]["params"]["draft_pass_s"] = [1.0, 2.0]
    path.write_text(json.dumps(prof))
    with pytest.raises(SpsimError, match="malformed calibrated profile"):
        load_cost_model(path)


def test_profile_capacity_is_the_measured_kv_pages(cm, tmp_path):
    path = tmp_path / "p.json"
    save_profile(cm, path)
    s = build(ServingConfig(profile=str(path), policy="ar"))
    assert s.batcher_config.capacity_pages == 54321
    assert build(ServingConfig(profile=str(path), policy="ar", kv_pages=1000)).batcher_config.capacity_pages == 1000


# ---- shipped profiles

@pytest.fixture
def shipped(cm_plain, tmp_path, monkeypatch):
    """One profile shipped for the H200 and the 8B (what these tests ask of it does not depend on
    the profile's terms: not run once per `cm` variant)."""
    import spsim.cost.shipped as sh

    monkeypatch.setattr(sh, "PROFILES", tmp_path)
    path = tmp_path / "h200-llama-3.1-8b.json"
    save_profile(cm_plain, path)
    return path


def test_shipped_profiles_are_measured_calibrated_profiles_named_for_their_setting():
    import spsim.cost.shipped as sh
    from spsim.cost import read_profile

    shipped = sorted(sh.PROFILES.glob("*.json"))
    for path in shipped:
        prof = read_profile(path)
        md = prof["metadata"]
        assert prof["kind"] == "calibrated" and path.name == f"{md['gpu_name']}-{md['model_name']}.json"
        assert md["points"]["heldout"] > 0 and md["heldout_error"]["p95_abs_rel"] < 0.15 and md["kernel_version"]
        assert md["kv_pages_allocatable"] > 0 and md["device_name"] != "cpu"
        assert md["token_ids"] == "random"  # timed on varied ids, as real prompts (docs/calibration.md)
    if not any(p.name == "h200-llama-3.1-8b.json" for p in shipped):
        assert build_cost_model(ServingConfig()).name == "roofline"  # none for the default setting yet


def test_a_shipped_profile_is_the_default_cost_model(shipped):
    got = build_cost_model(ServingConfig(gpu="H200-SXM", model="8b"))
    assert got.name == "calibrated" and got.source == str(shipped)
    assert build_cost_model(ServingConfig(cost="roofline")).name == "roofline"
    for other in (dict(page_size=32), dict(kv_dtype="fp8"), dict(model="llama-3.2-3b"), dict(gpu="h100")):
        assert build_cost_model(ServingConfig(**other)).name == "roofline", other  # measured for another setting
    with pytest.raises(SpsimError, match="--cost"):
        ServingConfig(cost="measured").validate()


def test_summary_names_the_cost_model_and_profile(shipped):
    pytest.importorskip("simpy")
    from spsim.simulator.engine import SimConfig, simulate
    from spsim.traces import read_trace

    tr = read_trace("mooncake")
    tr = tr.take(np.arange(20))
    res = simulate(tr, SimConfig(policy="fixed-k:k=4", replicas=1))
    assert res.summary["config"]["cost_model"] == "calibrated" and res.summary["config"]["profile"] == str(shipped)
    assert res.summary["kv_capacity_pages"] == 54321
    res = simulate(tr, SimConfig(policy="fixed-k:k=4", replicas=1, cost="roofline"))
    assert res.summary["config"]["cost_model"] == "roofline" and res.summary["config"]["profile"] is None


def test_regression_fixture_stays_on_the_roofline(shipped):
    """With a profile shipped for the fixture's GPU and model, its cases still run the roofline."""
    pytest.importorskip("simpy")
    sys.path.insert(0, str(ROOT / "tests"))
    from regression_cases import case_name, cases, run_case

    fixture = json.loads((ROOT / "tests" / "fixtures" / "regression.json").read_text())
    case = next(c for c in cases() if c.get("max_batch") == 24)  # the smallest case
    got, want = run_case(case), fixture[case_name(case)]
    assert {k: got["summary"].get(k) for k in want["summary"]} == want["summary"]
    assert got["requests_sha256"] == want["requests_sha256"]


@pytest.fixture(scope="module")
def cm_plain():
    """The test profile without the work-item tail: the direct formulas below leave it out."""
    return CalibratedCostModel("llama-3.1-8b", "h200", params=PARAMS, info={"kv_pages_allocatable": 54321})


def test_pass_terms_tile_height_and_acceptance_path(cm_plain):
    """The pass's tallest query sets the attention tile (choose_block_m: 16/32/64/128 rows for 1-4/
    5-8/9-16/17+ tokens of the 8B's GQA group of 4, 128 with a prefill chunk) and every request of
    the pass computes whole tiles at that tile's rate; a pass verifying drafts pays the acceptance
    path once, one that also drafts the second sampling path once; a run's first verify-quest draft
    pays its selection."""
    cm = cm_plain
    assert [cm.tile_class(q) for q in (1, 4, 5, 8, 9, 16, 17, 33, 4096)] == [0, 0, 1, 1, 2, 2, 3, 3, 3]
    P = cm.p
    one = lambda q, pos=3, m=1: PassPlan(  # noqa: E731
        draft_ids=np.array([0]), draft_context=np.array([32768]), draft_budget=2048,
        draft_method=m, draft_pos=np.array([pos]), verify_ids=np.array([1]),
        verify_query=np.array([q]), verify_context=np.array([32768]))
    alone = PassPlan(verify_ids=np.array([1]), verify_query=np.array([9]), verify_context=np.array([32768]))

    def layer(n_kv, rows, eff):  # one request's attention in one layer, from the GPU's figures
        mem = -(-max(n_kv, 256) // 16) * 16 * 8 * 128 * 2 * 2 / cm.gpu.bw * P.attn_bw_scale
        cmp = rows * n_kv * 4 * 128 * 8 / (cm.gpu.flops("bf16") * eff)
        return (mem ** P.attn_p + cmp ** P.attn_p) ** (1 / P.attn_p) + -(-n_kv // 2048) * P.attn_split_s + \
            P.attn_req_s

    # the draft (2048 + 3 + 1 KV tokens) beside a 9-token verification: one 64-row tile
    draft = 32 * layer(2052, 64, P.attn_tile_eff[1]) + 25e-6 + 2048 * 1e-8  # + its per-request terms
    extra = cm.time(one(9)) - cm.time(alone)
    shared = cm.pass_overhead(10, num_logits=10) - cm.pass_overhead(9, num_logits=9)  # one more token
    assert extra == pytest.approx(draft + shared + P.draft_pass_s[1] + P.mixed_pass_s, rel=1e-9)
    # the same draft beside a plain decode: 16-row tiles at the 16-row rate, no acceptance path
    d16 = 32 * layer(2052, 16, P.attn_flops_eff) + 25e-6 + 2048 * 1e-8
    dec = PassPlan(verify_ids=np.array([1]), verify_query=np.array([1]), verify_context=np.array([32768]))
    assert cm.time(one(1)) - cm.time(dec) == pytest.approx(
        d16 + cm.pass_overhead(2, num_logits=2) - cm.pass_overhead(1, num_logits=1) + P.draft_pass_s[1]
        + P.mixed_pass_s, rel=1e-9)
    # the acceptance path: once per pass verifying drafts
    bare = cm.with_params(spec_pass_s=0.0, first_pass_s=(0.0,) * 5, mixed_pass_s=0.0)
    assert cm.time(one(9)) - bare.time(one(9)) == pytest.approx(2.5e-3 + 1.5e-3, rel=1e-9)
    assert cm.time(one(1, pos=0)) - bare.time(one(1, pos=0)) == pytest.approx(1.5e-3 + 1.5e-3, rel=1e-9)


def test_eager_passes_take_the_launch_time_at_least(cm):
    """A pass with a prefill chunk runs eager: its GPU work overlaps the host's launches, so a short
    chunk costs about the launch time and a long one about its GPU time."""
    cm = cm.with_params(prefill_graph_tokens=0)  # every prefill pass eager
    P = cm.p
    pre = lambda n: PassPlan(prefill_ids=np.array([0]), prefill_tokens=np.array([n]),  # noqa: E731
                             prefill_context=np.array([0]))
    gpu = lambda n: cm.with_params(eager_launch_s=0.0).time(pre(n)) - P.host_overhead_s  # noqa: E731
    for n in (16, 128, 8192):
        t = cm.time(pre(n)) - P.host_overhead_s
        assert t == pytest.approx((gpu(n) ** P.eager_p + P.eager_launch_s ** P.eager_p) ** (1 / P.eager_p))
        assert max(gpu(n), P.eager_launch_s) < t <= max(gpu(n), P.eager_launch_s) * 2 ** (1 / P.eager_p)
    assert cm.time(pre(16)) == pytest.approx(cm.time(pre(128)), rel=0.1)  # launch-bound: about equal
    assert cm.time(pre(8192)) > 5 * cm.time(pre(128))


def test_graphed_prefill_passes_and_prefill_chunks_planned_apart(cm):
    """A runtime that graphs passes of at most `prefill_graph_tokens` tokens prices them without
    the eager terms; one that plans 128-row prefill chunks apart prices the decodes beside a chunk
    in their own (16-row) tile, each launch with its own work-item tail."""
    from dataclasses import replace

    P = replace(cm.p, prefill_split=True, prefill_graph_tokens=2048, padding="none")  # padding: its own test
    on = CalibratedCostModel("llama-3.1-8b", "h200", params=P)
    off = CalibratedCostModel("llama-3.1-8b", "h200", params=replace(P, prefill_split=False))
    pre = lambda n, dec=0: PassPlan(  # noqa: E731
        prefill_ids=np.array([0]), prefill_tokens=np.array([n]), prefill_context=np.array([0]),
        verify_ids=np.arange(1, dec + 1), verify_query=np.ones(dec, np.int64), verify_context=np.full(dec, 16384))
    eager = on.with_params(prefill_graph_tokens=0)
    assert on.time(pre(512)) < eager.time(pre(512)) - P.eager_pass_s * 0.99
    assert on.time(pre(4096)) == pytest.approx(eager.time(pre(4096)), rel=1e-12)  # past the limit: eager
    assert on.time(pre(2048 - 16, 16)) < eager.time(pre(2048 - 16, 16))
    assert on.time(pre(2048 - 15, 16)) == pytest.approx(eager.time(pre(2048 - 15, 16)), rel=1e-12)
    # 16 decodes beside a 128-token chunk: in one launch they computed 128-row tiles
    assert on.time(pre(128, 16)) < off.time(pre(128, 16))
    assert on.time(pre(128)) == pytest.approx(off.time(pre(128)), rel=1e-12)  # nothing to split from
    assert on.time(pre(16, 16)) == pytest.approx(off.time(pre(16, 16)), rel=1e-12)  # a 64-row chunk: not split
    dec = PassPlan(verify_ids=np.arange(1, 17), verify_query=np.ones(16, np.int64), verify_context=np.full(16, 16384))
    plain = on.with_params(attn_sms=0)
    added = plain.time(pre(128, 16)) - plain.time(dec)
    alone = plain.time(pre(128)) - plain.pass_overhead(128, num_logits=1)
    assert added == pytest.approx(alone + plain.pass_overhead(144, num_logits=17) - plain.pass_overhead(16, num_logits=16),
                                  rel=1e-9)  # the chunk's price is its own, the decodes' unchanged
    batch = on.times(PlanBatch.of([pre(128, 16), pre(16, 16), pre(128), pre(4096, 3)]))
    for i, p in enumerate([pre(128, 16), pre(16, 16), pre(128), pre(4096, 3)]):
        assert batch[i] == pytest.approx(on.time(p), rel=1e-12)


def test_selection_pays_the_longest_page_list(cm):
    """Top-k over [selecting requests, the longest page list rounded up to a power of two]: two
    first verify-quest drafts at 4K and 100K pay 2 x 8192 columns; later drafts select nothing;
    step-quest's drafts select every step. Each selection also pays one row's latency
    (`select_base_req` requests' worth). Padded graphed passes select for every drafting row (a
    first-draft selection as long as them); under the shape rule every request selects, padded to
    a power of two, at the width class of the longest (4K: 2,048 pages; 100K: the top one, 8,256
    pages of a 128K window, 16,384 columns)."""
    ps = 16
    plan = lambda ctx, pos, m: PassPlan(  # noqa: E731
        draft_ids=np.arange(len(ctx)), draft_context=np.array(ctx), draft_budget=2048,
        draft_method=m, draft_pos=np.array(pos))
    off = cm.with_params(select_col_s=(0.0,) * 5)
    sel = lambda p: cm.time(p) - off.time(p)  # noqa: E731
    b, mode = cm.p.select_base_req, cm.p.padding
    rule = mode == "rule"

    def rows(n, first):  # selecting rows of n drafts, `first` of them a run's first (None: step-refreshed)
        if rule:
            return 1 << (n - 1).bit_length()
        d = {"none": n, "bucket": {2: 2, 3: 3}[n], "pow2": 1 << (n - 1).bit_length()}[mode]
        if first is None:
            return d
        return d if d > first else 1 << (first - 1).bit_length()

    big = 16384 if rule else 8192
    assert -(-(100_000 + 1) // ps) <= 8192
    assert sel(plan([4096, 100_000], [0, 0], 1)) == pytest.approx(1e-7 * (rows(2, 2) + b) * big)
    small = 2048 if rule else 512  # 257 pages -> 384 -> 512, or the rule's 2,048-page class
    assert sel(plan([4096, 4096], [0, 0], 1)) == pytest.approx(1e-7 * (rows(2, 2) + b) * small)
    assert sel(plan([4096, 100_000], [0, 3], 1)) == pytest.approx(1e-7 * (rows(2, 1) + b) * big)  # the first only
    assert sel(plan([4096, 100_000, 5000], [0, 0, 0], 1)) == pytest.approx(1e-7 * (rows(3, 3) + b) * big)  # 3 -> 4
    assert sel(plan([4096, 100_000], [1, 3], 1)) == 0.0
    assert sel(plan([4096, 100_000], [1, 3], 4)) == pytest.approx(4e-7 * (rows(2, None) + b) * big)
    assert sel(plan([4096, 100_000], [0, 0], 0)) == 0.0  # static


def test_a_verify_attn_run_pays_for_its_page_scores_in_every_pass_that_verifies(cm):
    """The runtime's attention kernel writes page scores in every pass of a verify-attn run that
    verifies (pass_attention.py), drafts in it or not; measured 1.3-1.5x on the H200 for 16 x 32K
    verifications of 5 and 9 tokens. The plan, batch and segment prices agree, and a run of
    another method pays nothing."""
    from spsim.cost.batch import PlanBatch

    def plan(keep, drafts=0):
        return PassPlan(draft_ids=np.arange(drafts), draft_context=np.full(drafts, 32768),
                        draft_budget=2048, draft_method=3 if keep else 1,
                        draft_pos=np.zeros(drafts, np.int64), verify_ids=np.arange(drafts, drafts + 16),
                        verify_query=np.full(16, 9), verify_context=np.full(16, 32768), keep_scores=keep)

    for drafts in (0, 4):
        kept, plain = cm.time(plan(True, drafts)), cm.time(plan(False, drafts))
        assert kept > plain * 1.2
        batch = cm.times(PlanBatch.of([plan(True, drafts), plan(False, drafts)]))
        assert batch[0] == pytest.approx(kept, rel=1e-12) and batch[1] == pytest.approx(plain, rel=1e-12)
        assert float(cm.times(PlanBatch.from_plan(plan(True, drafts)))[0]) == pytest.approx(kept, rel=1e-12)
    from dataclasses import replace

    off = CalibratedCostModel("llama-3.1-8b", "h200", params=replace(cm.p, score_attn_frac=0.0, score_col_s=0.0))
    assert off.time(plan(True)) == pytest.approx(off.time(plan(False)), rel=1e-12)


def test_a_profile_of_another_model_is_an_error_naming_the_fix(cm, tmp_path):
    """`--profile` of one model with `--model` another: one error naming both and the option that
    fixes it, not a run that prices one model and sizes another."""
    path = tmp_path / "p.json"
    save_profile(cm, path)  # llama-3.1-8b
    with pytest.raises(SpsimError, match=r"model_name='llama-3.1-8b'.*'llama-3.2-3b'.*--model llama-3.1-8b"):
        build(ServingConfig(profile=str(path), policy="ar", model="llama-3.2-3b"))
    assert build(ServingConfig(profile=str(path), policy="ar", model="llama-3.1-8b")).batcher_config.capacity_pages > 0


def test_the_shape_rule_runs_decodes_beside_prefill_in_the_prefill_tile():
    """Under the shape rule a graphed pass carrying prefill runs its other requests in the tallest
    tile a verification can need (17 tokens x a GQA group of 4: 128 rows; gpu_runtime/executor.py
    `tile_q`): a slower 128-row tile then slows the decodes beside a 128-token chunk too, where the
    bucket padding prices them in their own 16-row tile and only the chunk (its own launch) slows.
    Measured on the H100: 64 decodes at 4K took 18.5 ms alone, 26.3 beside a 128-token chunk (9.9
    alone); priced in their own tile the pass came out 14-17 % low."""
    from dataclasses import replace

    chunk = PassPlan(prefill_ids=np.array([100]), prefill_context=np.array([0]), prefill_tokens=np.array([128]),
                     prefill_last=np.array([True]))
    both = PassPlan(prefill_ids=np.array([100]), prefill_context=np.array([0]), prefill_tokens=np.array([128]),
                    prefill_last=np.array([True]), verify_ids=np.arange(64), verify_context=np.full(64, 4096),
                    verify_query=np.ones(64, np.int64))
    for pad, decodes_slow in (("bucket", False), ("rule", True)):
        p = replace(PARAMS, attn_sms=132, prefill_split=True, prefill_graph_tokens=2048, padding=pad)
        fast = CalibratedCostModel("llama-3.1-8b", "h200", params=p)
        slow = fast.with_params(attn_tile_eff=PARAMS.attn_tile_eff[:2] + (PARAMS.attn_tile_eff[2] / 4,))
        d_chunk = slow.time(chunk) - fast.time(chunk)
        d_both = slow.time(both) - fast.time(both)
        assert d_chunk > 0
        if decodes_slow:
            assert d_both > d_chunk + 1e-3  # 64 decodes' 128-row tiles at a quarter the rate
        else:
            assert d_both == pytest.approx(d_chunk, rel=1e-9)
        for m in (fast, slow):  # and every path agrees
            assert m.times(PlanBatch.of([chunk, both])) == pytest.approx([m.time(chunk), m.time(both)], rel=1e-12)


def test_the_shape_rules_dummy_verifiers_take_sms_from_the_split_rule():
    """8 drafts and 2 five-token verifications at 4K: padded by the shape rule to 16 requests, the
    6 dummy verifiers are 48 units of one block that leave the split rule no room to cut the
    verifications' 65 blocks in 17-block items (4 each, as without them): they run as 4096-token
    items, twice a draft's 2049, and the launch lasts that long (measured on the H100: such
    passes were priced 8-11 % low without the dummies)."""
    from dataclasses import replace

    plan = PassPlan(draft_ids=np.arange(8), draft_context=np.full(8, 4096), draft_budget=2048, draft_method=0,
                    draft_pos=np.array([0, 1, 2, 3] * 2), verify_ids=np.arange(8, 10),
                    verify_context=np.full(2, 4096), verify_query=np.full(2, 5))
    p = replace(PARAMS, attn_sms=132, attn_item_tokens=0.0, prefill_split=True, prefill_graph_tokens=2048)
    bucket = CalibratedCostModel("llama-3.1-8b", "h200", params=replace(p, padding="bucket"))
    rule = CalibratedCostModel("llama-3.1-8b", "h200", params=replace(p, padding="rule"))
    r_bucket, r_rule = bucket.plan_work_ratio(plan)[0], rule.plan_work_ratio(plan)[0]
    q = np.array([1] * 8 + [5, 5])
    kv = np.array([2049, 2050, 2051, 2052] * 2 + [4101, 4101])
    assert r_rule == rule.work_ratio(q, kv, None, 6) > 1.5 * r_bucket
    assert r_bucket == bucket.work_ratio(q, kv)
    # the simulator's segments (grid) price the same dummies
    assert rule.times(PlanBatch.from_plan(plan))[0] == pytest.approx(rule.time(plan), rel=1e-12)


def test_tail_bandwidth_share_blends_the_makespan_towards_the_mean():
    """`attn_tail_bw` (k): once fewer items than SMs are left in a short-tile launch, the m still
    running share the HBM, each at min(k, SMs / m) of its fair share. k = 1 is the makespan bit for
    bit; one round of items is the fluid schedule's closed form; more rounds: all SMs busy up to
    the first end, then the same; the ratio falls with k towards 1; the tall tiles keep theirs."""
    from dataclasses import replace

    from spsim.worklist import split_of_units

    base = CalibratedCostModel("llama-3.1-8b", "h200", params=replace(PARAMS, attn_sms=132))
    assert CalibratedParams().attn_tail_bw == 1.0
    mixed = (np.ones(11, np.int64), np.array([30, 200, 400, 700, 900, 1000, 1100, 1200, 1300, 1400, 1449]) + 1)
    uniform = (np.ones(20, np.int64), np.full(20, 16385))  # more items than SMs
    for q, kv in (mixed, uniform):
        r1 = base.work_ratio(q, kv)
        assert base.with_params(attn_tail_bw=1.0).work_ratio(q, kv) == r1
        rs = [base.with_params(attn_tail_bw=k).work_ratio(q, kv) for k in (1.0, 1.5, 2.0, 4.0, 1e6)]
        assert all(a >= b for a, b in zip(rs, rs[1:])) and rs[-1] == pytest.approx(1.0)
    # one round, by hand: the items (split of the plan), sorted, each phase at max(1/k, m/S)
    cm = base.with_params(attn_tail_bw=2.0)
    units = [-(-int(x) // 128) for x in mixed[1]]
    split, items = split_of_units(units, 8, 128, 132)
    assert items <= 132
    c = cm.p.attn_item_tokens
    lens = sorted(x for u in units for x in ([min(split, u - i * split) for i in range(-(-u // split))] or [0])
                  for _ in range(8))
    lens = [x * 128 + c for x in lens]
    t, prev = 0.0, 0.0
    for i, x in enumerate(lens):
        t += (x - prev) * max(0.5, (len(lens) - i) / 132)
        prev = x
    assert cm.work_ratio(*mixed) == pytest.approx(t / (sum(lens) / 132))
    # a prefill chunk's launch (128-row tiles) keeps its makespan
    q, kv = np.array([512]), np.array([4608])
    assert cm.work_ratio(q, kv) == base.work_ratio(q, kv)
    with pytest.raises(ValueError):
        CalibratedParams(attn_tail_bw=0.5).check()


def test_tail_parts_price_a_batch_at_any_tail_share_as_the_plans():
    """`plan_work_parts` (what a fit keeps of a batch's work ratios apart from `attn_tail_bw`) and
    `tail_ratio` give each plan's `plan_work_ratio` to the bit, at every k; k = 1 keeps the ratios
    as before (no parts)."""
    from dataclasses import replace

    base = CalibratedCostModel("llama-3.1-8b", "h200", params=replace(PARAMS, attn_sms=132, prefill_split=True))
    rng = np.random.default_rng(5)
    plans = []
    for n in (3, 11, 16, 40, 150):
        ctx = rng.integers(20, 6000, n)
        plans.append(PassPlan(verify_ids=np.arange(n), verify_context=ctx, verify_query=np.ones(n, np.int64)))
    plans.append(PassPlan(prefill_ids=np.array([0]), prefill_tokens=np.array([700]), prefill_context=np.array([0]),
                          prefill_last=np.array([True]), verify_ids=np.arange(1, 9),
                          verify_context=rng.integers(20, 3000, 8), verify_query=np.full(8, 3)))
    b = PlanBatch.of(plans)
    for k in (1.0, 1.2, 2.5):
        cm = base.with_params(attn_tail_bw=k)
        want = np.array([cm.plan_work_ratio(p) for p in plans]).T
        got = np.array(b.work_ratios(cm))
        assert np.array_equal(got, want), k
        np.testing.assert_allclose(cm.times(b), [cm.time(p) for p in plans], rtol=1e-12, atol=0)
    r, tails = base.with_params(attn_tail_bw=1.5).plan_work_parts(plans)
    assert tails and np.isfinite(r).all() and not base._parts
