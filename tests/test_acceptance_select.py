"""`spsim acceptance fit` selects among a constant rate, per-position rates and the latent model on
held-out accepted lengths, falls back when the latent fit ends at a bound, writes the selected model
(replayed exactly by `file:path=`), and a bootstrap interval that `spsim replay` reports (issue 40)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from spsim.errors import SpecError
from spsim.events import read_events, write_events
from spsim.acceptance import make_acceptance
from spsim.acceptance import bootstrap as B
from spsim.cli.acceptance import app
from spsim.acceptance.curves import sample_events
from spsim.acceptance.rates import RateAcceptance, fit_rates
from spsim.acceptance.select import candidates, expected_rates, predict_runs, run_table, select

runner = CliRunner()


def _events(tmp_path, spec, n, k=4, name="ev.jsonl", seed=0, text=None):
    ev = sample_events(make_acceptance(spec, seed), k, n, 40, 2000, 128, 1)
    p = tmp_path / name
    write_events(p, ev, {"source": spec})
    if text:  # label every event with a text, as a benchmark over texts would
        lines = p.read_text().splitlines()
        p.write_text("\n".join([lines[0]] + [json.dumps({**json.loads(x), "text": text(json.loads(x))})
                                             for x in lines[1:]]) + "\n")
    return p


def _fit(tmp_path, events, *extra):
    out = tmp_path / (events.stem + "_fit.json")
    r = runner.invoke(app, ["fit", str(events), "-o", str(out), "--bootstrap", "100", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text()), r.output


def test_constant_data_select_a_rate_model_replayed_exactly(tmp_path):
    d, text = _fit(tmp_path, _events(tmp_path, "fixed:p=0.7", 80))
    sel = d["fit"]["selection"]
    assert d["acceptance_model"] == sel["chosen"] in ("constant", "position")
    assert "selected model: " in text and sel["chosen"] in text
    assert set(sel["candidates"]) == {"constant", "position", "latent"}
    assert abs(d["rates"]["rates"][0]["p"][0] - 0.7) < 0.04
    path = tmp_path / "ev_fit.json"
    m = make_acceptance(f"file:path={path}", 3)
    assert isinstance(m, RateAcceptance)
    ref = RateAcceptance(d["rates"], auc=d["params"]["auc"], entropy_median=d["params"]["entropy_median"],
                         entropy_sigma=d["params"]["entropy_sigma"], seed=3)
    args = (np.arange(50) % 7, np.arange(50), np.full(50, 6), np.full(50, 2000), np.full(50, 128), np.ones(50, int))
    assert (m.verify(*args) == ref.verify(*args)).all()  # exactly the selected table
    with pytest.raises(SpecError, match="takes no parameter 'mu'"):
        make_acceptance(f"file:path={path},mu=2", 0)


def test_latent_is_kept_when_it_predicts_and_replayed_as_latent(tmp_path):
    # strong per-request levels and staleness: the rates mispredict held-out requests' lengths
    spec = "latent:mu=2.5,sigma_req=0.3,sigma_span=0.3,rho=0.5,stale=0.6"
    d, _ = _fit(tmp_path, _events(tmp_path, spec, 160, k=6))
    sel = d["fit"]["selection"]
    errs = {k: v["relative_error"] for k, v in sel["candidates"].items()}
    assert sel["chosen"] != "constant" and errs["constant"] > min(errs.values())
    if sel["chosen"] == "latent":
        m = make_acceptance(f"file:path={tmp_path / 'ev_fit.json'}", 0)
        assert type(m).__name__ == "LatentAcceptance" and m.params.stale == d["params"]["stale"]


def test_a_latent_fit_at_its_bounds_falls_back(tmp_path):
    ev = read_events(_events(tmp_path, "fixed:p=0.8", 60))
    test = ev.request >= 45
    tr, te = ev.take(~test), ev.take(test)
    from spsim.acceptance.presets import preset_params

    cands = candidates(tr, preset_params("sparsespec-llama8b"))
    cands["latent"]["report"].update(converged=False, at_bounds=["sigma_req"])
    sel = select(cands, tr, te)
    assert sel["chosen"] != "latent" and "at parameter bounds (sigma_req)" in sel["reason"]
    assert "latent" in sel["excluded"]


def test_expected_rates_match_draws():
    t = {"kind": "position", "rates": [{"method": "verify-quest", "budget": 128, "p": [0.9, 0.7, 0.6]}],
         "overall": 0.7}
    runs = {"window": np.repeat(np.arange(40), 10), "start": np.tile(np.arange(10) * 5, 40),
            "drafted": np.full(400, 4), "context": np.full(400, 1000), "budget": np.full(400, 128),
            "method": np.ones(400, int)}
    exact = expected_rates(t, runs)
    assert np.allclose(exact, 0.9 + 0.9 * 0.7 + 0.9 * 0.7 * 0.6 + 0.9 * 0.7 * 0.6 * 0.6)
    sampled = predict_runs(lambda s: RateAcceptance(t, seed=s), runs, seeds=16).mean()
    assert abs(sampled - exact[0]) < 0.05


def test_bootstrap_interval_covers_the_truth_and_narrows_with_requests(tmp_path):
    truth = 0.75 + 0.75 ** 2 + 0.75 ** 3 + 0.75 ** 4
    hw, covered = {40: [], 160: []}, 0
    for n, seed in [(40, s) for s in range(16)] + [(160, s) for s in range(4)]:
        ev = read_events(_events(tmp_path, "fixed:p=0.75", n, name=f"e{n}_{seed}.jsonl", seed=seed))
        p = fit_rates(ev, "constant")["rates"][0]["p"][0]
        block = B.interval(ev, None, lambda m, b, c, ks: np.cumsum(np.cumprod(np.full(max(ks), p)))[[k - 1 for k in ks]],
                           replicates=200, kind="constant")
        c = block["cells"][0]
        covered += n == 40 and c["lo"][3] <= truth <= c["hi"][3]
        hw[n].append(c["half_width_rel"][3])
        assert c["requests_for"]["10%"] < c["requests_for"]["5%"] < c["requests_for"]["2%"]
    assert covered >= 13  # of 16 (95 % nominal; at most 3 misses has probability ~0.99)
    assert 0.35 < np.mean(hw[160]) / np.mean(hw[40]) < 0.7  # about 1 / sqrt(4)
    again = B.interval(ev, None, lambda m, b, c, ks: np.ones(len(ks)), replicates=50)
    assert again == B.interval(ev, None, lambda m, b, c, ks: np.ones(len(ks)), replicates=50)  # same seed


def test_labelled_groups_give_a_new_group_interval_and_replay_reports_the_spread(tmp_path):
    ev = _events(tmp_path, "fixed:p=0.75", 60, text=lambda e: f"t{e['request'] % 4}")
    d, text = _fit(tmp_path, ev, "--holdout-by", "text")
    c = d["interval"]["cells"][0]
    assert d["interval"]["by"] == "label" and d["interval"]["groups"] == 4
    assert c["new_group"]["half_width_rel"][3] > c["half_width_rel"][3]
    text = " ".join(text.split())  # rich wraps lines at the terminal width
    assert "a new group:" in text and "requests to record" in text
    tr = tmp_path / "t.jsonl"
    tr.write_text(json.dumps({"spsim_trace": 1}) + "\n" + "".join(
        json.dumps({"id": f"q{i}", "arrival_s": 0.0, "prompt_tokens": 2000, "output_tokens": 40}) + "\n"
        for i in range(6)))
    p = subprocess.run([sys.executable, "-m", "spsim.cli", "replay", str(tr), "--model", "smollm2-135m", "--offline",
                        "--policy", "fixed-k:k=4", "--draft-kv", "verify-quest", "--draft-budget", "128", "--json",
                        "--acceptance", f"file:path={tmp_path / 'ev_fit.json'}"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)["acceptance_spread"]
    assert s["lo"] < s["mean_accepted_per_verify"] < s["hi"]
    assert s["half_width_rel"] >= s["preset_half_width_rel"] > 0 and s["preset_interval_for"] == "a new group"


def test_a_rate_preset_without_its_table_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"params": {}, "acceptance_model": "position"}))
    tr = tmp_path / "t.jsonl"
    tr.write_text(json.dumps({"spsim_trace": 1}) + "\n" + json.dumps(
        {"id": "q", "arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10}) + "\n")
    p = subprocess.run([sys.executable, "-m", "spsim.cli", "replay", str(tr), "--model", "tiny",
                        "--acceptance", f"file:path={bad}"], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"{bad}: rates: missing or malformed" in p.stderr and len(p.stderr.strip().splitlines()) == 1
