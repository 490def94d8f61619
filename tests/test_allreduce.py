"""The all-reduce measurement harness (gloo on the CPU here; NCCL in CUDA graphs on a GPU machine)
and the fit of the tensor-parallel term's two constants."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")


def test_fit_recovers_latency_and_bandwidth():
    from spsim.calibration.allreduce import fit

    world, lat, bw = 2, 17e-6, 315e9
    pts = []
    for rows in (1, 8, 128, 512, 4096):
        nbytes = rows * 4096 * 2
        pts.append({"rows": rows, "bytes": nbytes, "seconds": lat + nbytes * 2 * (world - 1) / world / bw})
    for mib in (64, 512):
        nbytes = mib << 20
        pts.append({"rows": None, "bytes": nbytes, "seconds": lat + nbytes * 2 * (world - 1) / world / bw})
    f = fit(pts, world, nvlink_bw=450e9)
    assert f["allreduce_latency_s"] == pytest.approx(lat, rel=1e-6)
    assert f["bus_bandwidth_bytes_s"] == pytest.approx(bw, rel=1e-6)
    assert f["nvlink_eff"] == pytest.approx(bw / 450e9, rel=1e-6)
    assert f["max_abs_rel"] < 1e-9


def test_measure_runs_two_processes():
    """Two gloo processes on the CPU: every size timed, times positive and growing with bytes at
    the large end (the harness is what runs NCCL on the GPU machine)."""
    from spsim.calibration.allreduce import measure

    m = measure(world=2, hidden=64, rows=(1, 64), big_mib=(8,), reps=3)
    assert m["backend"] == "gloo" and m["world"] == 2
    pts = m["points"]
    assert [p["rows"] for p in pts] == [1, 64, None]
    assert all(p["seconds"] > 0 and p["samples"] == 3 for p in pts)
    assert pts[-1]["bytes"] == 8 << 20 and pts[-1]["seconds"] > pts[0]["seconds"]
    assert np.isfinite([p["seconds"] for p in pts]).all()


def test_a_measured_allreduce_sets_the_gpu_constants(tmp_path):
    """`spsim calibrate` finds `<measurements>.allreduce.json` beside the measurements and fits the
    GPU's all-reduce latency and NVLink efficiency from it (the tensor-parallel term)."""
    import json

    from spsim.calibration.calibrate import _with_allreduce
    from spsim.hardware import get_gpu

    meas = tmp_path / "m.jsonl"
    g = get_gpu("h200")
    same, none = _with_allreduce(g, meas, log=lambda s: None)
    assert same is g and none is None
    pts = [{"rows": r, "bytes": r * 8192, "seconds": 20e-6 + r * 8192 / 300e9} for r in (1, 64, 512, 4096)]
    (tmp_path / "m.allreduce.json").write_text(json.dumps({"world": 2, "points": pts}))
    lines = []
    g2, f = _with_allreduce(g, meas, log=lines.append)
    assert g2.allreduce_latency_s == pytest.approx(20e-6, rel=1e-6)
    assert g2.nvlink_eff == pytest.approx(300e9 / g.nvlink_bw, rel=1e-6)
    assert g2.hbm_bw == g.hbm_bw and "all-reduce over 2 GPUs" in lines[0]


def test_an_allreduce_measured_over_8_gpus_is_not_stepped_up_again(tmp_path):
    """A latency measured over all 8 GPUs of a machine is the TP-8 latency: the profile's GPU says
    so (`allreduce_ranks`), and GPU.allreduce_latency adds ring steps only past those GPUs."""
    import json

    from spsim.calibration.calibrate import _with_allreduce
    from spsim.hardware import get_gpu

    meas = tmp_path / "m.jsonl"
    pts = [{"rows": r, "bytes": r * 8192, "seconds": 25e-6 + r * 8192 / 300e9} for r in (1, 64, 512, 4096)]
    (tmp_path / "m.allreduce.json").write_text(json.dumps({"world": 8, "points": pts}))
    g8, _ = _with_allreduce(get_gpu("h100-sxm"), meas, log=lambda s: None)
    assert g8.allreduce_ranks == 8
    assert g8.allreduce_latency(8) == pytest.approx(25e-6, rel=1e-6)
    assert g8.allreduce_latency(4) < g8.allreduce_latency(8)
