"""Acceptance models: exactness of fixed p, call-order independence, presets' curves, entropy AUC,
maximum-likelihood recovery, spec errors, and the entropy rule."""

import json

import numpy as np
import pytest

from spsim.errors import SpecError
from spsim.policies import entropy_rule as er
from spsim.acceptance import (DEFAULT_ACCEPTANCE, AcceptanceModel, LatentParams, list_presets,
                                        load_preset, make_acceptance)
from spsim.acceptance import fit as F
from spsim.acceptance import entropy as ent
from spsim.acceptance import keyed
from spsim.acceptance.curves import fixed_k_runs
from spsim.acceptance.entropy import empirical_auc
from spsim.events import FIELDS, Events, read_events, write_events
from spsim.acceptance.curves import sample_events


def _args(n, ctx=32768, bud=3277, method=1):
    return np.full(n, ctx), np.full(n, bud), np.full(n, method)


@pytest.mark.parametrize("spec", ["fixed:p=1", "fixed:p=0", "position:p0=1,decay=0", DEFAULT_ACCEPTANCE])
def test_protocol(spec):
    assert isinstance(make_acceptance(spec, 0), AcceptanceModel)


def test_fixed_p_exact():
    rid = np.arange(50)
    drafted = np.arange(50) % 17
    c, b, m = _args(50)
    assert (make_acceptance("fixed:p=1", 3).verify(rid, rid * 7, drafted, c, b, m) == drafted).all()
    assert (make_acceptance("fixed:p=0", 3).verify(rid, rid * 7, drafted, c, b, m) == 0).all()
    p = make_acceptance("fixed:p=0.7", 3)
    a = p.verify(np.arange(5000), np.zeros(5000, int), np.ones(5000, int), *_args(5000))
    assert abs(a.mean() - 0.7) < 0.025  # 4 sd


@pytest.mark.parametrize("spec", ["fixed:p=0.8", "position:p0=0.95,decay=0.05", DEFAULT_ACCEPTANCE])
def test_call_order_independent(spec):
    rng = np.random.default_rng(0)
    rid = rng.permutation(40)
    pos = rng.integers(0, 100, 40)
    d = rng.integers(0, 12, 40)
    c, b, m = _args(40)
    m1, m2 = make_acceptance(spec, 11), make_acceptance(spec, 11)
    for r in rid:
        m1.begin(int(r), 1000, 200)
    a1 = m1.verify(rid, pos, d, c, b, m)
    e1 = m1.draft_entropy(rid, pos, d, c, b, m)
    for r in rid[::-1]:  # other admission order, calls split and reversed, unrelated calls between
        m2.begin(int(r), 1000, 200)
    m2.verify(np.arange(100, 110), np.zeros(10, int), np.full(10, 5), *_args(10))
    e2 = np.concatenate([m2.draft_entropy(rid[i:i + 1], pos[i:i + 1], d[i:i + 1], c[:1], b[:1], m[:1]) for i in range(40)])
    a2 = np.concatenate([m2.verify(rid[i:i + 1], pos[i:i + 1], d[i:i + 1], c[:1], b[:1], m[:1]) for i in range(40)][::-1])[::-1]
    assert (a1 == a2).all() and np.allclose(e1, e2)
    assert not (a1 == make_acceptance(spec, 12).verify(rid, pos, d, c, b, m)).all() or spec.startswith("fixed:p=1")


def _rate_model(seed):
    from spsim.acceptance.rates import RateAcceptance

    return RateAcceptance({"rates": [{"method": "static", "budget": 512, "p": [0.9, 0.6, 0.5]},
                                     {"method": "verify-quest", "budget": 2048, "p": [0.8, 0.7]}], "overall": 0.7},
                          seed=seed)


@pytest.mark.parametrize("spec", ["position:p0=0.95,decay=0.05", DEFAULT_ACCEPTANCE, "aspire-llama8b", "rates"])
@pytest.mark.parametrize("budget,method", [(2048, 1), (512, 0)])
def test_run_wide_budget_and_method_as_one_value(spec, budget, method):
    """A run's budget and method passed once give the same floats as one per request."""
    rng = np.random.default_rng(1)
    n = 30
    rid, pos, d, c = np.arange(n), rng.integers(0, 50, n), rng.integers(0, 9, n), rng.integers(100, 90000, n)
    b, m = np.full(n, budget), np.full(n, method)
    one, each = ((_rate_model(5), _rate_model(5)) if spec == "rates"
                 else (make_acceptance(spec, 5), make_acceptance(spec, 5)))
    assert (one.verify(rid, pos, d, c, budget, method) == each.verify(rid, pos, d, c, b, m)).all()
    assert (one.draft_entropy(rid, pos, d, c, budget, method) == each.draft_entropy(rid, pos, d, c, b, m)).all()
    if hasattr(one, "draft_entropy_rows"):
        starts, ctx = np.array([0, 3, 7]), np.array([5000, 5003, 5007])
        assert (one.draft_entropy_rows(2, starts, ctx, 6, budget, method)
                == each.draft_entropy_rows(2, starts, ctx, 6, b[:3], m[:3])).all()


def test_entropy_consistent_with_verify():
    """A token is accepted at verify iff its entropy came from the accepted branch (same draw)."""
    m = make_acceptance("latent:auc=0.9999,entropy_sigma=0.2,entropy_median=1.0", 4)
    n = 3000
    rid, pos = np.arange(n), np.zeros(n, int)
    a = m.verify(rid, pos, np.ones(n, int), *_args(n))
    e = m.draft_entropy(rid, pos, np.zeros(n, int), *_args(n))
    thr = np.exp(ent.shift_for_auc(0.9999, 0.2) / 2)  # halfway between the two branches' medians
    assert ((e > thr) == (a == 0)).mean() > 0.99


@pytest.mark.parametrize("auc", [0.55, 0.638, 0.8])
def test_entropy_auc_matches_parameter(auc):
    m = make_acceptance(f"{DEFAULT_ACCEPTANCE}:auc={auc}", 2)
    ev = sample_events(m, 8, 300, 64)
    e = Events(**ev, names=[], meta={})
    inf = e.informative()
    assert abs(empirical_auc(e.entropy[inf], e.accepted[inf]) - auc) < 0.025


@pytest.mark.parametrize("name", list_presets())
def test_preset_stated_curve(name):
    """Sampling with another seed reproduces the curve each preset states at its reference."""
    pre = load_preset(name)
    st, ref = pre["stated"], pre["reference"]
    assert st["k"], f"{name} states no curve"
    from spsim.plan import DraftMethod
    for k, want in zip(st["k"], st["acceptance_fraction"]):
        r = fixed_k_runs(make_acceptance(name, 99), k, 400, ref["output_tokens"], ref["context"], ref["budget"],
                         int(DraftMethod.parse(ref["method"])))
        assert abs(r["acceptance_fraction"] - want) < 0.035, (name, k)


def test_default_is_preset_and_overrides():
    assert DEFAULT_ACCEPTANCE in list_presets()
    m = make_acceptance(f"{DEFAULT_ACCEPTANCE}:temperature=1.0", 0)
    assert m.params.temperature == 1.0
    with pytest.raises(SpecError, match="known"):
        make_acceptance("nope", 0)
    with pytest.raises(SpecError, match="unknown parameter"):
        make_acceptance(f"{DEFAULT_ACCEPTANCE}:bogus=1", 0)
    with pytest.raises(SpecError):
        make_acceptance("fixed:p=1.5", 0)


def test_method_effects():
    """Step refresh beats verify refresh at long drafts; static decays with context."""
    m = make_acceptance(DEFAULT_ACCEPTANCE, 0)
    vr = fixed_k_runs(m, 20, 300, 64, method=1)["acceptance_fraction"]
    sr = fixed_k_runs(m, 20, 300, 64, method=2)["acceptance_fraction"]
    assert sr > vr + 0.03
    lo = fixed_k_runs(m, 1, 300, 64, context=4096, budget=512, method=0)["draft_acceptance_rate"]
    hi = fixed_k_runs(m, 1, 300, 64, context=100000, budget=512, method=0)["draft_acceptance_rate"]
    assert lo > hi


def test_keyed_independent_of_shape():
    u = keyed.uniform(5, keyed.ACCEPT, np.arange(10)[:, None], np.arange(30))
    assert u[3, 7] == keyed.uniform(5, keyed.ACCEPT, 3, 7)[0]
    assert 0.45 < u.mean() < 0.55


@pytest.mark.slow
def test_fit_recovers_parameters(tmp_path):
    true = LatentParams(mu=3.0, stale=0.1, sigma_req=0.7, sigma_span=1.2, rho=0.9, auc=0.7)
    from spsim.acceptance import LatentAcceptance
    m = LatentAcceptance(true, seed=5)
    cols = [sample_events(m, k, 120, 96, rid0=r0) for k, r0 in ((4, 0), (12, 1000))]
    ev = {f: np.concatenate([c[f] for c in cols]) for f in FIELDS}
    path = tmp_path / "ev.jsonl"
    write_events(path, ev)
    e = read_events(path)
    p, rep = F.fit(e, LatentParams(mu=2.0, stale=0.05, sigma_req=0.4, sigma_span=0.8, rho=0.8))
    assert rep["free"] == ["mu", "sigma_req", "sigma_span", "rho", "stale"]
    assert abs(p.mu - 3.0) < 0.4 and abs(p.stale - 0.1) < 0.03 and abs(p.rho - 0.9) < 0.06
    assert abs(p.sigma_span - 1.2) < 0.4 and abs(p.sigma_req - 0.7) < 0.35 and abs(p.auc - 0.7) < 0.03
    assert rep["loglik"] >= F.loglik(true, F._Data(e)) - 1.0  # the MLE is at least as likely as the truth


def test_events_reader_errors(tmp_path):
    from spsim.errors import InputError
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"request": 1, "out_pos": 3, "draft_pos": 0, "accepted": "yes", "entropy": 0.1,
                             "method": "static", "budget": 512, "context": 100}) + "\n")
    with pytest.raises(InputError, match="bad.jsonl:1: accepted"):
        read_events(p)


def test_entropy_rule():
    slope, thr = er.rule_from_auc(0.64, 1.0, 0.6)
    p = er.token_acceptance(np.array([0.05, 0.6, 5.0]), 0.9, slope, thr)
    assert p[0] > p[1] > p[2]
    # no drafts yet, cheap drafts, high prior: draft; after many unlikely drafts: verify
    ph = np.ones((2, 8))
    ph[1, :6] = 0.3
    more = er.draft_more(ph, np.array([0, 6]), np.array([0.95, 0.95]), 0.2, np.full(9, 1.5), 8)
    assert more.tolist() == [True, False]
    assert not er.draft_more(np.ones((1, 8)), np.array([8]), np.array([0.99]), 0.01, np.full(9, 1.0), 8)[0]
    k = er.plan_length(np.array([0.5, 0.9, 0.99]), 0.2, np.full(21, 1.5), 20)
    assert k[0] < k[1] < k[2]


@pytest.mark.parametrize("spec", ["position:p0=0.9,decay=0.1", DEFAULT_ACCEPTANCE, "aspire-llama8b"])
def test_prefix_consistent_and_bounded(spec):
    """Verifying d drafts accepts min(accepted with D >= d drafts, d): same draws, same staleness."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    m = make_acceptance(spec, 8)

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 300), st.integers(0, 24), st.integers(0, 2),
                              st.integers(1, 200000), st.integers(1, 9000)), min_size=1, max_size=10),
           st.integers(0, 24))
    def check(rows, extra):
        rid, pos, d, meth, ctx, bud = (np.array(c) for c in zip(*rows))
        a = m.verify(rid, pos, d, ctx, bud, meth)
        assert ((a >= 0) & (a <= d)).all()
        big = m.verify(rid, pos, d + extra, ctx, bud, meth)
        assert (a == np.minimum(big, d)).all()

    check()


def test_empty_inputs():
    m = make_acceptance(DEFAULT_ACCEPTANCE, 0)
    e = np.zeros(0, np.int64)
    assert len(m.verify(e, e, e, e, e, e)) == 0 and len(m.draft_entropy(e, e, e, e, e, e)) == 0


def test_common_random_numbers_across_methods():
    """Same draws for every method: per-step refresh (less staleness) never accepts fewer drafts
    than verify-time refresh for the same request, positions, context and budget."""
    m = make_acceptance(DEFAULT_ACCEPTANCE, 3)
    n = 500
    rid, pos, d = np.arange(n), np.arange(n) % 50, np.full(n, 16)
    c, b, _ = _args(n)
    vr = m.verify(rid, pos, d, c, b, np.full(n, 1))
    sr = m.verify(rid, pos, d, c, b, np.full(n, 2))
    assert (sr >= vr).all() and (sr > vr).any()


def test_ar1_is_lfilter_bit_for_bit():
    # the span process's AR(1) recursion on Python floats gives scipy.signal.lfilter's bits (it
    # replaced lfilter to spare every run the import); 1-D and 2-D, short and long, any rho
    from scipy.signal import lfilter

    from spsim.acceptance.latent import ar1

    rng = np.random.default_rng(7)
    for shape in [(1,), (2,), (37,), (5000,), (3, 400)]:
        for rho in [0.0, 0.3, 0.9, 0.97, 0.999]:
            eps = rng.standard_normal(shape)
            e = eps * np.sqrt(1.0 - rho * rho)
            e[..., 0] = eps[..., 0]
            want = lfilter([1.0], [1.0, -rho], e, axis=-1)
            got = ar1(eps.copy(), rho)
            assert got.shape == want.shape and np.array_equal(got.view(np.int64), want.view(np.int64))
