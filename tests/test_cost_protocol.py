"""The CostModel protocol as callers use it: `times` over a batch of passes equal to `time` pass by
pass, `tables` equal to `marginal` (and how policies reach the tables: through the protocol, not
by which concrete `marginal` they hold)."""

from __future__ import annotations

import numpy as np
import pytest

from spsim.cost import CalibratedCostModel, CostModel, make_cost_model
from spsim.cost.batch import PlanBatch
from spsim.cost.constant import ConstantCostModel
from spsim.cost.recording import RecordingCost
from spsim.cost.shipped import profile_path
from spsim.plan import DraftMethod, PassPlan


def plans(seed: int, n_plans: int = 30):
    """Random passes, each with its own draft budget and method (as calibration's designs)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_plans):
        n = int(rng.integers(1, 90))
        ctx, q, pos = rng.integers(0, 130000, n), rng.integers(1, 3000, n), rng.integers(0, 20, n)
        on = rng.random(3) < 0.6
        pick = lambda k, a: a if on[k] else a[:0]  # noqa: E731
        ids = np.arange(n)
        out.append(PassPlan(prefill_ids=pick(0, ids), prefill_tokens=pick(0, q), prefill_context=pick(0, ctx),
                            draft_ids=pick(1, ids), draft_context=pick(1, ctx), draft_pos=pick(1, pos),
                            draft_budget=int(rng.integers(1, 9000)), draft_method=int(rng.integers(0, len(DraftMethod))),
                            verify_ids=pick(2, ids), verify_query=pick(2, q % 40 + 1), verify_context=pick(2, ctx)))
    return out


def models():
    from spsim.cost import load_cost_model

    return [make_cost_model(), make_cost_model("qwen2.5-14b", "h100-sxm", tp=2),
            load_cost_model(profile_path("h200", "llama-3.1-8b")), ConstantCostModel(2e-3)]


@pytest.mark.parametrize("i", range(4))
def test_times_of_a_batch_is_time_pass_by_pass(i):
    cm = models()[i]
    assert isinstance(cm, CostModel)
    ps = plans(i) + [PassPlan()]  # an empty pass costs nothing
    got = cm.times(PlanBatch.of(ps))
    assert got.shape == (len(ps),)
    np.testing.assert_allclose(got, [cm.time(p) for p in ps], rtol=1e-12, atol=0)


def test_a_recording_cost_prices_a_batch_pass_by_pass_and_records_each():
    rec = RecordingCost(make_cost_model())
    ps = plans(7, 5)
    assert rec.times(PlanBatch.of(ps)).tolist() == [make_cost_model().time(p) for p in ps]
    assert len(rec.passes) == 5 and isinstance(rec, CostModel)


@pytest.mark.parametrize("calibrated", [False, True])
def test_tables_are_the_marginal_prices(calibrated):
    from spsim.cost import load_cost_model

    cm = load_cost_model(profile_path("h200", "llama-3.1-8b")) if calibrated else make_cost_model()
    assert isinstance(cm, CalibratedCostModel) == calibrated
    rng = np.random.default_rng(3)
    ctx, K = rng.integers(1, 90000, 70), 9
    for m in range(len(DraftMethod)):
        draft, verify = cm.tables(2048, m, int(ctx.max()) + 1, K + 1)
        q = np.arange(1, K + 1)[None, :].repeat(len(ctx), 0)
        d, v = cm.marginal(ctx, 2048, m, q[:, 0])  # a 1-d call: the formulas, not the tables
        np.testing.assert_allclose(draft[ctx, 0], d, rtol=1e-12)
        np.testing.assert_allclose(verify[ctx, 1], v, rtol=1e-12)
        for pos in (1, 5):
            d, _ = cm.marginal(ctx, 2048, m, q[:, 0], draft_pos=np.full(len(ctx), pos))
            np.testing.assert_allclose(draft[ctx, pos], d, rtol=1e-12)
        _, v = cm.marginal(ctx[:, None].repeat(K, 1), 2048, m, q)
        np.testing.assert_allclose(verify[ctx[:, None], q], v, rtol=1e-12)
    assert cm.tables(2048, 1, cm.TABLE_MAX_CONTEXT + 1, 4) is None  # too large: the caller asks marginal
    assert ConstantCostModel().tables(2048, 1, 100, 4) is None


class _NoTables:
    """The roofline without its tables: a policy must then price through `marginal`."""

    name = "no-tables"

    def __init__(self):
        self.cm = make_cost_model()

    def __getattr__(self, name):
        return getattr(self.cm, name)

    def tables(self, budget, method, width, rows):
        return None


@pytest.mark.parametrize("spec", ["aspire", "entropy", "sync:k=-1"])
def test_policies_reach_the_tables_through_the_protocol(spec):
    """A model that declines `tables` is priced through `marginal` (no check of which function
    it is), and a policy's choices are the same either way: the tables hold marginal's floats."""
    from spsim.policies.base import DecodeView, PolicyContext
    from spsim.policies.registry import parse_policy

    n = 24
    ctx = np.random.default_rng(1).integers(2000, 60000, n)
    got, calls = [], []
    for cost in (make_cost_model(), _NoTables()):
        if isinstance(cost, _NoTables):
            inner = cost.cm.marginal
            cost.marginal = lambda *a, **k: (calls.append(1), inner(*a, **k))[1]
        pol = parse_policy(spec).make()
        pol.bind(PolicyContext(cost))
        view = DecodeView(ids=np.arange(n, dtype=np.int64), context=ctx.copy(), drafted=np.zeros(n, np.int64),
                          remaining=np.full(n, 300, np.int64), committed=np.full(n, 10, np.int64), budget=2048,
                          method=int(pol.default_draft_method), last_entropy=np.full(n, 0.5), sum_entropy=np.zeros(n),
                          num_decode=n, prefill_tokens=0, max_draft=16)
        got.append(np.asarray(pol.targets(view)).tolist())
    assert got[0] == got[1] and calls


def declared() -> set[str]:
    """The protocol's members: its annotated attributes and its methods."""
    methods = {k for k, v in vars(CostModel).items() if callable(v) and not k.startswith("_")}
    return set(CostModel.__annotations__) | methods


def shipped_kinds():
    from spsim.cost import load_cost_model

    roofline, constant = make_cost_model(), ConstantCostModel()
    calibrated = load_cost_model(profile_path("h200", "llama-3.1-8b"))
    return {"roofline": roofline, "calibrated": calibrated, "constant": constant,
            "recording(roofline)": RecordingCost(roofline), "recording(calibrated)": RecordingCost(calibrated)}


def test_every_shipped_model_has_every_declared_member():
    """Callers read the protocol's members plainly (no getattr fallbacks), so each model holds
    each one itself: on its class or instance, not reached through a wrapper's `__getattr__`."""
    names = declared()
    assert {"time", "times", "overlapped", "source", "info", "padding", "model", "page_size",
            "kv_capacity_pages"} <= names
    for kind, cm in shipped_kinds().items():
        missing = [n for n in sorted(names) if not (hasattr(type(cm), n) or n in vars(cm))]
        assert not missing, f"{kind} lacks {missing}"
        assert isinstance(cm, CostModel)
        for n in names:
            getattr(cm, n)  # and each one reads (a property that raises counts as missing)


def test_the_recording_wrapper_reads_its_models_members():
    cal = shipped_kinds()["calibrated"]
    rec = RecordingCost(cal)
    for n in ("name", "source", "info", "overlapped", "model", "page_size", "padding"):
        assert getattr(rec, n) is getattr(cal, n) or getattr(rec, n) == getattr(cal, n)
    assert rec.kv_capacity_pages() == cal.kv_capacity_pages()
