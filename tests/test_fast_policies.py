"""Every policy simulated fast gives the step path's results exactly: summaries and per-request
frames of fast (segments: cycles with keyed outcomes, plain stretches of policies asked every pass)
and step (`SimConfig(fast=False)`) runs are identical on random traces and configurations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_trace, run, strip

POLICIES = ["ar", "sync", "sync:k=4", "sync:k=0", "fixed-k:k=8", "fixed-k:k=3", "entropy", "aspire",
            "aspire:replan=pass", "oracle"]


def same(tr, policy, **kw):
    fast = run(tr, policy=policy, fast=True, **kw)
    step = run(tr, policy=policy, fast=False, **kw)
    assert strip(fast.summary) == strip(step.summary)
    assert fast.requests.equals(step.requests)
    return fast


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(POLICIES), seed=st.integers(0, 10_000), n=st.integers(1, 30),
       long=st.booleans(), load=st.sampled_from(["trace", "offline", "concurrency", "tight"]),
       p=st.sampled_from([0.5, 0.8, 0.95]), position=st.booleans(), prefix=st.booleans())
def test_fast_equals_step(policy, seed, n, long, load, p, position, prefix):
    prompt = (100, 30000) if long else (20, 2000)  # long: speculation pays; short: plain stretches
    tr = make_trace(n, seed=seed, span=5.0, prompt=prompt, output=(1, 150), prefix=prefix)
    kw = {"trace": {}, "offline": dict(offline=True), "concurrency": dict(concurrency=4),
          "tight": dict(offline=True, kv_pages=2500 if long else 400)}[load]
    same(tr, policy, p=p, seed=seed % 3, position=position, **kw)


@pytest.mark.parametrize("policy", ["fixed-k:k=8", "sync:k=4"])
def test_cycles_take_segments(policy):
    # a batch that speculates throughout runs through cycles on the fast path, not pass by pass
    tr = make_trace(30, seed=5, span=2.0, prompt=(8000, 30000), output=(50, 150))
    res = same(tr, policy, offline=True)
    assert res.summary["sim_events"]["segments"] > 0


@pytest.mark.parametrize("policy", ["entropy", "sync", "aspire:replan=pass"])
def test_plain_stretches_take_segments(policy):
    # short contexts: speculation does not pay, policies asked every pass answer 0 for long runs
    tr = make_trace(30, seed=6, span=20.0, prompt=(20, 800), output=(50, 150))
    res = same(tr, policy)
    assert res.summary["sim_events"]["segments"] > 0


def test_ema_looks_replays_get():
    from spsim.policies.acceptance_ema import AcceptanceEMA
    from spsim.policies.base import ema_looks

    rng = np.random.default_rng(0)
    a, b = AcceptanceEMA(0.1, 0.8), AcceptanceEMA(0.1, 0.8)
    ids = np.arange(6, dtype=np.int64)
    for m in (a, b):
        m.update(ids[:4], np.array([4, 3, 5, 2]), np.array([2, 3, 1, 0]))
        m.get(ids[:2], np.array([10, 20]))
    pos = rng.integers(10, 40, 6)
    want = np.stack([a.get(ids, pos + i) for i in range(7)])
    got = ema_looks(b, ids, pos, 7, commit=True)
    assert np.array_equal(got, want)
    assert b.counts == a.counts and b.seen == a.seen
