"""The tensor-parallel all-reduce latency grows with the TP degree (issue 13): none at TP 1, the
2-GPU measurement at TP 2, one fitted cost per extra ring step above (spsim/hardware.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spsim.cost.roofline import RooflineCostModel
from spsim.hardware import ALLREDUCE_STEP_S, get_gpu

ROOT = Path(__file__).resolve().parents[1]


def test_latency_by_tp():
    h200 = get_gpu("h200")
    assert h200.allreduce_latency(1) == 0.0
    assert h200.allreduce_latency(2) == pytest.approx(10.9e-6)  # the 2-GPU measurement, unchanged
    assert h200.allreduce_latency(8) == pytest.approx(10.9e-6 + 12 * ALLREDUCE_STEP_S)
    assert h200.allreduce_latency(8) == pytest.approx(22.3e-6, rel=0.01)  # published 8 x H100 intercept
    assert get_gpu("h100-sxm").allreduce_latency(8) == h200.allreduce_latency(8)
    a100 = get_gpu("a100-80gb")
    assert a100.allreduce_latency(2) == pytest.approx(10.2e-6)  # published 2 x A100 (nccl issue 583)
    assert a100.allreduce_latency(8) == pytest.approx(16.95e-6, rel=0.01)  # published 8 x A100 (mscclpp NDmv4)
    assert a100.allreduce_latency(4) < a100.allreduce_latency(8)


def test_a_latency_measured_at_more_ranks():
    """A latency measured over 8 GPUs (allreduce_ranks = 8) is the TP 8 latency, and TP 2 is 12
    ring steps less."""
    import dataclasses

    g = dataclasses.replace(get_gpu("h200"), allreduce_latency_s=22.3e-6, allreduce_ranks=8)
    assert g.allreduce_latency(8) == pytest.approx(22.3e-6)
    assert g.allreduce_latency(2) == pytest.approx(22.3e-6 - 12 * ALLREDUCE_STEP_S)
    assert get_gpu(g).allreduce_latency(1) == 0.0


def test_roofline_charges_the_tp_latency():
    m1 = RooflineCostModel("llama-3.1-8b", "h200", tp=1)
    assert m1.comm_fixed_s == 0.0 and m1.comm_token_s == 0.0
    for tp in (2, 4, 8):
        m = RooflineCostModel("llama-3.1-8b", "h200", tp=tp)
        assert m.comm_fixed_s == pytest.approx(2 * m.model.layers * m.gpu.allreduce_latency(tp))
    m2 = RooflineCostModel("llama-3.1-8b", "h200", tp=2)
    assert m2.comm_fixed_s == pytest.approx(2 * 32 * 10.9e-6)  # TP 2 as before


def test_step_constant_is_the_fit(tmp_path):
    """ALLREDUCE_STEP_S is what benchmarks/allreduce_tp_fit.py fits from its cited figures."""
    out = tmp_path / "fit.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "allreduce_tp_fit.py"), "--out", str(out)],
                   check=True, capture_output=True)
    fit = json.loads(out.read_text())
    assert fit["step_us"] * 1e-6 == pytest.approx(ALLREDUCE_STEP_S, rel=2e-3)
    assert fit["check_tp4_in_graph"]["max_abs_rel"] < 0.1


def test_a100_constants_are_the_fit(tmp_path):
    """The A100's all-reduce constants are what benchmarks/allreduce_a100_fit.py fits from its cited
    figures (2 and 8 x A100 NCCL latencies, 8 x A100 bus bandwidth)."""
    out = tmp_path / "a100.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "allreduce_a100_fit.py"), "--out", str(out)],
                   check=True, capture_output=True)
    fit = json.loads(out.read_text())
    a100 = get_gpu("a100-80gb")
    assert a100.allreduce_ranks == 2
    assert a100.allreduce_latency_s * 1e6 == pytest.approx(fit["latency_2gpu"]["us"], rel=2e-3)
    assert a100.allreduce_step_s * 1e6 == pytest.approx(fit["step_us"], rel=2e-3)
    assert a100.nvlink_eff == pytest.approx(fit["nvlink_eff"], rel=2e-3)
    assert a100.allreduce_latency(8) * 1e6 == pytest.approx(fit["latency_8gpu"]["us"], rel=2e-3)
