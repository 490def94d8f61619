"""ASPIRE sees the pass's prefill load: a verification sharing its pass with a big prefill chunk
makes every draft pass dearer, so it drafts less."""

from __future__ import annotations

import numpy as np

from spsim.policies.aspire import Aspire
from spsim.policies.base import DecodeView, PolicyContext
from spsim.policies.batcher import Batcher
from spsim.cost.constant import ConstantCostModel
from spsim.cost.roofline import RooflineCostModel

from conftest import make_trace, run


def view(context: int, num_decode: int, prefill_tokens: int) -> DecodeView:
    z = np.zeros(1, np.int64)
    return DecodeView(ids=z, context=z + context, drafted=z, remaining=z + 500, committed=z + 10,
                      budget=2048, method=2, last_entropy=np.full(1, np.nan), sum_entropy=np.zeros(1),
                      num_decode=num_decode, prefill_tokens=prefill_tokens, max_draft=16)


def test_pass_overhead_unchanged_without_prefill():
    cm = RooflineCostModel()
    for n in (1, 7, 64, 300):
        assert cm.pass_overhead(n, prefill_tokens=0) == cm.pass_overhead(n)
        assert cm.pass_overhead(n, prefill_tokens=4096) == cm.pass_overhead(n + 4096, num_logits=n + 1)
    assert ConstantCostModel().pass_overhead(3, prefill_tokens=4096) == ConstantCostModel().pass_overhead(3)


def test_aspire_drafts_less_beside_a_large_prefill_chunk():
    pol = Aspire()  # no outcomes yet: every request starts from the same acceptance prior
    pol.bind(PolicyContext(RooflineCostModel()))
    k = [int(pol.targets(view(64_000, 32, pre))[0]) for pre in (0, 512, 2048, 8192)]
    assert k == sorted(k, reverse=True)  # never more drafts for more prefill
    assert k[-1] < k[0]


def test_batcher_shows_the_pass_prefill_load(monkeypatch):
    seen = []  # [view.prefill_tokens, view.num_decode, the pass's prefill tokens (None: a segment)]
    targets, plan = Aspire.targets, Batcher.plan

    def spy_targets(self, v):
        seen.append([v.prefill_tokens, v.num_decode, None])
        return targets(self, v)

    def spy_plan(self, now):
        first = len(seen)
        p = plan(self, now)
        for s in seen[first:]:
            s[2] = int(p.prefill_tokens.sum())
        return p

    monkeypatch.setattr(Aspire, "targets", spy_targets)
    monkeypatch.setattr(Batcher, "plan", spy_plan)
    run(make_trace(30, seed=2, span=3.0, prompt=(2000, 20000), output=(20, 200)), policy="aspire", token_budget=8192)
    beside_prefill = [s for s in seen if s[2]]
    assert beside_prefill
    for pre, nd, actual in beside_prefill:  # verifications' extra query tokens may shrink the chunk
        assert actual <= pre <= 8192 - nd
    assert all(pre == 0 for pre, _, actual in seen if actual is None)  # segments run no prefill


def test_zero_target_holds_long_only_when_speculation_cannot_pay():
    """A zero target made by cost alone (short context: a draft costs about a verification, so
    even perfect acceptance loses) holds until the context grows by a quarter; one made by low
    acceptance holds plain_hold tokens, so the request tries again after a hard span."""
    pol = Aspire()
    pol.bind(PolicyContext(RooflineCostModel()))
    short = view(1_200, 2, 0)
    assert int(pol.targets(short)[0]) == 0
    assert int(np.asarray(pol.hold(short, np.zeros(1, np.int64)))[0]) == 1_200 // 4
    pol.acc.update(np.zeros(1, np.int64), np.full(1, 8), np.zeros(1, np.int64))  # request 0 fails early, often
    for _ in range(40):  # past `explore` (32 pooled trials): its zeros are trusted, not probed
        pol.acc.update(np.zeros(1, np.int64), np.full(1, 8), np.zeros(1, np.int64))
    long = view(64_000, 2, 0)
    assert int(pol.targets(long)[0]) == 0
    assert int(np.asarray(pol.hold(long, np.zeros(1, np.int64)))[0]) == Aspire.plain_hold
