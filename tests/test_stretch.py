"""Policies asked every pass that plan many passes at once (`FastPath.stretch`: `entropy`,
`aspire:replan=pass`) give the step path's results exactly, under the latent acceptance model
whose entropy signal carries information (the fast-policies test uses simple models), and the
scalar rule the planner decides cycles with is `draft_more` bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_trace, strip

POLICIES = ["entropy", "entropy:auc=0.9,lookahead=4", "aspire:replan=pass", "aspire:replan=pass,explore=0"]


def run(tr, policy, fast, **kw):
    from spsim.simulator.engine import SimConfig, simulate

    return simulate(tr, SimConfig(policy=policy, fast=fast, **kw))


def same(tr, policy, **kw):
    fast, step = run(tr, policy, True, **kw), run(tr, policy, False, **kw)
    assert strip(fast.summary) == strip(step.summary)
    assert fast.requests.equals(step.requests)
    return fast


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(POLICIES), seed=st.integers(0, 10_000), n=st.integers(1, 40), long=st.booleans(),
       load=st.sampled_from(["trace", "offline", "concurrency", "tight"]), prefix=st.booleans(),
       md=st.sampled_from([16, 9, 4, 20]),
       spec=st.sampled_from(["sparsespec-llama8b", "sparsespec-llama8b:auc=0.9", "magicdec-pg19-llama8b"]))
def test_stretch_equals_step(policy, seed, n, long, load, prefix, md, spec):
    prompt = (100, 30000) if long else (20, 2000)
    tr = make_trace(n, seed=seed, span=5.0, prompt=prompt, output=(1, 300), prefix=prefix)
    kw = {"trace": {}, "offline": dict(offline=True), "concurrency": dict(concurrency=4),
          "tight": dict(offline=True, kv_pages=2500 if long else 400)}[load]
    same(tr, policy, seed=seed % 3, max_draft=md, acceptance=spec, **kw)


@pytest.mark.parametrize("policy", ["entropy", "aspire:replan=pass"])
def test_speculating_batches_take_stretches(policy, monkeypatch):
    # long contexts: the batch speculates throughout; most passes run in stretches, many per event
    from spsim.simulator.segment import FastPath

    applied, apply = [0], FastPath.apply

    def counted(self, sp, n, ends, accepted):
        applied[0] += n if sp.stretch is not None else 0
        return apply(self, sp, n, ends, accepted)

    monkeypatch.setattr(FastPath, "apply", counted)
    tr = make_trace(24, seed=3, span=2.0, prompt=(8000, 30000), output=(100, 300))
    res = same(tr, policy, concurrency=8)
    passes = sum(res.summary["passes"].values())
    assert res.requests["spec_verifies"].sum() > 500  # it speculated
    assert applied[0] > 0.8 * passes
    assert passes > 10 * res.summary["sim_events"]["segments"]


def test_pairwise_is_numpy_sum():
    from spsim.policies.entropy_stretch import _pairwise

    rng = np.random.default_rng(0)
    for w in range(1, 41):
        for n in range(0, w + 1):
            a = np.zeros((3, w))
            a[1, :n] = np.cumprod(rng.uniform(0.2, 1.0, n))
            assert _pairwise(a[1, :n].tolist(), w) == a.sum(axis=1)[1]


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), d0=st.integers(0, 12), cap=st.integers(0, 20), L=st.integers(1, 10),
       cols=st.integers(2, 21), prior=st.sampled_from([None, 1.0, 0.999999, 0.0]))
def test_cycle_more_is_draft_more(seed, d0, cap, L, cols, prior):
    # the drafts a cycle verifies, decided on Python floats, against draft_more state by state on
    # the grid the step path builds (width: the batch's most drafts held; here the narrowest a
    # state allows, as the planner decides before its width check)
    from spsim.policies import entropy_rule as er
    from spsim.policies.entropy_stretch import cycle_more

    rng = np.random.default_rng(seed)
    d0 = min(d0, cap)
    est = rng.uniform(0.05, 1.0, 24).tolist()
    a = rng.uniform(0.0, 1.0) if prior is None else prior
    cd = float(rng.uniform(1e-4, 4e-3))
    vc = np.sort(rng.uniform(1e-3, 2e-2, cols))
    G = np.cumsum(np.array([a])[:, None] ** np.arange(1, L + 1), axis=1)[0].tolist()
    got = cycle_more(est, d0, G, cd, vc.tolist(), cap, L)
    s = d0
    while True:
        w = 7 if s < 8 else s // 8 * 8 + 7
        ph = np.ones((2, w))
        ph[:, :s] = est[:s]
        more = er.draft_more(ph, np.array([s, s]), np.array([a, a]), np.array([cd, cd]), np.stack([vc, vc]),
                             np.array([cap, cap]), L)
        if not more[0]:
            break
        s += 1
    assert got == s
