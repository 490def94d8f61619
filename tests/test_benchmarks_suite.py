"""benchmarks/ is a suite: every script is listed in its README, results/ holds current results only
(few files, none named after a run, no copy of a shipped profile), tests read fixtures rather than
results, every result's metadata comes from one harness; and the README and docs describe the
system, not the days it was built on."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"


def test_every_benchmark_is_in_the_readme():
    readme = (BENCH / "README.md").read_text()
    scripts = sorted(p.name for p in BENCH.glob("*.py") if p.name != "harness.py")
    assert scripts
    missing = [s for s in scripts if f"`{s}`" not in readme]
    assert not missing, missing


def test_results_hold_current_results_only():
    files = [p for p in RESULTS.rglob("*") if p.is_file()]
    assert 0 < len(files) <= 80
    run_named = [p.name for p in files if re.search(r"_s\d+[._]|lease|session", p.name)]
    assert not run_named, run_named
    shipped = {p.read_bytes() for p in (ROOT / "calibration" / "profiles").glob("*.json")}
    copies = [p.name for p in files if p.stat().st_size < 1_000_000 and p.read_bytes() in shipped]
    assert not copies, copies


def test_tests_read_fixtures_not_results():
    needle = "benchmarks" + "/results"  # spelled apart so this file does not match itself
    needle2 = '"benchmarks" / ' + '"results"'
    readers = [p.name for p in (ROOT / "tests").rglob("*.py")
               if needle in p.read_text() or needle2 in p.read_text()]
    assert not readers, readers


def test_harness_header_and_write(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        from harness import header, write
    finally:
        sys.path.remove(str(BENCH))
    h = header("demo", libs=("json",), note="x")
    assert h["benchmark"] == "demo" and h["note"] == "x"
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$", h["date"])
    assert h["machine"]["cores"] >= 1 and h["versions"]["python"].count(".") == 2
    assert "spsim" in h["versions"]
    out = write(tmp_path / "a" / "r.json", {**h, "rows": [1]})
    assert json.loads(out.read_text())["rows"] == [1]


def test_readme_and_docs_describe_today():
    assert len((ROOT / "README.md").read_text()) < 12_000
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "gpu_runtime").glob("*.md"),
             BENCH / "README.md"]
    hits = [(p.name, m.group(0)) for p in texts for m in re.finditer(r"(?i)session [0-9]|\blease", p.read_text())]
    assert not hits, hits
