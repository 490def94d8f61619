"""Generators, length specs, presets and transforms."""

from __future__ import annotations

import numpy as np
import pytest

from spsim.errors import SpecError, SpsimError
from spsim.traces import (PRESETS, clip_lengths, filter_lengths, first, generate, length_dist, merge, preset,
                          read_trace, rescale_qps, sample, stats, window, write_trace)
from spsim.traces.generate import arrivals


def test_same_seed_same_trace_and_streams_are_independent():
    a = generate(n=500, qps=3, prompt="uniform:low=10,high=20", output="zipf:a=1.3,min=1,max=500", seed=5)
    b = generate(n=500, qps=3, prompt="uniform:low=10,high=20", output="zipf:a=1.3,min=1,max=500", seed=5)
    c = generate(n=500, qps=3, prompt="uniform:low=10,high=20", output="fixed:value=7", seed=5)
    for x in ("arrival_s", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(a, x), getattr(b, x))
    # changing the output distribution leaves arrivals and prompts alone
    np.testing.assert_array_equal(a.arrival_s, c.arrival_s)
    np.testing.assert_array_equal(a.prompt_tokens, c.prompt_tokens)
    assert (c.output_tokens == 7).all()
    assert not np.array_equal(a.arrival_s, generate(n=500, qps=3, seed=6).arrival_s)


@pytest.mark.parametrize("kind,cv", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 3.0)])
def test_arrival_rate_and_burstiness(kind, cv):
    t = arrivals(100_000, 20.0, kind, cv, np.random.default_rng(1))
    gaps = np.diff(t)
    assert t[0] == 0 and (gaps >= 0).all()
    assert gaps.mean() == pytest.approx(1 / 20, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_length_specs():
    rng = np.random.default_rng(0)
    x = length_dist("lognormal:median=8000,sigma=0.8").sample(rng, 50_000)
    assert np.median(x) == pytest.approx(8000, rel=0.03) and x.min() >= 1
    x = length_dist("lognormal:median=8000,sigma=2,min=100,max=9000").sample(rng, 10_000)
    assert x.min() >= 100 and x.max() <= 9000
    x = length_dist("uniform:low=5,high=7").sample(rng, 10_000)
    assert set(np.unique(x)) == {5, 6, 7}
    z = length_dist("zipf:a=2,min=1,max=1000").sample(rng, 100_000)
    # P(1) = 1 / zeta_1000(2) ~ 0.608
    assert (z == 1).mean() == pytest.approx(1 / np.sum(np.arange(1, 1001.0) ** -2), abs=0.01)
    assert length_dist("4000").sample(rng, 3).tolist() == [4000] * 3
    moon = read_trace("mooncake")
    r = generate(n=20_000, qps=1, prompt="resample:trace=mooncake", output="resample:trace=mooncake", seed=1)
    assert set(r.prompt_tokens) <= set(moon.prompt_tokens) and set(r.output_tokens) <= set(moon.output_tokens)
    assert np.median(r.prompt_tokens) == pytest.approx(np.median(moon.prompt_tokens), rel=0.05)


@pytest.mark.parametrize("spec,msg", [
    ("lognormal:median=8000", "sigma"),
    ("lognormal:median=-1,sigma=1", "median > 0"),
    ("uniform:low=9,high=2", "low <= high"),
    ("gauss:mu=3", "unknown distribution"),
    ("fixed:value=0", ">= 1"),
    ("fixed:vlue=3", "unknown parameter"),
])
def test_bad_length_specs(spec, msg):
    with pytest.raises(SpecError, match=msg):
        generate(n=3, qps=1, prompt=spec)


def test_bad_generator_arguments():
    with pytest.raises(SpsimError):
        generate(n=3, qps=0)
    with pytest.raises(SpsimError, match="poisson, gamma"):
        generate(n=3, qps=1, arrival="weibull")
    with pytest.raises(SpsimError, match="known: long-doc-qa"):
        preset("nope", 3, 1)


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_match_their_documented_parameters(name, tmp_path):
    p = PRESETS[name]
    t = preset(name, 4000, 2.0, seed=0)
    s = stats(t)
    lo = {k: int(v) for k, v in (kv.split("=") for kv in p["prompt"].split(":")[1].split(",")) if k in ("min", "max")}
    med = float(p["prompt"].split("median=")[1].split(",")[0])
    assert lo["min"] <= s["prompt_tokens"]["min"] and s["prompt_tokens"]["max"] <= lo["max"]
    assert s["prompt_tokens"]["p50"] == pytest.approx(med, rel=0.06)
    assert s["qps"] == pytest.approx(2.0, rel=0.1)
    assert t.meta["preset"] == name
    write_trace(t, tmp_path / "p.jsonl")  # generator metadata survives the canonical header
    assert read_trace(tmp_path / "p.jsonl").meta["generator"]["prompt"] == p["prompt"]


def test_rescale_window_first_sample():
    t = read_trace("azure-conv")
    r = rescale_qps(t, 20.0)
    assert stats(r)["qps"] == pytest.approx(20.0) and np.array_equal(r.prompt_tokens, t.prompt_tokens)
    w = window(t, 600, 1200)
    inside = (t.arrival_s >= 600) & (t.arrival_s < 1200)
    assert len(w) == inside.sum() and w.arrival_s[0] == 0
    assert w.arrival_s[-1] == pytest.approx(t.arrival_s[inside][-1] - t.arrival_s[inside][0])
    assert first(t, 5).ids.tolist() == t.ids[:5].tolist()
    s1, s2 = sample(t, 100, seed=3), sample(t, 100, seed=3)
    assert s1.ids.tolist() == s2.ids.tolist() and len(set(s1.ids.tolist())) == 100
    assert (np.diff(s1.arrival_s) >= 0).all()


def test_clip_and_filter_keep_prefix_blocks_consistent():
    t = read_trace("mooncake")
    c = clip_lengths(t, max_prompt=1024, max_output=64)
    assert c.prompt_tokens.max() == 1024 and c.output_tokens.max() == 64
    assert (np.diff(c.prefix_indptr) <= 2).all()  # 1024 tokens = 2 blocks of 512
    assert c.prefix_blocks(1).tolist() == t.prefix_blocks(1)[:2].tolist()
    f = filter_lengths(t, min_prompt=10_000, max_output=500)
    assert (f.prompt_tokens >= 10_000).all() and (f.output_tokens <= 500).all()
    assert f.meta["filtered_by_length"] == len(t) - len(f)
    keep = (t.prompt_tokens >= 10_000) & (t.output_tokens <= 500)
    assert f.prefix_blocks(0).tolist() == t.prefix_blocks(int(np.flatnonzero(keep)[0])).tolist()


def test_merge_overlays_on_one_clock():
    a = read_trace("mooncake")
    b = read_trace("azure-conv")
    m = merge([a, b])
    assert len(m) == len(a) + len(b) and (np.diff(m.arrival_s) >= 0).all()
    assert len(set(m.ids.tolist())) == len(m)  # line-number ids collide, so they get prefixes
    # azure rows carry no prefix blocks; mooncake's keep theirs
    from_b = np.char.startswith(m.ids.astype(str), "1:")
    assert (np.diff(m.prefix_indptr)[from_b] == 0).all()
    assert np.diff(m.prefix_indptr)[~from_b].sum() == len(a.prefix_ids)
    # merging a trace with itself must not make its prefix blocks look shared
    mm = merge([a, a])
    assert len(np.unique(mm.prefix_ids)) == 2 * len(np.unique(a.prefix_ids))
    with pytest.raises(SpsimError):
        rescale_qps(first(a, 1), 5)


def test_cv_needs_gamma_arrivals():
    """--cv without gamma arrivals used to be ignored silently; Poisson gaps always have CV 1."""
    from typer.testing import CliRunner

    from spsim.cli import app

    def gen(*args):
        return CliRunner().invoke(app, ["trace", "gen", "-", "-n", "3", *args])

    for args in (["--cv", "2"], ["--arrival", "poisson", "--cv", "2"], ["--preset", "long-doc-qa", "--cv", "2"],
                 ["--cv", "1"]):
        r = gen(*args)
        assert isinstance(r.exception, SpecError) and "--arrival gamma" in str(r.exception), (args, r.output)
    for args in (["--arrival", "gamma", "--cv", "2"], ["--preset", "agentic", "--cv", "3"],
                 ["--preset", "agentic", "--arrival", "poisson"]):
        r = gen(*args)
        assert r.exit_code == 0, (args, r.output)
    with pytest.raises(SpecError, match="gamma"):
        generate(n=3, qps=1, arrival="poisson", cv=2.0)
