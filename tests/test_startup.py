"""The start-up set's pre-key (startup.py `PreKey`): passes whose pre-key an earlier pass had are
not built, and the graph keys captured stay exactly those of building every pass."""

import importlib.util
from pathlib import Path

import pytest


def _graph_shapes():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "graph_shapes.py"
    spec = importlib.util.spec_from_file_location("graph_shapes", path)
    gs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gs)
    return gs


@pytest.mark.parametrize("policy", ["ar", "fixed-k:k=4", "sync:k=4", "aspire", "entropy"])
def test_startup_prekey_keeps_every_key(monkeypatch, policy):
    """Every pass built ("check": equal pre-keys must give equal keys, a pass given no pre-key no
    graph), then only the first of each pre-key: the same keys, fewer passes built. Counted with a
    stand-in model on the CPU at a small max batch and pool (both tiles of the short launches met)."""
    from spsim.gpu_runtime import startup

    gs = _graph_shapes()

    def run(mode):
        monkeypatch.setattr(startup, "DEDUPE", mode)
        r = gs.count_shapes("1x512", policy, 4, 20000, startup=True, max_batch=8)
        return list(map(str, r["_startup_keys"])), r["startup"]

    every, st_every = run("check")
    ours, st_ours = run(True)
    assert sorted(ours) == sorted(every) and len(set(ours)) == len(ours)
    assert st_ours["passes"] == st_every["passes"] == st_every["built"]
    assert st_ours["graphs"] == st_every["graphs"] and st_ours["built"] < st_ours["passes"]
