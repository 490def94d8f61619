"""A zero target (no speculation) expires after `plain_hold` tokens and the policy is asked again;
smoothed acceptance relaxes towards the pooled rate while a request does not speculate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from spsim.policies.acceptance_ema import AcceptanceEMA
from spsim.policies.base import DecodeView, Policy
from spsim.policies.registry import POLICIES, list_policies
from conftest import make_trace, run, strip

ASKED: list[tuple[int, int]] = []  # (request, committed) at each decision


@dataclass
class _PlainThenSpec(Policy):
    """No speculation for a request's first 20 tokens, then k=3: only reachable if asked again."""

    name = "test-plain-then-spec"
    plain_hold = 5

    def targets(self, view: DecodeView) -> np.ndarray:
        ASKED.extend(zip(view.ids.tolist(), view.committed.tolist()))
        return np.where(view.committed < 20, 0, 3)


@dataclass
class _Planned(_PlainThenSpec):
    """The same policy with the fast path's plan of held targets (`FastPath.held`), whose plain
    segments must end where a zero target expires."""

    name = "test-plain-then-spec-planned"

    def fast_plan(self, ahead, max_passes: int):
        return ahead.held(max_passes) if ahead.ask() else None


@pytest.fixture(autouse=True)
def _registered(monkeypatch):
    """The test policy is registered for this module's tests only (no global state on import)."""
    monkeypatch.setitem(POLICIES, _PlainThenSpec.name, _PlainThenSpec)
    monkeypatch.setitem(POLICIES, _Planned.name, _Planned)


@pytest.mark.parametrize("fast", [True, False])
def test_zero_target_is_asked_again_after_plain_hold(fast):
    ASKED.clear()
    tr = make_trace(1, seed=0, output=(60, 60))
    res = run(tr, policy=_Planned.name, fast=fast, p=1.0)
    req = res.requests.iloc[0]
    assert req["drafts"] > 0  # it did speculate once the plain span was over
    first = [c for r, c in ASKED if c < 20]
    # asked at most every plain_hold tokens while plain (one request: the batch never changes)
    assert all(b - a <= _PlainThenSpec.plain_hold for a, b in zip(first, first[1:]))
    assert max(first) >= 20 - _PlainThenSpec.plain_hold


def test_plain_hold_fast_equals_step():
    tr = make_trace(30, seed=5, span=2.0, prompt=(50, 3000), output=(10, 90))
    fast = run(tr, policy=_Planned.name, fast=True, p=0.7)
    step = run(tr, policy=_Planned.name, fast=False, p=0.7)
    assert fast.summary["sim_events"]["segments"] > 0
    assert strip(fast.summary) == strip(step.summary)
    assert fast.requests.equals(step.requests)


def test_policy_without_fast_plan_runs_on_the_step_path():
    """A policy written as one class (`targets` only) runs unchanged: no segments, the same run."""
    tr = make_trace(30, seed=5, span=2.0, prompt=(50, 3000), output=(10, 90))
    one = run(tr, policy=_PlainThenSpec.name, fast=True, p=0.7)
    planned = run(tr, policy=_Planned.name, fast=True, p=0.7)
    assert one.summary["sim_events"]["segments"] == 0 < planned.summary["sim_events"]["segments"]
    assert one.requests.equals(planned.requests)


def test_ema_relaxes_only_without_outcomes():
    ema = AcceptanceEMA(weight=0.1, prior=0.8)
    ids = np.array([1, 2])
    for _ in range(10):  # 1 and 2 fail at their first draft again and again (3 keeps the pool high)
        ema.update(np.array([1, 2, 3]), np.array([8, 8, 8]), np.array([0, 0, 8]))
    low = ema.get(ids, np.array([100, 100]))
    before = list(ema.counts[1])
    # request 1 emits 10 tokens without speculating; request 2 gets an outcome in between
    ema.update(np.array([2]), np.array([4]), np.array([0]))
    pooled = ema.pop[0] / ema.pop[1]
    again = ema.get(ids, np.array([110, 110]))
    assert low[0] < again[0] < pooled  # relaxed towards the pool, 1 - 0.9**10 of the way
    w = 0.9 ** 10
    assert ema.counts[1][1] == pytest.approx(w * before[1] + (1 - w) * 4.0)
    assert ema.counts[1][0] == pytest.approx(w * before[0] + (1 - w) * 4.0 * pooled)
    assert again[1] <= low[1]  # an outcome arrived: no relaxation, only the new evidence


def test_builtin_policies_keep_their_hold():
    assert list_policies()["oracle"].plain_hold == 1 and Policy.plain_hold == 8
