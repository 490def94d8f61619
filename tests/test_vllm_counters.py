"""Speculation counters under vLLM v1's names, and acceptance by draft position from a recording
run (simulator/positions.py)."""

import pytest
from conftest import make_trace

from spsim.errors import SpsimError
from spsim.simulator.engine import SimConfig, simulate
from spsim.simulator.positions import simulate_with_positions


@pytest.fixture(scope="module")
def trace():
    return make_trace(40, seed=2, span=4.0, prompt=(2000, 20000), output=(20, 150))


@pytest.mark.parametrize("policy", ["fixed-k:k=4", "aspire"])
def test_vllm_names_and_positions(trace, policy):
    cfg = SimConfig(policy=policy, seed=1)
    fast = simulate(trace, cfg).summary
    assert fast["num_drafts"] == fast["spec_verifications"] > 0
    assert fast["num_draft_tokens"] == fast["drafted_tokens"]
    assert fast["num_accepted_tokens"] == fast["accepted_drafts"]
    assert fast["mean_acceptance_length"] == pytest.approx(1 + fast["accepted_drafts"] / fast["spec_verifications"])
    assert fast["num_accepted_tokens_per_pos"] is None  # the fast path keeps totals only
    rec = simulate_with_positions(trace, cfg).summary
    for k in ("completed", "duration", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "p99_tpot_ms"):
        assert rec[k] == fast[k], k  # the step path's run is the same run
    per_pos, drafted = rec["num_accepted_tokens_per_pos"], rec["num_drafted_per_pos"]
    assert sum(per_pos) == rec["num_accepted_tokens"]
    assert sum(drafted) == rec["num_draft_tokens"]
    assert drafted[0] == rec["num_drafts"]  # every verification with drafts held draft 0
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:]))  # accepted prefixes: non-increasing
    assert all(a <= d for a, d in zip(per_pos, drafted))
    if policy.startswith("fixed-k"):
        assert len(drafted) <= 4


def test_no_positions_for_oracle(trace):
    with pytest.raises(SpsimError, match="oracle"):
        simulate_with_positions(trace, SimConfig(policy="oracle"))


def test_ar_has_no_drafts(trace):
    s = simulate(trace, SimConfig(policy="ar")).summary
    assert s["num_drafts"] == 0 and s["mean_acceptance_length"] is None
