"""Catalogs, KV memory accounting and the analytic roofline cost model."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spsim.cost import CostModel
from spsim.errors import SpsimError
from spsim.hardware import GPUS, get_gpu
from spsim.memory import kv_capacity_pages, page_bytes
from spsim.models import MODELS, get_model
from spsim.cost.constant import ConstantCostModel
from spsim.plan import DraftMethod, PassPlan
from spsim.cost.batch import PlanBatch
from spsim.cost import RooflineCostModel, fit_error, load_cost_model, make_cost_model, save_profile

I = np.int64


@pytest.fixture(scope="module")
def cm():
    return make_cost_model()


def verify_plan(ctx, query):
    ctx, query = np.asarray(ctx, I), np.asarray(query, I)
    return PassPlan(verify_ids=np.arange(len(ctx)), verify_query=query, verify_context=ctx)


def draft_plan(ctx, budget, method, pos):
    ctx = np.asarray(ctx, I)
    n = len(ctx)
    return PassPlan(draft_ids=np.arange(n), draft_context=ctx, draft_budget=int(budget), draft_method=int(method),
                    draft_pos=np.broadcast_to(np.asarray(pos, I), n).copy())


# ---- catalogs ----

def test_catalogs_hold_the_required_entries_with_published_sizes():
    for name in ("llama-3.1-8b", "llama-3.2-3b", "qwen2.5-7b", "qwen2.5-14b", "llama-3.1-70b"):
        m = MODELS[name]
        assert abs(m.params / m.published_params - 1) < 0.01, name  # shapes reproduce the model card
    for name in ("h100-sxm", "h100-nvl", "h200", "a100-80gb"):
        assert name in GPUS
    assert get_model("llama-3.1-8b").kv_bytes_per_token("bf16") == 2 * 32 * 8 * 128 * 2
    assert get_model("8b").kv_bytes_per_token("fp8") * 2 == get_model("8b").kv_bytes_per_token("bf16")
    assert get_model("70b").weight_bytes("fp8") < 0.52 * get_model("70b").weight_bytes("bf16")


@pytest.mark.parametrize("alias,name", [("8B", "llama-3.1-8b"), ("Llama3-8B", "llama-3.1-8b"),
                                        ("LLAMA-3.1-70B", "llama-3.1-70b"), ("qwen2.5_14b", "qwen2.5-14b")])
def test_model_aliases_case_insensitive(alias, name):
    assert get_model(alias).name == name


@pytest.mark.parametrize("alias,name", [("H200-SXM", "h200"), ("h100", "h100-sxm"), ("NVIDIA H100 NVL", "h100-nvl"),
                                        ("A100", "a100-80gb")])
def test_gpu_aliases_case_insensitive(alias, name):
    assert get_gpu(alias).name == name


def test_unknown_names_list_the_known_ones():
    with pytest.raises(SpsimError, match="llama-3.1-8b.*llama-3.1-70b"):
        get_model("gpt-5")
    with pytest.raises(SpsimError, match="h100-sxm.*a100-80gb"):
        get_gpu("tpu-v5")
    with pytest.raises(SpsimError, match="dtype"):
        page_bytes("8b", kv_dtype="int3")


# ---- memory ----

def test_selection_metadata_costs_two_over_page_size_of_the_keys():
    for ps in (16, 32):
        with_meta, without = page_bytes("8b", ps), page_bytes("8b", ps, selection_metadata=False)
        keys = without // 2
        assert with_meta - without == 2 * keys // ps
    assert page_bytes("8b", 16, "fp8") * 2 == page_bytes("8b", 16, "bf16")
    assert page_bytes("8b", 16, tp=2) * 2 == page_bytes("8b", 16, tp=1)  # KV heads split over GPUs
    assert page_bytes("8b", 16, tp=16) == page_bytes("8b", 16, tp=8)  # 8 KV heads: replicated past tp=8


def test_kv_capacity_follows_weights_and_dtypes():
    base = kv_capacity_pages("8b", "h200")
    g = get_gpu("h200")
    free = int(g.mem_bytes * 0.9) - get_model("8b").weight_bytes("bf16")
    assert base == free // page_bytes("8b")
    assert kv_capacity_pages("8b", "h200", kv_dtype="fp8") >= 2 * base - 1
    assert kv_capacity_pages("8b", "h200", weight_dtype="fp8") > base
    assert kv_capacity_pages("8b", "h200", reserve_frac=0.2) < base
    # bigger pages: half the pages, but the per-page min/max keys shrink relative to the KV
    assert kv_capacity_pages("8b", "h200", page_size=32) == free // page_bytes("8b", 32) > base // 2


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80gb", "h200"])
def test_70b_needs_tp2_on_80gb_cards(gpu):
    with pytest.raises(SpsimError, match=r"tp>=2"):
        kv_capacity_pages("llama-3.1-70b", gpu, tp=1)
    with pytest.raises(SpsimError, match=r"tp>=2"):
        make_cost_model("llama-3.1-70b", gpu, tp=1)
    assert kv_capacity_pages("llama-3.1-70b", gpu, tp=2) > 1000
    make_cost_model("llama-3.1-70b", gpu, tp=2)


def test_bad_tp_and_page_size_are_user_errors():
    with pytest.raises(SpsimError, match="does not divide"):
        make_cost_model("8b", tp=3)
    with pytest.raises(SpsimError, match="positive"):
        kv_capacity_pages("8b", "h200", tp=0)
    with pytest.raises(SpsimError, match="page size"):
        make_cost_model(page_size=0)


# ---- the linear part ----

def test_fit_to_h200_8b_pass_times_is_within_ten_percent():
    err = fit_error()
    assert err["max_abs_rel"] < 0.10 and err["rms_rel"] < 0.05


def test_pass_overhead_flat_then_compute_bound(cm):
    t = {n: cm.pass_overhead(n) for n in (1, 64, 128, 512, 2048)}
    assert t[64] / t[1] < 1.12  # weights dominate while the GEMMs are memory-bound
    assert t[1] < t[64] < t[128] < t[512] < t[2048]
    assert 3.5 < t[2048] / t[512] < 4.5  # compute-bound: ~linear in tokens
    assert cm.pass_overhead(0) == 0.0 and cm.time(PassPlan()) == 0.0


def test_fp8_weights_speed_up_weight_bound_passes():
    bf, f8 = make_cost_model(), make_cost_model(weight_dtype="fp8")
    assert f8.pass_overhead(8) < 0.7 * bf.pass_overhead(8)
    a100 = make_cost_model(gpu="a100", weight_dtype="fp8")  # no fp8 tensor cores: same flops as bf16
    assert a100.token_flop_s == make_cost_model(gpu="a100").token_flop_s


def test_tensor_parallel_splits_work_and_adds_communication():
    t2 = make_cost_model("70b", "h200", tp=2)
    t4 = make_cost_model("70b", "h200", tp=4)
    plan = verify_plan([16000] * 8, [1] * 8)
    assert t4.time(plan) < t2.time(plan) < 2 * t4.time(plan)
    no_comm = t2.with_params()
    no_comm.comm_fixed_s = no_comm.comm_token_s = 0.0
    assert t2.time(plan) - no_comm.time(plan) > 2 * 80 * 8e-6  # two all-reduces per layer
    assert make_cost_model("8b").comm_fixed_s == 0.0


# ---- attention ----

def test_verify_reads_kv_once_and_grows_with_query(cm):
    ctx = np.full(8, 32768, I)
    _, dec = cm.marginal(ctx, 2048, 0, np.ones(8, I))
    prev = dec
    for q in (5, 9, 17, 33):
        _, v = cm.marginal(ctx, 2048, 0, np.full(8, q, I))
        assert np.all(v > prev)  # flops grow with the query
        prev = v
    _, v17 = cm.marginal(ctx, 2048, 0, np.full(8, 17, I))
    assert np.all(v17 < 2 * dec)  # GQA packed: KV once per KV head, not per query head


def test_decode_attention_streams_kv_near_copy_bandwidth(cm):
    ctx = np.full(8, 131072, I)
    _, dec = cm.marginal(ctx, 2048, 0, np.ones(8, I))
    bw = 8 * 131072 * cm.model.kv_bytes_per_token() / dec.sum()
    assert 3.5e12 < bw < 4.27e12 * 1.001  # SDPA measured 4.2-4.6 TB/s at batch >= 8


def test_draft_reads_its_budget_and_methods_order(cm):
    one = lambda ctx, m, pos: cm.time(draft_plan([ctx], 2048, m, pos))  # noqa: E731
    S, V, T = DraftMethod.STATIC, DraftMethod.VERIFY_QUEST, DraftMethod.STEP_LAYER
    assert one(8192, S, 3) == one(65536, S, 3)  # only min(budget, context) is read
    assert one(1024, S, 3) < one(2048, S, 3)
    assert one(8192, S, 6) > one(8192, S, 3)  # provisional drafted tokens are read too
    assert one(65536, V, 0) > one(65536, V, 1) == one(65536, S, 1)  # scoring once per draft run
    assert one(65536, T, 1) > one(65536, S, 1)  # one designated layer reads the full KV each step
    assert one(65536, T, 1) < one(65536, V, 0)  # ...and ranks pages itself: no Quest scoring
    assert one(131072, T, 1) > one(65536, T, 1)  # the full layer grows with context


def test_draft_verify_ratio_falls_as_k_grows(cm):
    ctx = np.full(1, 32768, I)
    d, _ = cm.marginal(ctx, 2048, 1, np.ones(1, I), draft_pos=np.ones(1, I))
    ratios = [d[0] / cm.marginal(ctx, 2048, 0, np.full(1, k + 1, I))[1][0] for k in (2, 8, 16, 32)]
    assert all(a > b for a, b in zip(ratios, ratios[1:]))


def test_mixed_lengths_cost_more_than_the_mean(cm):
    mixed = verify_plan([1, 1, 1, 8189], [1] * 4)  # mean 2048
    mean = verify_plan([2048] * 4, [1] * 4)
    assert cm.time(mixed) > cm.time(mean)
    assert cm.time(verify_plan([100, 60000], [1, 1])) > cm.time(verify_plan([30050, 30050], [1, 1]))


def test_prefill_chunk_pays_gemms_causal_flops_and_context_reads(cm):
    def pre(tokens, ctx):
        return cm.time(PassPlan(prefill_ids=np.arange(1), prefill_tokens=np.array([tokens], I),
                                prefill_context=np.array([ctx], I)))
    assert pre(2048, 0) > cm.pass_overhead(2048, num_logits=1) * 1.01  # causal attention costs something
    assert pre(2048, 60000) > pre(2048, 30000) > pre(2048, 0)
    assert pre(4096, 0) > 1.8 * pre(2048, 0)


def test_time_is_overhead_plus_marginals(cm):
    rng = np.random.default_rng(1)
    ctx, bud = rng.integers(1, 100000, 6), int(rng.integers(16, 4096))
    meth, pos, q = int(rng.integers(0, 3)), rng.integers(0, 9, 6), rng.integers(1, 12, 6)
    d, v = cm.marginal(ctx, bud, meth, q, draft_pos=pos)
    assert cm.time(draft_plan(ctx, bud, meth, pos)) == pytest.approx(cm.pass_overhead(6) + d.sum(), rel=1e-12)
    assert cm.time(verify_plan(ctx, q)) == pytest.approx(cm.pass_overhead(int(q.sum())) + v.sum(), rel=1e-12)


@functools.lru_cache(maxsize=None)
def _cached_vec(model, tp):
    return vector_only(_cached(model, tp))


def vector_only(cm):
    """The same model with its small-plan scalar path turned off (numpy for every plan)."""
    v = cm.with_params()
    v.SCALAR_MAX = -1
    return v


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 2**32 - 1))
def test_scalar_and_vector_paths_agree(n, seed):
    cm = make_cost_model("qwen2.5-14b", "h100-sxm", tp=2)
    vec = vector_only(cm)
    rng = np.random.default_rng(seed)
    ctx, bud, meth = rng.integers(0, 131000, n), int(rng.integers(1, 9000)), int(rng.integers(0, len(DraftMethod)))
    pos, q = rng.integers(0, 30, n), rng.integers(1, 3000, n)
    for a, b in zip(cm.marginal(ctx, bud, meth, q, draft_pos=pos), vec.marginal(ctx, bud, meth, q, draft_pos=pos)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    plan = PassPlan(prefill_ids=np.arange(n), prefill_tokens=q, prefill_context=ctx,
                    draft_ids=np.arange(n), draft_context=ctx, draft_budget=bud, draft_method=meth, draft_pos=pos,
                    verify_ids=np.arange(n), verify_query=q % 40 + 1, verify_context=ctx)
    assert cm.time(plan) == pytest.approx(vec.time(plan), rel=1e-12)


@st.composite
def segments(draw):
    n, r = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    ints = lambda lo, hi, k: np.array(draw(st.lists(st.integers(lo, hi), min_size=k, max_size=k)), I)  # noqa: E731
    kind = ints(1, 2, n * r).reshape(n, r).astype(np.int8)
    query = np.where(kind == 2, ints(1, 40, n * r).reshape(n, r), 1)
    ctx = ints(0, 131000, n * r).reshape(n, r)
    dpos = np.where(kind == 2, query - 1, ints(0, 20, n * r).reshape(n, r))
    return PlanBatch.decode(kind, query, ctx, dpos, draw(st.integers(1, 8192)), draw(st.integers(0, len(DraftMethod) - 1)))


@functools.lru_cache(maxsize=None)
def _cached(model, tp):
    return make_cost_model(model, "h200", tp=tp)


@settings(max_examples=60, deadline=None)
@given(seg=segments(), model=st.sampled_from(["8b", "qwen2.5-7b"]), tp=st.sampled_from([1, 2]))
def test_grid_times_equal_per_pass_time(seg, model, tp):
    cm = _cached(model, tp)
    got = cm.times(seg)  # from the lookup tables
    assert np.allclose(got, cm.times(PlanBatch.of(seg.plans)), rtol=1e-12, atol=0)  # from the flat arrays
    assert got.shape == (seg.kind.shape[0],)
    for i in range(seg.kind.shape[0]):
        d, v = seg.kind[i] == 1, seg.kind[i] == 2
        plan = PassPlan(draft_ids=np.flatnonzero(d), draft_context=seg.context[i, d], draft_budget=seg.budget,
                        draft_method=seg.method, draft_pos=seg.draft_pos[i, d],
                        verify_ids=np.flatnonzero(v), verify_query=seg.query[i, v], verify_context=seg.context[i, v])
        assert got[i] == pytest.approx(cm.time(plan), rel=1e-12)
        assert got[i] == pytest.approx(_cached_vec(model, tp).time(plan), rel=1e-12)
        assert float(cm.times(PlanBatch.from_plan(plan))[0]) == pytest.approx(cm.time(plan), rel=1e-12)


# ---- protocol and profiles ----

def test_implements_the_protocol_and_profile_round_trips(cm, tmp_path):
    assert isinstance(cm, CostModel)
    md = cm.metadata()
    assert md["gpu_name"] == "h200" and md["model"]["name"] == "llama-3.1-8b" and md["page_size"] == 16
    assert md["fit_error"]["max_abs_rel"] < 0.1 and md["date"] and "numpy" in md["versions"]
    other = make_cost_model("qwen2.5-14b", "h100-nvl", tp=2, weight_dtype="fp8", kv_dtype="fp8", page_size=32)
    path = tmp_path / "p.json"
    save_profile(other, path)
    back = load_cost_model(path)
    plan = PassPlan(draft_ids=np.arange(2), draft_context=np.array([5000, 90000]), draft_budget=1024,
                    draft_method=2, draft_pos=np.array([0, 3]),
                    verify_ids=np.arange(2, 4), verify_query=np.array([4, 1]), verify_context=np.array([100, 70000]),
                    prefill_ids=np.arange(4, 5), prefill_tokens=np.array([512]), prefill_context=np.array([1024]))
    assert back.time(plan) == other.time(plan) and back.page_size == 32 and back.tp == 2
    assert back.kv_capacity_pages() == kv_capacity_pages("qwen2.5-14b", "h100-nvl", 32, "fp8", "fp8", 2)


def test_bad_profiles_are_one_line_errors(tmp_path):
    with pytest.raises(SpsimError, match="not found"):
        load_cost_model(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpsimError, match="bad.json: not a JSON"):
        load_cost_model(bad)
    bad.write_text(json.dumps({"spsim_cost_profile": 1, "kind": "roofline", "metadata": {"tp": 1}}))
    with pytest.raises(SpsimError, match="malformed"):
        load_cost_model(bad)
    bad.write_text(json.dumps({"spsim_cost_profile": 1, "kind": "magic"}))
    with pytest.raises(SpsimError, match="unknown cost profile kind"):
        load_cost_model(bad)


def test_deterministic_across_instances():
    plan = verify_plan([1234, 99999], [3, 7])
    assert make_cost_model().time(plan) == make_cost_model().time(plan)
    assert isinstance(make_cost_model().time(plan), float)


def test_profile_of_another_setting_is_an_error_and_kinds_register(tmp_path):
    from spsim.cost import KINDS, register_kind

    p = tmp_path / "p.json"
    save_profile(make_cost_model("llama-3.1-8b", tp=1), p)
    assert load_cost_model(p, expect={"tp": 1, "model_name": "Llama-3.1-8B"}).tp == 1
    with pytest.raises(SpsimError, match="tp=1, the run asks for 2"):
        load_cost_model(p, expect={"tp": 2})
    with pytest.raises(SpsimError, match="no 'metadata'"):
        p.write_text(json.dumps({"spsim_cost_profile": 1, "kind": "roofline"}))
        load_cost_model(p)
    with pytest.raises(SpsimError, match="version 2"):
        p.write_text(json.dumps({"spsim_cost_profile": 2, "kind": "roofline", "metadata": {}}))
        load_cost_model(p)
    # a new kind plugs in by registering a loader
    register_kind("flat-test", lambda prof: ConstantCostModel(prof["seconds"]))
    try:
        p.write_text(json.dumps({"spsim_cost_profile": 1, "kind": "flat-test", "metadata": {}, "seconds": 0.5}))
        assert load_cost_model(p).time(PassPlan()) == 0.5
    finally:
        KINDS.pop("flat-test")


def test_profile_versions_differing_warn(tmp_path, monkeypatch):
    """A profile measured with another torch warns where this machine's torch could run the GPU
    runtime; not where torch is a CPU build (the simulator alone uses the profile there)."""
    import warnings

    import spsim.cost.profile as P

    p = tmp_path / "p.json"
    prof = make_cost_model().to_profile()
    prof["metadata"]["versions"]["torch"] = "0.0.1"
    p.write_text(json.dumps(prof))
    monkeypatch.setattr(P, "_versions", lambda: {"torch": "2.11.0"})
    with pytest.warns(UserWarning, match="torch 0.0.1"):
        load_cost_model(p)
    monkeypatch.setattr(P, "_versions", lambda: {"torch": "2.13.0+cpu"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_cost_model(p)


def test_every_draft_method_has_one_cost_term():
    cm = make_cost_model()
    c, one = np.full(1, 32768), np.ones(1, np.int64)
    first = [cm.marginal(c, 2048, m, one, draft_pos=one * 0)[0][0] for m in range(len(DraftMethod))]
    later = [cm.marginal(c, 2048, m, one, draft_pos=one)[0][0] for m in range(len(DraftMethod))]
    S, VQ, SL, VA, SQ = (int(x) for x in (DraftMethod.STATIC, DraftMethod.VERIFY_QUEST, DraftMethod.STEP_LAYER,
                                          DraftMethod.VERIFY_ATTN, DraftMethod.STEP_QUEST))
    # scoring once per run (verify-*), every step (step-quest), a full layer every step (step-layer)
    assert first[S] < first[VA] < first[VQ] == first[SQ]
    assert later[S] == later[VQ] == later[VA] < later[SQ] == pytest.approx(first[SQ], rel=1e-4)
    assert later[SL] == pytest.approx(first[SL], rel=1e-4) and first[SL] > first[S]


def test_draft_method_names_and_old_spellings():
    assert [m.label for m in DraftMethod] == ["static", "verify-quest", "step-layer", "verify-attn", "step-quest"]
    for old, new in (("verify-refresh", "verify-quest"), ("verify_refresh", "verify-quest"), ("quest", "verify-quest"),
                     ("step-refresh", "step-layer"), ("STEP_REFRESH", "step-layer"), ("window", "static")):
        assert DraftMethod.parse(old).label == new
    with pytest.raises(SpsimError, match="unknown draft-KV method 'sideways'"):
        DraftMethod.parse("sideways")
