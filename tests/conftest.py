"""Test session setup.

Kernel tests run on the CPU through Triton's interpreter unless GPU tests were selected; the
variable must be set before anything imports triton.
"""

import os
import sys


def pytest_configure(config):
    markexpr = config.getoption("-m") or ""
    if "gpu" in markexpr and "not gpu" not in markexpr:
        return
    if "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")


# ---- shared helpers (imported by tests as `from conftest import ...`). They import the simulator
# when called, not here: the GPU machine runs tests/gpu without simpy.

def make_trace(n, seed=0, span=5.0, prompt=(100, 20000), output=(1, 200), prefix=False):
    """`n` requests with uniform arrivals over `span` seconds and uniform lengths; with `prefix`,
    prompts share a few conversation prefixes of 512-token blocks."""
    import numpy as np

    from spsim.traces.trace import Trace

    rng = np.random.default_rng(seed)
    arr = np.sort(rng.uniform(0, span, n))
    arr -= arr[0]
    p = rng.integers(prompt[0], prompt[1] + 1, n)
    o = rng.integers(output[0], output[1] + 1, n)
    tr = Trace(np.array([f"r{i}" for i in range(n)], object), arr, p, o)
    if prefix:
        blocks, indptr = [], [0]
        for i in range(n):
            nb = -(-int(p[i]) // 512)
            root = int(rng.integers(0, 3))
            shared = min(nb, int(rng.integers(0, nb + 1)))
            blocks += [root * 100000 + j for j in range(shared)] + [10**7 + i * 1000 + j for j in range(nb - shared)]
            indptr.append(len(blocks))
        tr.prefix_indptr = np.asarray(indptr, np.int64)
        tr.prefix_ids = np.asarray(blocks, np.int64)
        tr.meta["block_size"] = 512
    return tr


def acc(p=0.8, seed=0, position=False):
    """A simple acceptance model: fixed rate p, or decaying with draft position."""
    from spsim.acceptance.simple import FixedAcceptance, PositionAcceptance

    a = PositionAcceptance(p0=p, decay=0.03) if position else FixedAcceptance(p=p)
    a._setup(seed)
    return a


_ROOF = []


def run(tr, cost=None, p=0.8, seed=0, position=False, **kw):
    """Simulate `tr` with the roofline (default) and a simple acceptance model."""
    from spsim.cost.roofline import RooflineCostModel
    from spsim.simulator.engine import SimConfig, simulate

    if cost is None:
        if not _ROOF:
            _ROOF.append(RooflineCostModel())
        cost = _ROOF[0]
    return simulate(tr, SimConfig(seed=seed, **kw), cost=cost, acceptance=acc(p, seed, position))


def strip(summary: dict) -> str:
    """A summary as comparable text, without the simulator's event counts."""
    import json

    s = dict(summary)
    s.pop("sim_events", None)
    return json.dumps(s, sort_keys=True)
