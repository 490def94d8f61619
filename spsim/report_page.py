"""The page every HTML report is (replay, compare, plan): the title, tables, then each plot under
its own heading; plotly.js inline once, so the file opens with no network.

A plot's title is an HTML heading above it, not plotly's title: plotly writes its title on one
line that it never wraps, so a long one ran out of the figure and under plotly's toolbar. A plot
that carries no information (a figure builder returns `Dropped`: a flat line, no drafts recorded)
is left out, and a line at the end says which and why."""

from __future__ import annotations

import html
from pathlib import Path

# a table wider than the window (the plan's nine columns at 640 px) scrolls instead of running off the page
STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1200px} table{border-collapse:collapse;margin:1em 0;"
         "display:block;overflow-x:auto;max-width:100%}"
         " td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top} th{background:#f3f3f3}"
         " td.best{background:#e6f4e6;font-weight:bold} .ratio{color:#666;font-size:11px} h3.plot-title{margin:1.5em 0 0}"
         " td.num{text-align:right}")


class Dropped:
    """A plot left out of a report because it would carry no information; `why` says so."""

    def __init__(self, why: str):
        self.why = why


def write_page(path: Path, title: str, body_html: str, figs: list[tuple[str, str, object]], height: int = 420) -> None:
    """One HTML file: `title`, `body_html` (tables), then each (div id, title, plotly figure or
    Dropped)."""
    parts, dropped = [], []
    for div, t, fig in figs:
        if isinstance(fig, Dropped):
            dropped.append(f"<li>{html.escape(t)}: {html.escape(fig.why)}</li>")
            continue
        fig.update_layout(title=None, height=max(height, fig.layout.height or 0), margin=dict(t=40, l=60, r=20, b=50))
        plot = fig.to_html(full_html=False, include_plotlyjs=not parts, div_id=div)
        parts.append(f'<h3 class="plot-title" id="title-{div}">{html.escape(t)}</h3><div class="plot">{plot}</div>')
    tail = f'<p id="plots-dropped">Not shown, carrying no information:</p><ul>{"".join(dropped)}</ul>' if dropped else ""
    doc = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style></head><body>
<h1>{html.escape(title)}</h1>
{body_html}
{''.join(parts)}
{tail}
</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)
