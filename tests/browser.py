"""Headless Chromium for the report tests: where it is, and a page as the browser drew it (the
plots' traces as plotly resolved them, where each table and plot lies, and a screenshot).

Where Chromium (or Pillow, which reads the screenshot) is missing the tests skip and say why;
under CI (CI=true) they fail instead, so a CI machine without the browser cannot pass unseen.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--hide-scrollbars", "--force-color-profile=srgb",
         "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",  # no network: a fetch would fail
         "--virtual-time-budget=10000"]
WIDTH = 1200
MAX_HEIGHT = 16000

# After plotly has drawn: per plot, its traces as plotly resolved them (name, type, colours, x for
# bars) and its rectangle on the page; the tables' rectangles; the page's height. Written into the
# page, where --dump-dom reads it.
PROBE = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const rect = e => { const r = e.getBoundingClientRect();
                      return [r.left, r.top + window.scrollY, r.width, r.height]; };
  const plots = [...document.querySelectorAll('.js-plotly-plot')].map(gd => ({
    id: gd.id, rect: rect(gd), svg: gd.querySelectorAll('.main-svg').length,
    traces: (gd._fullData || []).map(t => ({
      name: t.name, type: t.type, showlegend: t.showlegend,
      marker: t.marker ? t.marker.color : null, line: t.line ? t.line.color : null,
      x: t.type === 'bar' ? Array.from(t.x || []) : null}))}));
  // a table's body: the table itself is a block as wide as the page (it scrolls where it is wider)
  const tables = [...document.querySelectorAll('table')].map(t => ({id: t.id, rect: rect(t.tBodies[0] || t)}));
  const out = document.createElement('pre');
  out.id = 'spsim-probe';
  out.textContent = JSON.stringify({plots, tables, height: document.documentElement.scrollHeight});
  document.body.appendChild(out);
}, 1000));
</script>"""


def need(what: str, missing: bool) -> None:
    """Skip where `what` is missing, saying so; fail instead under CI (CI=true)."""
    if not missing:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing under CI: the reports' headless-browser check must run there "
                    "(.ci/run installs Debian's chromium; pillow comes with the test extra)")
    pytest.skip(f"{what} is missing: the reports' headless-browser check did not run")


def _run(args, tmp: Path):
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp}/profile", "--enable-logging=stderr", "--v=0",
                           *args], capture_output=True, text=True, timeout=120)


class Drawn:
    """A report as headless Chromium drew it: `dom` (after scripts), `probe` (PROBE's JSON),
    `errors` (console errors), `shot` (the whole page as a Pillow RGB image)."""

    def __init__(self, report: Path, tmp: Path):
        from PIL import Image

        page = tmp / f"probed-{report.name}"  # the report beside itself, so relative links would resolve alike
        page.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
        r = _run([f"--window-size={WIDTH},1000", "--dump-dom", page.as_uri()], tmp)
        self.dom = r.stdout
        self.errors = [line for line in r.stderr.splitlines() if "CONSOLE" in line and "rror" in line]
        m = re.search(r'<pre id="spsim-probe">(.*?)</pre>', self.dom, re.S)
        assert m, r.stderr[-2000:]
        import html

        self.probe = json.loads(html.unescape(m.group(1)))
        height = min(int(self.probe["height"]) + 20, MAX_HEIGHT)
        png = tmp / f"{report.stem}.png"
        _run([f"--window-size={WIDTH},{height}", f"--screenshot={png}", page.as_uri()], tmp)
        self.shot = Image.open(png).convert("RGB")
        self.png = png

    def crop(self, rect):
        x, y, w, h = (int(round(v)) for v in rect)
        return self.shot.crop((x, y, x + w, y + h))


def ink(img) -> float:
    """Share of pixels that are not (near) white."""
    grey = img.convert("L")
    hist = grey.histogram()
    return 1.0 - sum(hist[245:]) / max(1, sum(hist))


def pixels_of(img, hex_colour: str) -> int:
    """How many pixels are exactly this colour."""
    rgb = tuple(int(hex_colour.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
    return sum(n for n, c in img.getcolors(maxcolors=img.width * img.height) if c == rgb)
