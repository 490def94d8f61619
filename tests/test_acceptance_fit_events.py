"""`spsim acceptance fit` on recorded events as a new user brings them: request ids reused across
runs (kept apart as windows, or rejected naming the line), censored runs written or left out,
group hold-out, honest reports (bounds, baselines, every method and budget), k-fold spread."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from spsim.errors import InputError, SpsimError
from spsim.events import FIELDS, read_events, write_events
from spsim.acceptance import LatentAcceptance, LatentParams, make_acceptance
from spsim.acceptance import fit as F
from spsim.cli.acceptance import app
from spsim.acceptance.curves import sample_events

runner = CliRunner()


def _rows(ev: dict) -> list[dict]:
    names = ["static", "verify-quest", "step-layer", "verify-attn", "step-quest"]
    return [{"request": int(ev["request"][i]), "out_pos": int(ev["out_pos"][i]), "draft_pos": int(ev["draft_pos"][i]),
             "accepted": bool(ev["accepted"][i]), "entropy": float(ev["entropy"][i]),
             "method": names[int(ev["method"][i])], "budget": int(ev["budget"][i]), "context": int(ev["context"][i])}
            for i in range(len(ev["out_pos"]))]


def _write(path, rows):
    path.write_text(json.dumps({"spsim_accept_events": 1}) + "\n" + "".join(json.dumps(r) + "\n" for r in rows))
    return path


def _unpad(rows):
    """Drop every token after its run's first rejection (what a recorder that stops there writes)."""
    out, dead = [], set()
    for r in rows:
        run = (r["request"], r["out_pos"] - r["draft_pos"])
        if run in dead:
            continue
        out.append(r)
        if not r["accepted"]:
            dead.add(run)
    return out


@pytest.fixture(scope="module")
def sampled():
    m = make_acceptance("sparsespec-llama8b:stale=0.2", 3)
    return _rows(sample_events(m, 6, 40, 48))


def test_reused_ids_give_exactly_the_unique_ids_fit(tmp_path, sampled):
    """Two experiments concatenated: ids 0..39 twice, against the same file with ids made unique."""
    uniq = _write(tmp_path / "u.jsonl", sampled + [{**r, "request": r["request"] + 1000} for r in sampled])
    coll = _write(tmp_path / "c.jsonl", sampled + sampled)
    got = {}
    for name, path in (("u", uniq), ("c", coll)):
        r = runner.invoke(app, ["fit", str(path), "-o", str(tmp_path / f"{name}.json"), "--holdout", "0"])
        assert r.exit_code == 0, r.output
        got[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert got["u"]["params"] == got["c"]["params"]
    assert got["u"]["fit"]["train"] == got["c"]["fit"]["train"]
    d = got["c"]["fit"]["data"]
    assert (d["events"], d["windows"], d["request_ids"], d["reused_request_ids"]) == (2 * len(sampled), 80, 40, 40)
    assert got["c"]["fit"]["train"]["tokens"] == d["informative_tokens"]  # nothing dropped


def test_interleaved_reuse_is_one_line_exit_2(tmp_path, sampled):
    inter = _write(tmp_path / "i.jsonl", [r for pair in zip(sampled, sampled) for r in pair])
    with pytest.raises(InputError, match=r"i.jsonl:\d+: request: a second event for request 0"):
        read_events(inter)
    p = subprocess.run([sys.executable, "-m", "spsim.cli", "acceptance", "fit", str(inter), "-o",
                        str(tmp_path / "x.json"), "--holdout", "0"], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "own request id" in p.stderr


def test_overlapping_runs_rejected(tmp_path):
    base = {"request": "doc", "entropy": 0.1, "method": "static", "budget": 64, "context": 1000}
    rows = [{**base, "out_pos": 0, "draft_pos": 0, "accepted": True},
            {**base, "out_pos": 1, "draft_pos": 1, "accepted": True},
            {**base, "out_pos": 1, "draft_pos": 0, "accepted": True}]  # starts inside the first run's commit
    with pytest.raises(InputError, match=r":4: out_pos: request 'doc': a run starts at out_pos 1"):
        read_events(_write(tmp_path / "o.jsonl", rows))


def test_unpadded_events_fit_the_same_and_refuse_the_length_check(tmp_path, sampled):
    padded, unpadded = tmp_path / "p.jsonl", tmp_path / "n.jsonl"
    _write(padded, sampled)
    _write(unpadded, _unpad(sampled))
    a, b = read_events(padded), read_events(unpadded)
    assert (a.padding(), b.padding()) == ("padded", "unpadded")
    pa, ra = F.fit(a)
    pb, rb = F.fit(b)
    assert pa == pb and ra == rb  # censoring is the fit's business
    r = runner.invoke(app, ["fit", str(unpadded), "-o", str(tmp_path / "n.json")])
    assert r.exit_code == 0, r.output
    g = json.loads((tmp_path / "n.json").read_text())["fit"]["heldout"]["groups"][0]
    assert g["accepted_length"] is None and "drafted" in g["accepted_length_note"]
    # with the run's length recorded, the check is back
    lens = {}
    for row in sampled:
        key = (row["request"], row["out_pos"] - row["draft_pos"])
        lens[key] = max(lens.get(key, 0), row["draft_pos"] + 1)
    rec = [{**row, "drafted": lens[(row["request"], row["out_pos"] - row["draft_pos"])]} for row in _unpad(sampled)]
    r = runner.invoke(app, ["fit", str(_write(tmp_path / "d.jsonl", rec)), "-o", str(tmp_path / "d.json")])
    assert r.exit_code == 0, r.output
    g = json.loads((tmp_path / "d.json").read_text())["fit"]["heldout"]["groups"][0]
    assert g["accepted_length"][0]["k"] == 6


def test_holdout_by_field_covers_every_method_and_budget(tmp_path):
    m = make_acceptance("sparsespec-llama8b", 4)
    a = _rows(sample_events(m, 4, 30, 40, context=8000, budget=800, method=1))
    b = _rows(sample_events(m, 4, 30, 40, context=8000, budget=512, method=0, rid0=100))
    rows = [{**r, "text": f"t{r['request'] % 3}"} for r in a + b]
    path = _write(tmp_path / "g.jsonl", rows)
    r = runner.invoke(app, ["fit", str(path), "-o", str(tmp_path / "g.json"), "--holdout-by", "text=t1"])
    assert r.exit_code == 0, r.output
    h = json.loads((tmp_path / "g.json").read_text())["fit"]["heldout"]
    assert h["by"] == "text" and h["value"] == "t1"
    assert {(g["method"], g["budget"]) for g in h["groups"]} == {("verify-quest", 800), ("static", 512)}
    for g in h["groups"]:
        assert g["tokens"] > 0 and {"loglik_per_token_constant_baseline", "loglik_per_token_position_baseline",
                                    "loglik_per_token_fitted"} <= set(g)
    r = runner.invoke(app, ["fit", str(path), "-o", str(tmp_path / "x.json"), "--holdout-by", "dataset"])
    assert isinstance(r.exception, SpsimError) and "no event has a field 'dataset'" in str(r.exception)
    r = runner.invoke(app, ["fit", str(path), "-o", str(tmp_path / "x.json"), "--holdout-by", "text=t9"])
    assert isinstance(r.exception, SpsimError) and "no event has text = 't9'" in str(r.exception)
    r = runner.invoke(app, ["fit", str(path), "-o", str(tmp_path / "k.json"), "--holdout-by", "text", "--folds", "3"])
    assert r.exit_code == 0, r.output
    k = json.loads((tmp_path / "k.json").read_text())["fit"]["kfold"]
    assert k["by"] == "text" and k["folds"] == 3 and all(f["groups"] == 1 for f in k["per_fold"])
    assert set(k["parameter_spread"]) >= {"mu", "static_offset"} and k["parameter_spread"]["mu"]["sd"] >= 0


def test_fit_at_bounds_is_not_converged():
    ev = sample_events(make_acceptance("fixed:p=1", 0), 4, 20, 24)
    from spsim.events import Events

    p, rep = F.fit(Events(**ev, names=[], meta={}))
    assert rep["at_bounds"] and rep["converged"] is False and "at bounds" in rep["status"]


@pytest.mark.slow
def test_fit_recovers_known_parameters_with_censored_windows(tmp_path):
    """Events of a simulated fixed-k run (k = 4 and 12; windows cut short by rejections and by the
    request's end) recover the parameters that made them, padded or not. Tolerances: mu 0.4,
    stale 0.03, rho 0.06, sigma_span 0.4, sigma_req 0.35, AUC 0.03 (240 requests x 96 tokens)."""
    true = LatentParams(mu=3.0, stale=0.1, sigma_req=0.7, sigma_span=1.2, rho=0.9, auc=0.7)
    m = LatentAcceptance(true, seed=5)
    cols = [sample_events(m, k, 120, 96, rid0=r0) for k, r0 in ((4, 0), (12, 1000))]
    ev = {f: np.concatenate([c[f] for c in cols]) for f in FIELDS}
    rows = _rows(ev)
    start = LatentParams(mu=2.0, stale=0.05, sigma_req=0.4, sigma_span=0.8, rho=0.8)
    fits = [F.fit(read_events(_write(tmp_path / f"{n}.jsonl", r)), start) for n, r in (("p", rows), ("u", _unpad(rows)))]
    assert fits[0] == fits[1]
    p, rep = fits[0]
    assert rep["converged"] and rep["free"] == ["mu", "sigma_req", "sigma_span", "rho", "stale"]
    assert abs(p.mu - 3.0) < 0.4 and abs(p.stale - 0.1) < 0.03 and abs(p.rho - 0.9) < 0.06
    assert abs(p.sigma_span - 1.2) < 0.4 and abs(p.sigma_req - 0.7) < 0.35 and abs(p.auc - 0.7) < 0.03


def test_methods_told_apart():
    """verify-attn and step-quest have their own terms; the fitter frees them when the events hold
    both members of a pair."""
    p = LatentParams(verify_attn_offset=-1.0, step_quest_offset=0.5, step_quest_residual=0.6)
    off, _, st, _, _ = p.method_terms()
    assert off[3] == off[1] - 1.0 and off[4] == off[2] + 0.5 and st[4] == p.stale * 0.6 != st[2]
    m = LatentAcceptance(p, seed=0)
    cols = [sample_events(m, 6, 20, 30, method=meth, rid0=100 * meth) for meth in (1, 2, 3, 4)]
    ev = {f: np.concatenate([c[f] for c in cols]) for f in FIELDS}
    from spsim.events import Events

    names = F.free_params(Events(**ev, names=[], meta={}))
    assert {"verify_attn_offset", "step_quest_offset", "step_quest_residual", "step_residual"} <= set(names)
