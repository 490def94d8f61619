"""The HTML reports (plan, compare, replay) in a real headless browser (Debian's chromium): with no network it loads,
every plot renders (plotly drew its SVG in each plot's div), no JavaScript error is logged, and a
screenshot is far from blank. Skipped, with the reason, where chromium is not installed (CI does
not install it: `apt-get install chromium` is ~270 MB and needs root)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from spsim.planning.report import PLOT_IDS, write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium): "
                                "the report's headless-browser check did not run")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",  # no network: a fetch would fail
         "--virtual-time-budget=10000", "--window-size=1200,2400"]


def chromium(*args, tmp):
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp}/profile", "--enable-logging=stderr", "--v=0",
                           *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module", params=["plan", "compare", "replay"])
def report(request, tmp_path_factory):
    """(path, plot ids) of each kind of report."""
    folder = tmp_path_factory.mktemp(f"browser-{request.param}")
    if request.param == "plan":
        from test_plan_report import small_plan

        path = folder / "plan.html"
        write_report(path, small_plan())
        return path, PLOT_IDS
    from typer.testing import CliRunner

    from spsim.cli import app
    from spsim.html_report import COMPARE_PLOT_IDS
    from spsim.html_report import PLOT_IDS as RUN_PLOTS

    runner = CliRunner()
    tr = folder / "t.jsonl"
    assert runner.invoke(app, ["trace", "gen", str(tr), "-n", "40", "--qps", "4", "--seed", "2", "--prompt",
                               "uniform:low=2000,high=12000", "--output", "uniform:low=20,high=80"]).exit_code == 0
    path = folder / f"{request.param}.html"
    if request.param == "compare":
        args, ids = ["compare", str(tr), "-P", "ar,fixed-k:k=4,aspire"], COMPARE_PLOT_IDS
    else:
        args, ids = ["replay", str(tr), "--policy", "aspire", "--json"], RUN_PLOTS
    r = runner.invoke(app, [*args, "--concurrency", "8", "--report", str(path)])
    assert r.exit_code == 0, r.output
    return path, ids


def test_report_renders_offline(report, tmp_path):
    report, ids = report
    r = chromium("--dump-dom", report.as_uri(), tmp=tmp_path)
    dom = r.stdout
    assert re.search(r'<table id="table-(recommendation|compare|summary)"', dom), r.stderr[-2000:]
    for div in ids:
        m = re.search(rf'<div id="{div}"[^>]*class="[^"]*js-plotly-plot[^"]*".*?class="main-svg"', dom, re.S)
        assert m, f"{div} did not render"
    errors = [line for line in r.stderr.splitlines() if "CONSOLE" in line and ("Error" in line or "error" in line)]
    assert not errors, errors
    shot, blank = tmp_path / "shot.png", tmp_path / "blank.png"
    (tmp_path / "blank.html").write_text("<html><body></body></html>")
    chromium(f"--screenshot={shot}", report.as_uri(), tmp=tmp_path)
    chromium(f"--screenshot={blank}", (tmp_path / "blank.html").as_uri(), tmp=tmp_path)
    # a white page compresses to almost nothing; plots and tables do not
    assert shot.stat().st_size > 10 * blank.stat().st_size, (shot.stat().st_size, blank.stat().st_size)
