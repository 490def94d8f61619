"""`spsim validate`'s simulator side prices every pass through a recording proxy of the cost model
(spsim.cost.recording.RecordingCost). The proxy must be invisible to the policies: a policy that looks
at its cost model's class for a fast path (aspire, entropy) crashed on it once (2026-12-01, on the
H200, `aspire` under `validate_gpu.py`). Every built-in policy, proxied or not, gives the same run."""

from __future__ import annotations

import numpy as np
import pytest

from spsim.config import ServingConfig
from spsim.policies.registry import list_policies
from spsim.traces import Trace
from spsim.cost.recording import RecordingCost


@pytest.mark.parametrize("name", sorted(list_policies()))
def test_recording_proxy_changes_nothing(name):
    from dataclasses import fields

    from spsim.build import build_cost_model
    from spsim.simulator.engine import SimConfig, simulate

    n = 6
    tr = Trace(np.array([f"r{i}" for i in range(n)], object), np.zeros(n), np.array([3000, 9000, 600, 20000, 4000, 700]),
               np.array([40, 25, 60, 30, 12, 50]))
    cfg = ServingConfig(policy=name, offline=True, seed=3)
    sc = SimConfig(**{f.name: getattr(cfg, f.name) for f in fields(ServingConfig)}, fast=False)
    cost = build_cost_model(cfg)
    plain = simulate(tr, sc, cost=cost).summary
    rec = RecordingCost(cost)
    proxied = simulate(tr, sc, cost=rec).summary
    assert len(rec.passes) > 0
    # every figure of the run (not the simulator's own wall time)
    keys = [k for k in plain if "wall" not in k]
    assert {"output_throughput", "mean_tpot_ms", "drafted_tokens", "pass_time_s"} <= set(keys)
    assert {k: proxied[k] for k in keys} == {k: plain[k] for k in keys}
