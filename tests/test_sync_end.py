"""`sync` at a request's end (issue 13): a request that has drafted all its remaining output can
use sits the cycle's remaining draft passes out and verifies with the batch, instead of forcing the
whole batch to verify early (MagicDec runs every cycle to gamma). The fast path gives the step
path's results exactly with requests sitting out (spans of `PlanBatch.IDLE`)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_trace, run, strip


def same(tr, policy, **kw):
    fast = run(tr, policy=policy, fast=True, **kw)
    step = run(tr, policy=policy, fast=False, **kw)
    assert strip(fast.summary) == strip(step.summary)
    assert fast.requests.equals(step.requests)
    return fast


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(["sync:k=4", "sync:k=6", "sync", "sync:k_max=5", "sync:k=20"]),
       seed=st.integers(0, 10_000), n=st.integers(2, 40), out_hi=st.sampled_from([3, 8, 20, 60]),
       load=st.sampled_from(["offline", "concurrency", "wide", "tight"]), p=st.sampled_from([0.5, 0.9]),
       max_draft=st.sampled_from([16, 3]))
def test_sync_request_end_fast_equals_step(policy, seed, n, out_hi, load, p, max_draft):
    # short outputs and long contexts: most cycles hold a request within k of its end
    tr = make_trace(n, seed=seed, span=1.0, prompt=(4000, 40000), output=(1, out_hi))
    kw = {"offline": dict(offline=True), "concurrency": dict(concurrency=4), "wide": dict(concurrency=12),
          "tight": dict(offline=True, kv_pages=3000)}[load]
    same(tr, policy, p=p, seed=seed % 3, max_draft=max_draft, **kw)


def _batcher(outputs, k=4):
    from spsim.policies.batcher import Batcher, BatcherConfig
    from spsim.policies.base import PolicyContext
    from spsim.policies.registry import make_policy
    from spsim.policies.request import RequestTable
    from spsim.cost import RooflineCostModel

    n = len(outputs)
    table = RequestTable(np.full(n, 32000, np.int64), np.asarray(outputs, np.int64), np.zeros(n))
    pol = make_policy(f"sync:k={k}")
    pol.bind(PolicyContext(cost=RooflineCostModel()))
    b = Batcher(BatcherConfig(capacity_pages=10**6, max_context=200000, token_budget=100000), table, pol)
    for rid in range(n):
        b.enqueue(rid, 0.0)
    return b


def _step(b, accept_all=True):
    from spsim.plan import Outcome

    plan = b.plan(0.0)
    acc = plan.verify_query - 1 if accept_all else np.zeros(len(plan.verify_ids), np.int64)
    b.apply(plan, Outcome(0.01, np.full(len(plan.draft_ids), np.nan), acc), 0.0)
    return plan


def test_finishing_request_sits_out_instead_of_forcing_the_batch():
    # outputs: request 0 has 3 tokens left after its first (prefill) token; 1 and 2 plenty.
    b = _batcher([4, 100, 100], k=4)
    _step(b)  # prefill: every request commits its first token
    plans = [_step(b) for _ in range(5)]
    # request 0 can use 2 drafts (3 tokens left: 2 drafts + the target's token), then waits
    assert [sorted(p.draft_ids.tolist()) for p in plans[:4]] == [[0, 1, 2], [0, 1, 2], [1, 2], [1, 2]]
    assert plans[4].verify_ids.tolist() == [0, 1, 2]  # the batch verifies after k = 4 passes
    assert plans[4].verify_query.tolist() == [3, 5, 5]  # request 0 verifies its 2 drafts
    from spsim.policies.request import Phase

    assert b.t.phase[0] == Phase.DONE  # 1 + 2 accepted + 1
    assert b.t.committed[1:].tolist() == [6, 6]


def test_all_capped_batch_verifies_at_once():
    b = _batcher([3, 3], k=4)
    _step(b)
    plans = [_step(b) for _ in range(2)]
    assert len(plans[0].draft_ids) == 2 and len(plans[1].verify_ids) == 2  # 1 draft each, then verify


def test_drafts_per_verification_hold_at_large_batch():
    # the symptom: at batch 64 with 128-token outputs, sync:k=4 verified after 1.6 drafts
    from spsim.traces.trace import Trace

    n = 128
    tr = Trace(np.array([f"r{i}" for i in range(n)], object), np.zeros(n), np.full(n, 32000, np.int64),
               np.full(n, 128, np.int64))
    res = run(tr, policy="sync:k=4", concurrency=64, p=0.8)
    rq = res.requests
    assert rq.drafts.sum() / rq.spec_verifies.sum() > 3.7


def test_request_at_its_end_leaves_at_the_batch_verification():
    # a request sitting out holds drafts, not tokens: its committed count stays put while it sits
    # out, and it finishes (KV freed, finish time) at the end of the pass verifying them, as
    # MagicDec, Vegas and vLLM return tokens only after verification (docs/policies.md)
    from spsim.plan import Outcome
    from spsim.policies.request import Phase

    b = _batcher([4, 100, 100], k=4)
    now, ends = 0.0, []
    for _ in range(6):  # prefill, 4 draft passes (request 0 sits out the last two), verify
        plan = b.plan(now)
        acc = plan.verify_query - 1
        now += 0.01
        b.apply(plan, Outcome(0.01, np.full(len(plan.draft_ids), np.nan), acc), now)
        ends.append((now, int(b.t.committed[0]), int(b.t.drafted[0]), b.t.phase[0] == Phase.DONE))
    assert [e[1:] for e in ends[:5]] == [(1, 0, False), (1, 1, False), (1, 2, False), (1, 2, False), (1, 2, False)]
    assert ends[5][1:] == (4, 0, True)
    assert b.t.t_finish[0] == ends[5][0] and b.t.pages[0] == 0
