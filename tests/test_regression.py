"""Simulator results against the committed regression fixture (see tests/regression_cases.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from regression_cases import case_name, cases, run_case

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "regression.json").read_text())


def test_fixture_covers_every_case():
    assert sorted(FIXTURE) == sorted(case_name(c) for c in cases())


@pytest.mark.parametrize("case", cases(), ids=case_name)
def test_results_unchanged(case):
    got = run_case(case)
    want = FIXTURE[case_name(case)]
    # every recorded figure unchanged; keys added to the summary later are not a change of results
    assert {k: got["summary"].get(k) for k in want["summary"]} == want["summary"]
    assert got["requests_sha256"] == want["requests_sha256"]
