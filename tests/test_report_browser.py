"""The plan's HTML report in a real headless browser (Debian's chromium): with no network it loads,
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


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from test_plan_report import small_plan

    plan = small_plan()
    path = tmp_path_factory.mktemp("browser") / "plan.html"
    write_report(path, plan)
    return path


def test_report_renders_offline(report, tmp_path):
    r = chromium("--dump-dom", report.as_uri(), tmp=tmp_path)
    dom = r.stdout
    assert "table-recommendation" in dom, r.stderr[-2000:]
    for div in PLOT_IDS:
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
