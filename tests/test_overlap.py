"""The overlapped loop (`RuntimeOptions.overlap`): each pass is planned and prepared while the
previous one runs, its sampled tokens staying on the device as placeholders (`executor.Slab`) and
its time stamps applied once it ends (`Batcher.stamp`). On the CPU nothing runs concurrently, but
every piece of bookkeeping is the one the GPU uses: a run must be the serial run, token for token.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spsim.config import ServingConfig  # noqa: E402
from spsim.errors import SpsimError  # noqa: E402

from test_runtime import CheapDrafts, mixed_trace, tiny  # noqa: E402,F401


def _runs(tiny, policy, method, **opts):  # noqa: F811
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    cfg = ServingConfig(policy=policy, offline=True, kv_pages=80, page_size=16, draft_budget=48, max_draft=6,
                        draft_kv=method, max_batch=8, token_budget=256, acceptance="sparsespec-llama8b")
    tr = mixed_trace(output=(30, 80))  # long enough outputs that the small pool preempts
    return [run_trace(tr, cfg, RuntimeOptions(device="cpu", overlap=o, **opts), model=tiny, cost=CheapDrafts())
            for o in (False, True)]


@pytest.mark.parametrize("policy,method,opts", [
    ("fixed-k:k=4", "verify-quest", {}),
    ("aspire", "verify-attn", {"pad_passes": True}),
    ("sync:k=3", "step-layer", {}),
    ("entropy", "static", {"synthetic_prefill": True}),
    ("ar", "auto", {"pad_passes": True, "coarse_shapes": True}),
])
def test_an_overlapped_run_is_the_serial_run(tiny, policy, method, opts):  # noqa: F811
    """Offline, the same plans, tokens, accept events and per-request counts, and every time stamp
    in place: placeholders resolved to the ids the serial loop read back, stamps deferred to the
    pass's end but none lost."""
    serial, over = _runs(tiny, policy, method, **opts)
    assert over.result.summary["runtime"]["overlap"] is True
    assert serial.result.summary["runtime"]["overlap"] is False
    assert over.tokens == serial.tokens
    assert all(t >= 0 for toks in over.tokens.values() for t in toks)  # no placeholder left
    assert over.events == serial.events
    strip = lambda ps: [{k: v for k, v in p.items() if not k.endswith("_ms")} for p in ps]  # noqa: E731
    assert strip(over.passes) == strip(serial.passes)
    cols = ["drafts", "verifies", "spec_verifies", "accepted", "preemptions", "recomputes", "output_tokens"]
    assert over.result.requests[cols].equals(serial.result.requests[cols])
    req = over.result.requests
    assert np.isfinite(req["first_token_s"]).all() and np.isfinite(req["finish_s"]).all()
    assert (req["finish_s"] >= req["first_token_s"]).all()
    s, o = serial.result.summary, over.result.summary
    assert o["completed"] == s["completed"] == 10
    if policy != "ar":
        assert o["drafted_tokens"] > 0 and o["preemptions"] > 0
    # offline time is the sum of the passes' intervals; each pass has one
    assert all(p["gpu_ms"] > 0 for p in over.passes)
    assert req["finish_s"].max() == pytest.approx(sum(p["gpu_ms"] for p in over.passes) / 1e3, rel=1e-4)


def test_overlap_under_arrivals_and_closed_loop(tiny):  # noqa: F811
    """With arrivals (wall clock) and closed-loop concurrency the overlapped loop sees arrivals and
    finishes a pass later, but serves every request with ordered stamps."""
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    tr = mixed_trace(output=(8, 16))
    tr.arrival_s = np.linspace(0.0, 0.3, len(tr))
    for kw in ({"offline": False}, {"offline": False, "concurrency": 3}):
        cfg = ServingConfig(policy="fixed-k:k=3", kv_pages=200, page_size=16, draft_budget=48, max_draft=6,
                            max_batch=8, token_budget=256, acceptance="sparsespec-llama8b", **kw)
        run = run_trace(tr, cfg, RuntimeOptions(device="cpu", overlap=True), model=tiny, cost=CheapDrafts())
        req = run.result.requests
        assert run.result.summary["completed"] == len(tr)
        assert (req["first_token_s"] >= req["arrival_s"]).all()
        assert (req["finish_s"] >= req["first_token_s"]).all()
        assert all(t >= 0 for toks in run.tokens.values() for t in toks)
        assert sum(p["committed"] for p in run.passes) == int(req["output_tokens"].sum())


def test_overlap_needs_preset_acceptance(tiny):  # noqa: F811
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    cfg = ServingConfig(policy="ar", offline=True, kv_pages=200, page_size=16, acceptance="real")
    with pytest.raises(SpsimError, match="preset acceptance"):
        run_trace(mixed_trace(n=2), cfg, RuntimeOptions(device="cpu", overlap=True), model=tiny)


def test_slab_placeholders_wrap_and_resolve():
    """Placeholders name absolute slab positions; a pass's tokens stay contiguous across the ring's
    end; settled placeholders are replaced in order and unsettled ones kept."""
    from spsim.gpu_runtime.executor import RequestTokens, Slab

    slab = Slab(torch.device("cpu"))
    slab.head = Slab.SIZE - Slab.SIZE // 8  # near the end: the next pass starts at the ring's start
    slab.begin()
    assert slab.head % Slab.SIZE == 0
    a = slab.put(torch.tensor([5, 6, 7]))
    b = slab.put(torch.tensor([9]))
    assert a == [-slab.head + 3, -slab.head + 2, -slab.head + 1] and b == [-slab.head]
    ids = slab.fill(torch.tensor([1, a[1], 2, b[0]]))
    assert ids.tolist() == [1, 6, 2, 9]
    tk = slab.end()
    assert tk[1] == 4
    st = RequestTokens([3, 4, a[0], a[2]], 2, drafts=[b[0]])
    slab.begin()
    c = slab.put(torch.tensor([11]))
    st.tokens.append(c[0])  # a later pass's, not settled yet
    slab.settle(tk)
    slab.resolve(st)
    assert st.tokens == [3, 4, 5, 7, c[0]] and st.drafts == [9] and st.clean == 4
    slab.settle(slab.end())
    slab.resolve(st)
    assert st.tokens == [3, 4, 5, 7, 11] and st.clean == 5


class LaggedCheapDrafts(CheapDrafts):
    """CheapDrafts as measured on the overlapped runtime (what a profile's `overlap` says)."""

    overlapped = True


@pytest.mark.parametrize("policy", ["fixed-k:k=3", "aspire"])
def test_a_closed_loop_plans_alike_in_both_worlds_with_the_lag(tiny, policy):  # noqa: F811
    """Closed loop (--concurrency): the overlapped runtime sees each released request one pass late;
    the simulator with a cost model measured overlapped (`overlapped`: replica.py's lag) models just
    that, so both build the same passes. Without the lag the simulator plans differently."""
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace
    from spsim.simulator.engine import SimConfig, simulate

    kw = dict(policy=policy, concurrency=3, kv_pages=200, page_size=16, draft_budget=48, max_draft=6,
              max_batch=8, token_budget=256, acceptance="sparsespec-llama8b")
    tr = mixed_trace(output=(20, 50))
    run = run_trace(tr, ServingConfig(**kw), RuntimeOptions(device="cpu", overlap=True), model=tiny,
                    cost=LaggedCheapDrafts())
    lagged = simulate(tr, SimConfig(**kw), cost=LaggedCheapDrafts())
    plain = simulate(tr, SimConfig(**kw), cost=CheapDrafts())
    cols = ["drafts", "verifies", "spec_verifies", "accepted"]
    assert run.result.requests[cols].equals(lagged.requests[cols])
    n = sum(run.result.summary["passes"].values())
    assert n == sum(lagged.summary["passes"].values())
    assert n != sum(plain.summary["passes"].values())


def test_the_lag_delays_first_tokens_under_arrivals():
    """Open-loop arrivals: the same trace simulated with the lag has every request's first token no
    earlier and some later (one pass, for those arriving while a pass ran); offline nothing moves."""
    from spsim.simulator.engine import SimConfig, simulate

    tr = mixed_trace(n=30, output=(20, 60))
    tr.arrival_s = np.sort(np.random.default_rng(0).uniform(0, 0.2, len(tr)))
    kw = dict(policy="fixed-k:k=3", kv_pages=2000, page_size=16, draft_budget=48, max_draft=6, max_batch=8,
              token_budget=256, acceptance="sparsespec-llama8b")
    lag, plain = (simulate(tr, SimConfig(**kw), cost=c) for c in (LaggedCheapDrafts(), CheapDrafts()))
    d = lag.requests["first_token_s"].to_numpy() - plain.requests["first_token_s"].to_numpy()
    assert (d >= -1e-12).all() and (d > 0).any()
    off = [simulate(tr, SimConfig(offline=True, **kw), cost=c).requests for c in (LaggedCheapDrafts(), CheapDrafts())]
    assert off[0].equals(off[1])


def test_slab_bookkeeping_over_many_passes():
    """A long simulated history of passes over a small ring (the ring wraps many times): every
    request's tokens, read back through placeholders, gathers and settles one pass late, equal the
    ids sampled, and no placeholder outlives the pass after its own."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from spsim.gpu_runtime.executor import RequestTokens, Slab

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), min_size=1, max_size=60),
           st.integers(0, 2**31))
    def check(passes, seed):
        rng = np.random.default_rng(seed)
        slab = Slab(torch.device("cpu"))
        slab.SIZE = 64  # wraps every few passes
        slab.host = np.zeros(slab.SIZE, np.int64)
        reqs = {r: RequestTokens([int(x) for x in rng.integers(0, 100, 3)], 3) for r in range(6)}
        truth = {r: list(st_.tokens) for r, st_ in reqs.items()}
        pending = None
        for rids in passes:
            rids = sorted(set(rids))
            slab.begin()
            ids = torch.tensor([reqs[r].tokens[-1] for r in rids])  # this pass's inputs
            if (ids < 0).any():  # as the executor: gathered only where a placeholder is
                ids = slab.fill(ids)
            assert ids.tolist() == [truth[r][-1] for r in rids]
            new = torch.as_tensor(rng.integers(0, 100, len(rids)))
            for r, ph in zip(rids, slab.put(new)):
                reqs[r].tokens.append(ph)
            for r, x in zip(rids, new.tolist()):
                truth[r].append(x)
            tk = slab.end()
            if pending is not None:  # the previous pass ends while this one is in flight
                slab.settle(pending[0])
                for r in pending[1]:
                    slab.resolve(reqs[r])
                    assert all(x >= 0 for x in reqs[r].tokens[:-1])  # only this pass's may wait
            pending = (tk, rids)
        slab.settle(pending[0])
        for r in pending[1]:
            slab.resolve(reqs[r])
        assert {r: s.tokens for r, s in reqs.items()} == truth

    check()


def test_rehearsed_and_repeated_overlapped_runs_are_the_plain_run(tiny):  # noqa: F811
    """`rehearse` and `repeats` serve the trace again over the same executor, slab and stores: with
    the overlapped loop every measured run is a fresh run (tokens, events, passes)."""
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    cfg = ServingConfig(policy="aspire", offline=True, kv_pages=120, page_size=16, draft_budget=48, max_draft=6,
                        draft_kv="verify-attn", max_batch=8, token_budget=256, acceptance="sparsespec-llama8b")
    plain = run_trace(mixed_trace(), cfg, RuntimeOptions(device="cpu", pad_passes=True, overlap=True), model=tiny,
                      cost=CheapDrafts())
    again = run_trace(mixed_trace(), cfg, RuntimeOptions(device="cpu", pad_passes=True, overlap=True, rehearse=True,
                                                         repeats=2), model=tiny, cost=CheapDrafts())
    assert again.tokens == plain.tokens and again.events == plain.events
    strip = lambda ps: [{k: v for k, v in p.items() if not k.endswith("_ms")} for p in ps]  # noqa: E731
    assert strip(again.passes) == strip(plain.passes)
    reps = again.result.summary["runtime"]["repeats"]
    assert len(reps) == 2 and reps[0]["passes_run"] == reps[1]["passes_run"] == len(plain.passes)
