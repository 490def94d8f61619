"""Speculation's once-per-pass costs reach the cost-aware policies (`CostModel.spec_overhead`).

The calibrated model adds fitted per-pass terms to every pass holding drafts (drafting, a run's
first drafts, verifying drafts, drafting beside verifications: ~1-2 ms a pass on the H200 8B
profile against 7-8 ms short-context decodes). Policies that priced speculation per request only
saw drafting as cheaper than decoding at 1K contexts (the fitted per-verification term is larger
than a later draft's) and `aspire` drafted through the Azure conversation trace, 15 % slower per
output token than `ar` in the simulator's own clock."""

from __future__ import annotations

import numpy as np
import pytest

from spsim.cost.shipped import PROFILES
from spsim.cost import RooflineCostModel, read_profile
from spsim.cost.calibrated import CalibratedCostModel
from spsim.plan import DraftMethod, PassPlan


@pytest.fixture(scope="module")
def cm():
    return CalibratedCostModel.from_profile(read_profile(PROFILES / "h200-llama-3.1-8b.json"))


def _plan(nd, nv, ctx, q, pos):
    i = lambda a: np.asarray(a, np.int64)  # noqa: E731
    return PassPlan(draft_ids=i(range(nd)), draft_context=i([ctx] * nd), draft_budget=2048,
                    draft_method=int(DraftMethod.VERIFY_QUEST), draft_pos=i([pos] * nd),
                    verify_ids=i(range(nd, nd + nv)), verify_query=i([q] * nv), verify_context=i([ctx] * nv))


def test_spec_overhead_is_what_time_adds_once_per_pass(cm):
    m = int(DraftMethod.VERIFY_QUEST)
    dp, fp, sp, mx = cm.spec_overhead(m)
    assert min(dp, fp, sp, mx) > 0 and dp + fp + sp + mx > 1e-3  # the shipped profile has them
    zero = cm.with_params(draft_pass_s=(0.0,) * len(cm.p.draft_pass_s), first_pass_s=(0.0,) * len(cm.p.first_pass_s),
                          spec_pass_s=0.0, mixed_pass_s=0.0)
    assert zero.spec_overhead(m) == (0.0, 0.0, 0.0, 0.0)
    cases = [(_plan(8, 4, 4096, 5, 0), dp + fp + sp + mx),  # first drafts beside verifications of drafts
             (_plan(8, 4, 4096, 1, 2), dp + mx),  # later drafts beside plain decodes
             (_plan(8, 0, 4096, 1, 1), dp),  # drafts alone
             (_plan(0, 8, 4096, 5, 0), sp)]  # verifications alone
    for plan, extra in cases:
        assert cm.time(plan) - zero.time(plan) == pytest.approx(extra, rel=1e-9)
    assert RooflineCostModel().spec_overhead(m) == (0.0, 0.0, 0.0, 0.0)


def test_aspire_does_not_draft_where_the_pass_terms_make_it_lose(cm):
    """Azure conversations (1-4K contexts, the first 45 s): drafting cannot pay there (a draft reads
    the whole context when it is shorter than the budget, and pays the per-pass terms); `aspire`
    must run as `ar` does, to within its probes."""
    from dataclasses import fields

    from spsim.config import ServingConfig
    from spsim.simulator.engine import SimConfig, simulate
    from spsim.traces import read_trace
    from spsim.validate import select

    tr = select(read_trace("azure-conv"), None, 45.0)
    out = {}
    for policy in ("ar", "aspire"):
        cfg = ServingConfig(policy=policy, acceptance="sparsespec-llama8b", model="llama-3.1-8b", kv_pages=57248)
        res = simulate(tr, SimConfig(**{f.name: getattr(cfg, f.name) for f in fields(ServingConfig)}), cost=cm)
        out[policy] = (res.summary["mean_tpot_ms"], int(res.requests["drafts"].sum()))
    assert out["aspire"][0] <= out["ar"][0] * 1.01, out
    assert out["aspire"][1] < 0.02 * len(tr) * 100, out  # at most a few probes, not thousands of drafts
