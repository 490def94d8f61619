"""What limited a run is said in the summary and on the terminal: KV memory capping the batch below
--concurrency/--max-batch, overload (a growing queue, goodput near zero), and what limits the
prefix cache's hit rate."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spsim.cli import app

runner = CliRunner()


def _gen(path, n, qps, prompt, output, seed=1):
    r = runner.invoke(app, ["trace", "gen", str(path), "-n", str(n), "--qps", str(qps), "--seed", str(seed),
                            "--prompt", prompt, "--output", output])
    assert r.exit_code == 0, r.output
    return path


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory):
    # long prompts against a small KV pool (--kv-pages): about 5 fit, as about 13 fit at 64K on an H200
    return _gen(tmp_path_factory.mktemp("tr") / "long.jsonl", 40, 1, "uniform:low=3500,high=4000",
                "uniform:low=30,high=60")


def _replay(*args):
    r = runner.invoke(app, ["replay", *map(str, args), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), r.stderr


@pytest.mark.parametrize("concurrency", [16, 64])
def test_memory_cap_is_said(long_trace, concurrency):
    s, err = _replay(long_trace, "-p", "ar", "--kv-pages", 1300, "--concurrency", concurrency)
    assert s["requested_concurrency"] == concurrency and s["requested_max_batch"] == 256
    assert s["peak_running"] == s["peak_running_per_replica"][0] <= 6
    assert s["batch_limited_by"] == "kv_memory"
    assert f"--concurrency {concurrency}" in s["memory_note"]
    assert 0.9 <= s["kv_peak_fraction"] <= 1.0
    assert "warning: KV memory caps the batch" in err and f"not the {concurrency} " in err


def test_same_results_at_16_and_64_are_explained(long_trace):
    a, _ = _replay(long_trace, "-p", "ar", "--kv-pages", 1300, "--concurrency", 16)
    b, _ = _replay(long_trace, "-p", "ar", "--kv-pages", 1300, "--concurrency", 64)
    assert a["output_throughput"] == b["output_throughput"]  # the symptom: identical results
    assert a["peak_running"] == b["peak_running"] < 16  # the cause, now in the summary


def test_no_memory_note_when_the_batch_fits(long_trace):
    s, err = _replay(long_trace, "-p", "ar", "--concurrency", 4)
    assert s["peak_running"] == 4 and s["batch_limited_by"] is None and s["memory_note"] is None
    assert "KV memory" not in err


def test_max_batch_beyond_memory(long_trace):
    s, err = _replay(long_trace, "-p", "ar", "--kv-pages", 1300, "--offline", "--max-batch", 32)
    assert s["batch_limited_by"] == "kv_memory" and "--max-batch 32 never reached" in s["memory_note"]
    s, _ = _replay(long_trace, "-p", "ar", "--offline", "--max-batch", 3)
    assert s["batch_limited_by"] == "max_batch" and s["peak_running"] == 3 and s["memory_note"] is None


def test_peak_running_matches_the_batcher(long_trace, monkeypatch):
    """The peak computed after the run from admission and finish times equals the batch size the
    batcher actually reached (no preemptions here)."""
    from spsim.policies.batcher import Batcher
    from spsim.simulator.engine import SimConfig, simulate
    from spsim.traces import read_trace

    seen = []
    admit = Batcher.admit

    def counting(self, now):
        admit(self, now)
        seen.append(len(self.running))

    monkeypatch.setattr(Batcher, "admit", counting)
    for kw in (dict(kv_pages=1300, concurrency=16), dict(concurrency=7), dict(qps=3.0)):
        seen.clear()
        s = simulate(read_trace(str(long_trace)), SimConfig(policy="fixed-k:k=4", **kw)).summary
        assert s["preemptions"] == 0
        assert s["peak_running"] == max(seen), kw


def test_overload_is_said(tmp_path):
    tr = _gen(tmp_path / "busy.jsonl", 150, 40, "uniform:low=4000,high=8000", "uniform:low=50,high=150")
    s, err = _replay(tr, "-p", "ar")
    assert s["overloaded"] and s["ttft_last_decile_mean_ms"] > 10 * s["ttft_first_decile_mean_ms"]
    assert "warning: overloaded: the queue keeps growing" in err
    light = _gen(tmp_path / "light.jsonl", 30, 0.5, "uniform:low=1000,high=2000", "uniform:low=20,high=40")
    s, err = _replay(light, "-p", "ar")
    assert not s["overloaded"] and s["overload_note"] is None and s["goodput_fraction"] > 0.9
    assert "warning" not in err


def test_low_goodput_is_said(long_trace):
    s, err = _replay(long_trace, "-p", "ar", "--slo-tpot", 0.001)
    assert s["goodput_fraction"] < 0.05 and not s["overloaded"]
    assert "goodput is 0% of throughput" in err


def test_prefix_cache_note(tmp_path):
    s, _ = _replay("mooncake", "-p", "ar", "--limit", 150, "--replicas", 2)
    assert 0 < s["prefix_cache_repeat_fraction"] < 1
    assert 0 < s["prefix_cache_room_pages"] <= s["kv_capacity_pages"]
    note = s["prefix_cache_note"]
    assert "repeat" in note and "pages per replica" in note and "2 replicas" in note
    s, _ = _replay("mooncake", "-p", "ar", "--limit", 50, "--no-prefix-cache")
    assert s["prefix_cache_note"] is None
    r = runner.invoke(app, ["replay", "mooncake", "-p", "ar", "--limit", "50"])
    assert "of blocks repeat" in r.stdout and "Cached blocks live in the KV memory" in " ".join(r.stdout.split())



def test_a_plan_far_from_full_pages_is_not_memory_bound(tmp_path):
    """A plan's failing probe whose requests waited while KV pages stayed at ~30 % of capacity was
    said to be limited by KV memory; memory is named only where the pages ran near full."""
    r = runner.invoke(app, ["plan", "azure-conv", "--limit", "400", "--slo", "ttft_p90=2s,tpot_p99=60ms",
                            "--policies", "ar", "--gpus", "h200", "--replicas", "1", "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    import csv

    rows = list(csv.DictReader(open(tmp_path / "p" / "results.csv")))
    assert rows and all(row["limiter"] != "kv_memory" for row in rows), rows
