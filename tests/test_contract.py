"""The brain's contract, driven the way a runtime drives it: enqueue, plan a pass, execute it,
apply its outcome. A fake executor (no SimPy, no torch) prices passes with the cost model and
draws acceptance from a simple model; every policy runs a mixed trace (prefix sharing, long and
short requests, a KV pool small enough to preempt) and the invariants hold after every pass."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import acc, make_trace
from spsim.build import build
from spsim.config import ServingConfig
from spsim.cost import RooflineCostModel
from spsim.plan import Outcome
from spsim.policies.kv import KVPool, PagedKVPool
from spsim.policies.registry import list_policies
from spsim.policies.request import Phase, RequestTable

POLICIES = ["ar", "sync", "sync:k=3", "fixed-k:k=4", "entropy", "aspire", "oracle"]
COST = RooflineCostModel()


class FakeExecutor:
    def __init__(self, cost, acceptance, table: RequestTable):
        self.cost, self.acc, self.t = cost, acceptance, table
        self.rng = np.random.default_rng(0)

    def execute(self, plan) -> Outcome:
        t = self.t
        drafted = plan.verify_query - 1
        accepted = np.zeros(len(plan.verify_ids), np.int64)
        spec = drafted > 0
        if spec.any():
            v = plan.verify_ids[spec]
            n = len(v)
            accepted[spec] = self.acc.verify(v, t.committed[v], drafted[spec], t.ctx[v], np.full(n, 2048),
                                             np.full(n, 1))
        ent = self.rng.exponential(0.6, len(plan.draft_ids))
        return Outcome(self.cost.time(plan), ent, accepted)


def check_invariants(b, t: RequestTable, n: int) -> None:
    pool = b.pool
    assert 0 <= pool.private and pool.used <= pool.capacity
    held = sum(int(t.pages[r]) for r in b.running)
    assert held == pool.private  # every private page is held by exactly one running request
    phases = t.phase
    waiting, running = set(b.waiting), set(b.running)
    assert not waiting & running
    for rid in range(n):
        ph = int(phases[rid])
        assert (rid in waiting) == (ph == Phase.WAITING) or ph == Phase.PENDING
        assert (rid in running) == (ph in (Phase.PREFILL, Phase.DECODE))
    assert (t.committed <= t.output).all() and (t.drafted >= 0).all()


SETTINGS = {
    # short prompts, long outputs, a small pool: decode growth preempts
    "tight": (dict(prompt=(200, 6000), output=(1, 400)), 1000),
    # long contexts, where speculation pays for every policy
    "long": (dict(prompt=(20000, 100000), output=(1, 300)), 40000),
}


def check_pages(b, t: RequestTable, plan, full: bool) -> None:
    """Every page owned once (`full`: the O(pages) check); each request's table covers what the
    pass writes; a prefill never recomputes a prefix it holds through the cache."""
    pool, ps = b.pool, b.pool.page_size
    if full:
        pool.check()
    for rid, q, ctx in zip(plan.prefill_ids.tolist(), plan.prefill_tokens.tolist(), plan.prefill_context.tolist()):
        assert len(pool.table(rid)) * ps >= ctx + q
        assert ctx >= t.shared_tokens[rid] and pool.shared.get(rid, 0) * ps == t.shared_tokens[rid]
    for rid, ctx, pos in zip(plan.draft_ids.tolist(), plan.draft_context.tolist(), plan.draft_pos.tolist()):
        assert len(pool.table(rid)) * ps >= ctx + pos + 1
    for rid, q, ctx in zip(plan.verify_ids.tolist(), plan.verify_query.tolist(), plan.verify_context.tolist()):
        assert len(pool.table(rid)) * ps >= ctx + q
    for rid in plan.preempted.tolist() + plan.released.tolist():
        assert rid not in pool.tables
    if full:
        assert len(set(plan.freed_pages.tolist()) & set(pool.free_ids)) == len(set(plan.freed_pages.tolist()) - {
        p for ids in pool.block_ids.values() for p in ids} - {p for tbl in pool.tables.values() for p in tbl})


def drive(tr, cfg, pool_cls, check=None, max_passes=200_000):
    """Run `tr` through one batcher the way a runtime does; `check(b, table, plan, passes)` after
    each plan. Returns (batcher, table)."""
    a = acc(0.8, seed=0)
    serving = build(cfg, prefix_cache=tr.prefix_indptr is not None, block_size=512, cost=COST, acceptance=a)
    table = RequestTable(tr.prompt_tokens, tr.output_tokens, tr.arrival_s)
    b = serving.new_batcher(table, tr.prefix_indptr, tr.prefix_ids, pool_cls)
    b.on_done = lambda rid, now: serving.done(rid)
    ex = FakeExecutor(COST, a, table)
    n, nxt, now, passes = len(tr), 0, 0.0, 0
    while nxt < n or b.has_work():
        while nxt < n and tr.arrival_s[nxt] <= now:
            serving.arrived(nxt, table)
            b.enqueue(nxt, now)
            nxt += 1
        if not b.has_work():
            if nxt >= n:  # the rest was rejected at arrival
                break
            now = float(tr.arrival_s[nxt])
            continue
        plan = b.plan(now)
        assert not plan.is_empty()
        if serving.policy.cls.synchronous:
            assert not (len(plan.draft_ids) and len(plan.verify_ids))
        if check is not None:
            check(b, table, plan, passes)
        out = ex.execute(plan)
        now += out.elapsed_s
        b.apply(plan, out, now)
        passes += 1
        check_invariants(b, table, n)
        assert passes < max_passes
    done = table.phase == Phase.DONE
    assert (done | (table.phase == Phase.REJECTED)).all()  # requests conserved
    assert (table.committed[done] == table.output[done]).all()  # committed tokens = output tokens
    assert b.pool.private == 0 and not b.running
    if b.pool.has_ids:  # no page leaked: every page is free or in a cached block
        b.pool.check()
        assert not b.pool.tables
        assert len(b.pool.free_ids) + sum(len(v) for v in b.pool.block_ids.values()) == b.pool.capacity
    return b, table


@pytest.mark.parametrize("pool", ["counting", "paged"])
@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("policy", POLICIES)
def test_runtime_loop_keeps_the_invariants(policy, setting, pool):
    shape, pages = SETTINGS[setting]
    tr = make_trace(40, seed=5, span=3.0, prefix=True, **shape)
    cfg = ServingConfig(policy=policy, kv_pages=pages, max_batch=24, token_budget=4096)
    check = None
    if pool == "paged":
        def check(b, table, plan, passes):
            check_pages(b, table, plan, full=setting == "tight" or passes % 16 == 0)
    b, table = drive(tr, cfg, PagedKVPool if pool == "paged" else KVPool, check)
    done = table.phase == Phase.DONE
    assert done.sum() >= 35
    if setting == "tight":
        assert table.preemptions.sum() > 0  # the small pool really preempted
    if not list_policies()[b.policy.name].speculative:
        assert table.drafts.sum() == 0
    elif setting == "long":
        assert table.spec_verifies.sum() > 0 and table.accepted.sum() > 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 25), seed=st.integers(0, 10_000), pages=st.integers(60, 2000),
       policy=st.sampled_from(POLICIES), prefix=st.booleans(), batch=st.integers(1, 16))
def test_fuzzed_traces_own_every_page_once(n, seed, pages, policy, prefix, batch):
    """Random traces and pool sizes: every page free, private to one request or in one cached
    block, after every pass; nothing leaked at the end; shared prefix blocks computed once."""
    tr = make_trace(n, seed=seed, span=2.0, prompt=(10, 4000), output=(1, 200), prefix=prefix)
    cfg = ServingConfig(policy=policy, kv_pages=pages, max_batch=batch, token_budget=2048, max_draft=6)
    computed = []

    def check(b, table, plan, passes):
        check_pages(b, table, plan, full=True)
        computed.append(int(plan.prefill_tokens.sum()))

    b, table = drive(tr, cfg, PagedKVPool, check)
    done = table.phase == Phase.DONE
    # prefill work = prompts less prefix-cache hits, plus what preemption made recompute
    if not table.preemptions.any():
        assert sum(computed) == int(table.prompt[done].sum() - table.hit_tokens[done].sum())
