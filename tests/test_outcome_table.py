"""Outcomes drawn ahead by position (`simulator/outcomes.py`): a cycle-target policy's chain of
cycles read from the table gives the step path's results, however few positions a draw covers
(tables exhausted and redrawn mid-segment, entries kept across segments), and each entry is the
acceptance model's answer to the verification asked alone."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_trace, run, strip


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(policy=st.sampled_from(["fixed-k:k=8", "fixed-k:k=3", "fixed-k:k=1", "sync:k=4", "sync:k=2"]),
       rows=st.sampled_from([1, 2, 5, 256]), seed=st.integers(0, 10_000), n=st.integers(1, 30),
       load=st.sampled_from(["trace", "offline", "tight"]), latent=st.booleans(), max_draft=st.sampled_from([3, 16]))
def test_table_rows_any_size_fast_equals_step(monkeypatch, policy, rows, seed, n, load, latent, max_draft):
    from spsim.simulator.engine import SimConfig, simulate
    from spsim.simulator.segment import FastPath

    monkeypatch.setattr(FastPath, "TABLE_ROWS", rows)  # set anew for every input, undone after the test
    tr = make_trace(n, seed=seed, span=3.0, prompt=(2000, 40000), output=(1, 300))
    kw = {"trace": {}, "offline": dict(offline=True), "tight": dict(offline=True, kv_pages=3000)}[load]
    kw["max_draft"] = max_draft
    if latent:
        fast, step = (simulate(tr, SimConfig(seed=seed % 3, policy=policy, cost="roofline", fast=f, **kw))
                      for f in (True, False))
    else:
        fast, step = (run(tr, policy=policy, fast=f, p=0.8, seed=seed % 3, **kw) for f in (True, False))
    assert strip(fast.summary) == strip(step.summary)
    assert fast.requests.equals(step.requests)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), K=st.integers(1, 10), md=st.integers(1, 16), rows=st.integers(1, 40))
def test_table_entries_are_the_models_answers(seed, K, md, rows):
    from spsim.acceptance.latent import LatentAcceptance, LatentParams
    from spsim.simulator.outcomes import OutcomeTable

    rng = np.random.default_rng(seed)
    acc = LatentAcceptance(LatentParams(), seed=seed % 5)
    tab = OutcomeTable(K, md, rows)
    reqs = [(int(rid), int(rng.integers(0, 200)), int(rng.integers(1000, 60000)), int(rng.integers(2, 400)))
            for rid in rng.choice(1000, 4, replace=False)]
    for rid, c, cx, out in reqs:
        tab.want(rid, c, cx, out)
    if tab.pending:
        ids, com, dv, ctx = tab.rows_wanted()
        k = len(ids)
        tab.store(acc.verify(ids, com, dv, ctx, np.full(k, 2048), np.full(k, 1)).tolist())
    for rid, c, cx, out in reqs:
        for p in range(c, c + rows + 2):
            x = min(K, out - p - 1, md)
            got = tab.get(rid, p, x, cx + p - c, out)
            if p < min(c + rows, out - 1):
                one = acc.verify(np.array([rid]), np.array([p]), np.array([x]), np.array([cx + p - c]),
                                 np.array([2048]), np.array([1]))
                assert got == int(one[0])
            else:
                assert got is None
            if x > 1:  # another draft count, or another context: not this entry
                assert tab.get(rid, p, x - 1, cx + p - c, out) is None
            assert tab.get(rid, p, x, cx + p - c + 1, out) is None
