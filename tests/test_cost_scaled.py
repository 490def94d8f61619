"""A cost model on a machine slower by one factor (spsim/cost/scaled.py)."""

from __future__ import annotations

import numpy as np
import pytest

from spsim.cost.scaled import ScaledCost


@pytest.mark.parametrize("policy", ["ar", "aspire", "fixed-k:k=4"])
def test_a_doubled_cost_doubles_every_time_and_changes_no_decision(policy):
    """Offline, every price doubled (exact in binary floating point): the same passes, drafts and
    acceptances, every time twice as long; the policies' own estimates are scaled alike, so
    cost-aware `aspire` decides the same."""
    from spsim.build import build_cost_model
    from spsim.config import ServingConfig
    from spsim.simulator.engine import SimConfig, simulate
    from spsim.traces import read_trace

    tr = read_trace("azure-conv").take(np.arange(40))
    cfg = ServingConfig(policy=policy, offline=True, seed=3)
    sc = SimConfig(policy=policy, offline=True, seed=3)
    base = build_cost_model(cfg)
    a = simulate(tr, sc, cost=base)
    b = simulate(tr, sc, cost=ScaledCost(base, 2.0))
    assert b.summary["duration"] == 2 * a.summary["duration"] > 0
    assert b.summary["mean_tpot_ms"] == 2 * a.summary["mean_tpot_ms"]
    for k in ("passes", "drafted_tokens", "accepted_drafts", "verifications", "total_output_tokens"):
        assert b.summary[k] == a.summary[k], k
    assert ScaledCost(base, 2.0).name.endswith("x2")
    with pytest.raises(ValueError):
        ScaledCost(base, 0.0)


def test_repredict_refuses_a_bad_machine_factor_in_one_line(tmp_path):
    """`repredict.py --slower` takes RUN=X for runs of the index: anything else exits 2 with one
    line naming it, before any simulation."""
    import io
    import subprocess
    import sys
    import tarfile
    from pathlib import Path

    from spsim.cost.shipped import profile_path

    with tarfile.open(tmp_path / "validate_runs.tar.gz", "w:gz") as tar:  # an index of one run
        for name in ("validate.json", "passes.jsonl"):
            data = b"{}"
            info = tarfile.TarInfo(f"validate_runs/some-run/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "repredict.py"
    prof = profile_path("h200", "llama-3.1-8b")
    for arg, says in (("x=abc", "expected RUN=X"), ("no-such-run=0.03", "no-such-run")):
        r = subprocess.run([sys.executable, str(script), "--index", str(tmp_path), "--profile", str(prof),
                            "--slower", arg], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr and not r.stdout
