"""Per-request draft lengths over time (policies/draftlog.py): recorded for a deterministic sample
of requests on the step path (the batcher) and on the fast path (cycle segments), the same records
either way, and recording changes no result."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spsim.policies.draftlog import DraftLog, sample_ids

POLICIES = ["fixed-k:k=4", "sync:k=4", "entropy", "aspire", "aspire:replan=pass", "ar"]


@pytest.fixture(scope="module")
def trace():
    from spsim.cli_report import load_trace

    return load_trace("mooncake", None, 120)


def _strip(s: dict) -> dict:
    return {k: v for k, v in s.items() if k not in ("config", "sim_events")}


@pytest.mark.parametrize("policy", POLICIES)
def test_recording_changes_nothing_and_both_paths_record_the_same(trace, policy):
    from spsim.simulator.engine import SimConfig, simulate

    cfg = SimConfig().with_(policy=policy, replicas=2)
    plain = simulate(trace, cfg)
    fast = simulate(trace, cfg, draft_sample=12)
    step = simulate(trace, cfg.with_(fast=False), draft_sample=12)
    assert _strip(fast.summary) == _strip(plain.summary)
    pd.testing.assert_frame_equal(fast.requests, plain.requests)
    assert "draft_lengths" not in plain.extra
    a, b = fast.extra["draft_lengths"], step.extra["draft_lengths"]
    assert list(a["sampled_ids"]) == list(b["sampled_ids"]) == list(sample_ids(len(trace), 12))
    for k in ("rid", "t_s", "drafted", "accepted"):
        np.testing.assert_array_equal(a[k], b[k])
    req = plain.requests.set_index("id")
    ids = plain.requests["id"].to_numpy()
    if policy == "ar":
        assert len(a["rid"]) == 0
        return
    assert len(a["rid"]) > 50  # real data: many verifications of the sampled requests
    assert set(a["rid"].tolist()) <= set(a["sampled_ids"].tolist())
    assert (a["drafted"] >= 1).all() and (a["accepted"] <= a["drafted"]).all() and (a["accepted"] >= 0).all()
    # per sampled request: as many records as verifications with drafts, the same accepted total
    for rid in a["sampled_ids"].tolist():
        mine = a["rid"] == rid
        row = req.loc[ids[rid]]
        assert mine.sum() == row["spec_verifies"]
        assert a["accepted"][mine].sum() == row["accepted"]
        t = a["t_s"][mine]
        assert (np.diff(t) > 0).all()
        if mine.any():
            assert row["first_token_s"] <= t[0] and t[-1] <= row["finish_s"]


def test_sample_is_deterministic_and_bounded():
    a, b = sample_ids(10_000, 24), sample_ids(10_000, 24)
    assert list(a) == list(b) and len(a) == 24 and len(set(a.tolist())) == 24
    assert a.min() < 2000 and a.max() > 8000  # spread over the trace, not its first ids
    assert list(sample_ids(5, 24)) == [0, 1, 2, 3, 4]
    log = DraftLog(100, 3)
    kept = log.ids.tolist()
    log.add(np.arange(100), np.full(100, 2), np.ones(100, np.int64), 1.5)
    r = log.records()
    assert r["rid"].tolist() == kept and (r["t_s"] == 1.5).all()
    with pytest.raises(ValueError):
        DraftLog(10, 0)
