"""The entropy rule's per-pass arithmetic without numpy's wrappers gives the floats and answers of
its first writing (np.clip, np.broadcast_to, np.nan_to_num, the verify-cost gather), kept here
as the reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spsim.policies import entropy_rule as er


def _token_acceptance_ref(entropy, prior, slope, threshold):
    prior = np.clip(np.asarray(prior, float), 1e-6, 1 - 1e-6)
    z = np.log(prior / (1 - prior)) + slope * (threshold - np.log(np.maximum(entropy, 1e-12)))
    return 1.0 / (1.0 + np.exp(-z))


def _first_draft_more_ref(prior, draft_cost, verify_cost, max_drafts, lookahead=8):
    vc = np.asarray(verify_cost, float)
    r = len(vc)
    prior = np.broadcast_to(np.asarray(prior, float), (r,))
    cd = np.broadcast_to(np.asarray(draft_cost, float), (r,))
    now = 1.0 / vc[:, 0]
    m = np.arange(1, lookahead + 1)
    gain = np.cumsum(prior[:, None] ** m, axis=1)
    cost = m * cd[:, None] + vc[:, np.minimum(m, vc.shape[1] - 1)]
    cap = np.asarray(max_drafts)
    later = np.where(m <= cap[..., None], (gain + 1.0) / cost, -np.inf)
    return (later.max(axis=1) > now) & (0 < cap)


def _draft_more_ref(p_hat, drafted, prior, draft_cost, verify_cost, max_drafts, lookahead=8):
    drafted = np.asarray(drafted, np.int64)
    r = len(drafted)
    prior = np.broadcast_to(np.asarray(prior, float), (r,))
    cd = np.broadcast_to(np.asarray(draft_cost, float), (r,))
    e, s = er.prefix_stats(p_hat, drafted)
    spent = drafted * cd
    now = (e + 1.0) / (spent + er._verify_cost_at(verify_cost, drafted))
    m = np.arange(1, lookahead + 1)
    gain = s[:, None] * np.cumsum(prior[:, None] ** m, axis=1)
    n_after = drafted[:, None] + m
    cost = spent[:, None] + m * cd[:, None] + er._verify_cost_at(verify_cost, n_after)
    cap = np.asarray(max_drafts)
    later = np.where(n_after <= cap[..., None], (e[:, None] + gain + 1.0) / cost, -np.inf)
    return (later.max(axis=1) > now) & (drafted < cap)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), r=st.integers(1, 40), cols=st.integers(1, 20), k=st.integers(1, 17),
       lookahead=st.integers(1, 10), scalar_prior=st.booleans())
def test_rule_equals_reference(seed, r, cols, k, lookahead, scalar_prior):
    rng = np.random.default_rng(seed)
    prior = float(rng.random()) if scalar_prior else rng.random(r)
    cd = rng.random(r) * 1e-3
    vc = np.cumsum(rng.random((r, cols)) * 1e-3, axis=1) + 4e-3
    cap = rng.integers(0, 17, r)
    # near ties as well: priors where drafting barely pays or not
    assert np.array_equal(er.first_draft_more(prior, cd, vc, cap, lookahead),
                          _first_draft_more_ref(prior, cd, vc, cap, lookahead))
    d = rng.integers(0, k + 1, r)
    p_hat = rng.random((r, k))
    assert np.array_equal(er.draft_more(p_hat, d, prior, cd, vc, cap, lookahead),
                          _draft_more_ref(p_hat, d, prior, cd, vc, cap, lookahead))
    ent = np.where(rng.random(r) < 0.2, np.nan, rng.lognormal(0, 1, r))
    fixed = np.nan_to_num(ent, nan=0.6)
    ours = np.minimum(np.where(ent == ent, ent, 0.6), np.finfo(np.float64).max)
    assert np.array_equal(fixed, ours)
    got = er.token_acceptance(ours, prior, 1.3, -0.2)
    want = _token_acceptance_ref(fixed, prior, 1.3, -0.2)
    assert got.tobytes() == want.tobytes()


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 25), load=st.sampled_from(["trace", "offline", "tight"]),
       fast=st.booleans())
def test_entropy_priced_costs_reused_as_recomputed(seed, n, load, fast):
    # `targets` reuses the last pass's priced costs for the same requests, contexts and load: the
    # same results as pricing them on every pass (keyed latent acceptance: requests draft for
    # several passes, so passes repeat their costs)
    from conftest import make_trace, strip
    from spsim.policies.entropy import Entropy
    from spsim.simulator.engine import SimConfig, simulate

    tr = make_trace(n, seed=seed, span=3.0, prompt=(2000, 40000), output=(1, 200))
    kw = {"trace": {}, "offline": dict(offline=True), "tight": dict(offline=True, kv_pages=3000)}[load]
    orig, reused = Entropy.targets, []

    def counted(self, view):
        key = self._priced_key
        out = orig(self, view)
        reused.append(self._priced_key is key and key is not None)
        return out

    def fresh(self, view):
        self._priced_key = None  # never reused
        return orig(self, view)

    try:
        Entropy.targets = counted
        cached = simulate(tr, SimConfig(seed=seed % 3, policy="entropy", cost="roofline", fast=fast, **kw))
        Entropy.targets = fresh
        priced = simulate(tr, SimConfig(seed=seed % 3, policy="entropy", cost="roofline", fast=fast, **kw))
    finally:
        Entropy.targets = orig
    assert strip(cached.summary) == strip(priced.summary)
    assert cached.requests.equals(priced.requests)


def test_entropy_priced_costs_are_reused():
    # the case above is not vacuous: long contexts, trickled arrivals
    from conftest import make_trace
    from spsim.policies.entropy import Entropy
    from spsim.simulator.engine import SimConfig, simulate

    orig, reused = Entropy.targets, []

    def counted(self, view):
        key = self._priced_key
        out = orig(self, view)
        reused.append(key is not None and self._priced_key is key)
        return out

    Entropy.targets = counted
    try:
        simulate(make_trace(20, seed=1, span=3.0, prompt=(2000, 40000), output=(1, 200)),
                 SimConfig(policy="entropy", cost="roofline", fast=False))
    finally:
        Entropy.targets = orig
    assert sum(reused) > 0.1 * len(reused)
