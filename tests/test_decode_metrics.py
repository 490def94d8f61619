"""Decode-phase figures in the run summary and in `compare`: time per output token and throughput
of decode-only passes, and the share of GPU time in prefill (spsim/metrics.py)."""

import numpy as np

from spsim.compare import FIGURES, compare_policies
from spsim.simulator.engine import SimConfig, simulate
from spsim.traces import read_trace


def _trace(n=40):
    tr = read_trace("mooncake")
    return tr.take(np.arange(n))


def test_summary_decode_phase():
    s = simulate(_trace(), SimConfig(seed=0, policy="fixed-k:k=4", concurrency=8)).summary
    t = s["pass_time_s"]
    dec = t["mixed"] + t["draft"] + t["verify"]
    assert abs(s["decode_time_s"] - dec) < 1e-9
    assert abs(s["prefill_time_share"] - t["prefill"] / sum(t.values())) < 1e-12
    # every request completes: decode tokens = output tokens minus each request's first token
    assert s["completed"] == 40 and s["decode_tokens"] == s["total_output_tokens"] - 40
    assert abs(s["decode_time_per_token_ms"] - dec / s["decode_tokens"] * 1e3) < 1e-9
    assert abs(s["decode_output_throughput"] * s["decode_time_per_token_ms"] / 1e3 - 1) < 1e-9  # one replica


def test_compare_shows_decode_phase():
    keys = {f[0] for f in FIGURES}
    assert {"decode_time_per_token_ms", "decode_output_throughput", "prefill_time_share"} <= keys
    # the analytic model, where drafting is cheap enough to pay at these contexts (with the H200
    # profile of our runtime, fixed-k:k=4 is slower than ar here, as it measured about equal on Mooncake)
    rows = compare_policies(_trace(30), SimConfig(concurrency=8, cost="roofline"), ["ar", "fixed-k:k=4"], 1)
    assert rows[1]["decode_time_per_token_ms_vs_ref"] < 1.0  # speculation shortens decode time per token
