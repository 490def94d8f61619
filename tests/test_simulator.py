"""Simulator and batcher: determinism, fast path == step path, invariants, hand-computed cases."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spsim.acceptance.simple import FixedAcceptance, PositionAcceptance
from spsim.cost.constant import ConstantCostModel
from spsim.cost.roofline import RooflineCostModel
from spsim.simulator.engine import SimConfig, simulate
from spsim.traces.trace import Trace

from conftest import acc, make_trace, run, strip

ROOF = RooflineCostModel()


POLICIES = ["ar", "fixed-k:k=4", "aspire", "oracle", "sync:k=3", "sync", "entropy"]


@pytest.mark.parametrize("policy", POLICIES)
def test_same_seed_byte_identical(policy):
    tr = make_trace(40, seed=1)
    a = run(tr, policy=policy, seed=7).summary_json()
    b = run(tr, policy=policy, seed=7).summary_json()
    assert a == b


def test_different_seed_changes_speculative_outcomes():
    tr = make_trace(40, seed=1)
    a = run(tr, policy="fixed-k:k=4", seed=1).summary
    b = run(tr, policy="fixed-k:k=4", seed=2).summary
    assert a["accepted_drafts"] != b["accepted_drafts"]


@pytest.mark.parametrize("policy", ["ar", "fixed-k:k=4", "fixed-k:k=7", "aspire", "oracle"])
@pytest.mark.parametrize("mode", [dict(), dict(offline=True), dict(concurrency=5, replicas=2), dict(replicas=3, router="round-robin")])
def test_fast_path_identical_to_step_path(policy, mode):
    tr = make_trace(60, seed=3, span=3.0, prompt=(50, 6000), output=(1, 120), prefix=True)
    fast = run(tr, policy=policy, fast=True, position=True, **mode)
    step = run(tr, policy=policy, fast=False, position=True, **mode)
    assert strip(fast.summary) == strip(step.summary)
    assert fast.requests.equals(step.requests)
    if policy in ("ar", "fixed-k:k=4") and not mode.get("concurrency"):
        assert fast.summary["sim_events"]["segments"] > 0  # the fast path was exercised


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 25), seed=st.integers(0, 10**6), policy=st.sampled_from(POLICIES),
       p=st.sampled_from([0.0, 0.5, 0.9, 1.0]), pages=st.sampled_from([None, 60, 200]),
       replicas=st.integers(1, 3), max_batch=st.sampled_from([1, 4, 64]), budget=st.sampled_from([64, 512, 8192]))
def test_invariants(n, seed, policy, p, pages, replicas, max_batch, budget):
    tr = make_trace(n, seed=seed, span=2.0, prompt=(1, 1500), output=(1, 80), prefix=seed % 2 == 0)
    res = run(tr, policy=policy, p=p, seed=seed, kv_pages=pages, replicas=replicas, max_batch=max_batch,
              token_budget=budget, draft_budget=64)
    s, req = res.summary, res.requests
    # every request finishes or is rejected with a reason
    done = req["finish_s"].notna()
    rejected = req["rejected"] != ""
    assert (done ^ rejected).all()
    assert s["incomplete"] == 0
    # time never goes backwards
    d = req[done]
    assert (d["first_token_s"] >= d["arrival_s"]).all()
    assert (d["finish_s"] >= d["first_token_s"]).all()
    # pages in use never exceed capacity
    assert s["kv_peak_pages"] <= s["kv_capacity_pages"]
    # exactly output_tokens emitted: verifications emit accepted + 1 each, a completed prefill one
    emitted = d["accepted"] + d["verifies"] + 1 + d["recomputes"]
    assert (emitted == d["output_tokens"]).all()
    assert s["total_output_tokens"] == int(d["output_tokens"].sum())
    if policy.startswith("sync"):
        assert s["passes"]["mixed"] == 0  # a synchronous policy never mixes drafts and verifies
    if policy == "ar":
        assert s["drafted_tokens"] == 0
    if p == 0.0:
        assert s["accepted_drafts"] == 0
    if p == 1.0:  # every draft accepted, except those a preemption threw away
        kept = req[req["preemptions"] == 0]
        assert (kept["accepted"] == kept["drafts"]).all()


def single(prompt, output):
    return Trace(np.array(["a"], object), np.zeros(1), np.array([prompt]), np.array([output]))


def test_ar_hand_computed_times():
    cost = ConstantCostModel(1e-3)
    res = run(single(300, 21), cost=cost, policy="ar")
    r = res.requests.iloc[0]
    assert r["first_token_s"] == pytest.approx(1e-3)  # one prefill pass
    assert r["finish_s"] == pytest.approx(21e-3)  # then 20 decode passes
    assert res.summary["mean_tpot_ms"] == pytest.approx(1.0)
    assert r["verifies"] == 20 and r["drafts"] == 0


@pytest.mark.parametrize("p,drafts,verifies,accepted,passes", [(1.0, 16, 4, 16, 20), (0.0, 70, 20, 0, 90)])
def test_fixed_k_acceptance_one_and_zero(p, drafts, verifies, accepted, passes):
    cost = ConstantCostModel(1e-3)
    res = run(single(300, 21), cost=cost, p=p, policy="fixed-k:k=4,stagger=false")
    r = res.requests.iloc[0]
    assert (r["drafts"], r["verifies"], r["accepted"]) == (drafts, verifies, accepted)
    # one prefill pass, then one pass per draft and per verification
    assert r["finish_s"] == pytest.approx((1 + passes) * 1e-3)


def test_context_window_rejection():
    tr = single(200_000, 10)
    res = run(tr, policy="ar")
    assert res.summary["rejected_reasons"] == {"context_window": 1}
    assert res.summary["completed"] == 0


def test_kv_capacity_rejection_and_preemption():
    tr = make_trace(12, seed=5, span=0.0, prompt=(300, 400), output=(100, 150))
    res = run(tr, policy="fixed-k:k=4", kv_pages=90, offline=True)
    assert res.summary["completed"] == 12
    assert res.summary["preemptions"] > 0
    too_big = run(single(2000, 10), policy="ar", kv_pages=50)
    assert too_big.summary["rejected_reasons"] == {"kv_capacity": 1}


def test_prefix_cache_hits_save_prefill():
    tr = make_trace(80, seed=2, span=20.0, prompt=(4000, 12000), output=(5, 20), prefix=True)
    on = run(tr, policy="ar", prefix_cache=True).summary
    off = run(tr, policy="ar", prefix_cache=False).summary
    assert on["prefix_cache_hit_rate"] > 0.1
    assert off["prefix_cache_hit_rate"] is None
    assert on["pass_time_s"]["prefill"] < off["pass_time_s"]["prefill"]
    assert on["mean_ttft_ms"] < off["mean_ttft_ms"]


def decode_time(s):
    return sum(v for k, v in s["pass_time_s"].items() if k != "prefill")


def test_speculation_helps_at_long_context_with_high_acceptance():
    tr = make_trace(32, seed=4, span=0.0, prompt=(60000, 100000), output=(200, 300))
    ar = run(tr, policy="ar", offline=True, p=0.9).summary
    fk = run(tr, policy="fixed-k:k=6", offline=True, p=0.9).summary
    asp = run(tr, policy="aspire", offline=True, p=0.9).summary
    # pure decode passes (prefill of 2.6 M prompt tokens dominates end to end)
    assert decode_time(fk) < 0.7 * decode_time(ar)
    assert decode_time(asp) < 0.7 * decode_time(ar)
    assert fk["tokens_per_verify"] == pytest.approx((1 - 0.9 ** 7) / 0.1, rel=0.08)


def test_aspire_turns_speculation_down_when_nothing_is_accepted():
    tr = make_trace(16, seed=4, span=0.0, prompt=(30000, 60000), output=(200, 300))
    asp = run(tr, policy="aspire", offline=True, p=0.0).summary
    fk = run(tr, policy="fixed-k:k=6", offline=True, p=0.0).summary
    assert asp["drafted_tokens"] < 0.3 * fk["drafted_tokens"]
    assert decode_time(asp) < decode_time(fk)


def test_qps_rescale_and_concurrency_modes():
    tr = make_trace(30, seed=6, span=10.0, prompt=(100, 500), output=(5, 20))
    fast = run(tr, policy="ar", qps=30.0).summary
    slow = run(tr, policy="ar", qps=1.0).summary
    assert slow["duration"] > 2 * fast["duration"]
    res = run(tr, policy="ar", concurrency=1)
    req = res.requests.sort_values("arrival_s")
    # closed loop with one in flight: each request arrives when the previous finishes
    assert np.allclose(req["arrival_s"].to_numpy()[1:], req["finish_s"].to_numpy()[:-1])
