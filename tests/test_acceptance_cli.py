"""`spsim acceptance` commands: show (table and --json), sample -> fit -> file: spec round trip, errors."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from spsim.errors import InputError
from spsim.acceptance import make_acceptance
from spsim.cli.acceptance import app

runner = CliRunner()


def test_show_json_fixed():
    r = runner.invoke(app, ["show", "fixed:p=0.9", "--k-max", "4", "--requests", "200", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["position"]["j"] == [0, 1, 2, 3]
    assert all(abs(c - 0.9) < 0.05 for c in d["position"]["conditional"])
    assert d["by_k"]["k"] == [1, 2, 4] and d["entropy_auc"] == 0.64


def test_show_table_preset():
    r = runner.invoke(app, ["show", "sparsespec-llama8b", "--k-max", "4", "--requests", "100"])
    assert r.exit_code == 0, r.output
    assert "E[accepted/k]" in r.output and "entropy AUC" in r.output


def test_show_says_which_runs_each_table_comes_from():
    """The position table (P(draft 0 accepted) = 0.914) comes from runs of --k-max drafts, the k = 1
    row (E[accepted] = 0.97) from runs of one: they looked contradictory (issue 39, item 8)."""
    r = runner.invoke(app, ["show", "sparsespec-llama8b", "--k-max", "6", "--requests", "50"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "by draft position in runs of k = 6 drafts" in text
    assert "each row from runs of its own k" in text and "its position 0 is not this table's k = 1" in text
    r = runner.invoke(app, ["show", "fixed:p=0.9", "--k-max", "3", "--requests", "20", "--json"])
    assert json.loads(r.output)["position"]["k"] == 3


def test_sample_fit_roundtrip(tmp_path):
    ev, out = tmp_path / "ev.jsonl", tmp_path / "fitted.json"
    r = runner.invoke(app, ["sample", "sparsespec-llama8b:stale=0.2", "-o", str(ev), "--k", "6", "--requests", "60",
                            "--output-tokens", "64"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["fit", str(ev), "-o", str(out), "--model", "latent", "--bootstrap", "50"])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["acceptance_model"] == "latent" and "chosen by --model" in d["fit"]["selection"]["reason"]
    assert abs(d["params"]["stale"] - 0.2) < 0.08
    assert d["fit"]["heldout"]["groups"][0]["accepted_length"][0]["k"] == 6  # per method and budget
    m = make_acceptance(f"file:path={out},temperature=0.5", 1)
    assert m.params.temperature == 0.5 and m.params.stale == d["params"]["stale"]
    a = m.verify(np.arange(4), np.zeros(4, int), np.full(4, 3), np.full(4, 1000), np.full(4, 100), np.ones(4, int))
    assert ((a >= 0) & (a <= 3)).all()


def test_fit_prints_a_summary_and_the_report_with_json(tmp_path):
    """The report (120 lines of JSON) is in the preset; the terminal gets the summary, --json the report."""
    ev, out = tmp_path / "ev.jsonl", tmp_path / "fitted.json"
    assert runner.invoke(app, ["sample", "fixed:p=0.8", "-o", str(ev), "--requests", "40"]).exit_code == 0
    r = runner.invoke(app, ["fit", str(ev), "-o", str(out), "--bootstrap", "20"])
    assert r.exit_code == 0, r.output
    assert "selected model:" in r.output and '"train"' not in r.output and len(r.output.splitlines()) < 20
    r = runner.invoke(app, ["fit", str(ev), "-o", str(out), "--bootstrap", "20", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(out.read_text())["fit"]


def test_file_spec_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        make_acceptance(f"file:path={tmp_path / 'missing.json'}")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(InputError, match="params"):
        make_acceptance(f"file:path={tmp_path / 'x.json'}")
