"""The HTML reports in a real headless browser (Debian's chromium), as a user opens them: `spsim plan
--report`, `spsim compare --out` (its report.html) and `spsim replay --report`. With no network
each loads with no JavaScript error; the screenshot shows the results table and at least four
plots that are not blank, none in plotly's default colours; each policy (a plan: each
configuration) has one colour in every plot (as plotly resolved it, and as pixels of that colour
in each plot that draws it). Skipped, saying why, where chromium or pillow is missing; under CI
(CI=true) failed instead (tests/browser.py)."""

from __future__ import annotations

import pytest

from browser import CHROMIUM, Drawn, ink, need, pixels_of

PLOTLY_DEFAULTS = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880", "#ff97ff",
                   "#fecb52")


def _pillow_missing() -> bool:
    try:
        import PIL  # noqa: F401
    except ImportError:
        return True
    return False


@pytest.fixture(scope="module", autouse=True)
def browser():
    need("chromium (apt-get install chromium)", CHROMIUM is None)
    need("pillow (pip install pillow: the test extra)", _pillow_missing())


_DRAWN: dict[str, tuple] = {}


@pytest.fixture
def drawn(kind, tmp_path_factory):
    """(kind, names of the report's policies, Drawn), each kind made and drawn once per session."""
    if kind not in _DRAWN:
        _DRAWN[kind] = _draw(kind, tmp_path_factory.mktemp(f"browser-{kind}"))
    return _DRAWN[kind]


def _draw(kind, folder):
    if kind == "plan":
        from test_plan_report import small_plan

        from spsim.planning.report import write_report

        plan = small_plan()
        path = folder / "plan.html"
        write_report(path, plan)
        return kind, [r["config"] for r in plan.rows], Drawn(path, folder)
    from typer.testing import CliRunner

    from spsim.cli import app

    runner = CliRunner()
    tr = folder / "t.jsonl"
    assert runner.invoke(app, ["trace", "gen", str(tr), "-n", "40", "--qps", "4", "--seed", "2", "--prompt",
                               "uniform:low=2000,high=12000", "--output", "uniform:low=20,high=80"]).exit_code == 0
    if kind == "compare":  # the README's form: --out, the report inside
        names = ["ar", "fixed-k:k=4", "aspire"]
        r = runner.invoke(app, ["compare", str(tr), "-P", ",".join(names), "--concurrency", "8",
                                "--out", str(folder / "cmp")])
        path = folder / "cmp" / "report.html"
    else:
        names = []
        path = folder / "run.html"
        r = runner.invoke(app, ["replay", str(tr), "--policy", "aspire", "--concurrency", "8", "--json",
                                "--report", str(path)])
    assert r.exit_code == 0, r.output
    return kind, names, Drawn(path, folder)


@pytest.mark.parametrize("kind", ["plan", "compare", "replay"])
def test_report_draws_its_table_and_plots_offline(drawn):
    kind, _, d = drawn
    assert not d.errors, d.errors
    table = {"plan": "table-results", "compare": "table-compare", "replay": "table-summary"}[kind]
    (rect,) = [t["rect"] for t in d.probe["tables"] if t["id"] == table]
    assert ink(d.crop(rect)) > 0.05, f"{table} is blank in {d.png}"
    drawn_plots = [p for p in d.probe["plots"] if p["svg"] and p["traces"] and ink(d.crop(p["rect"])) > 0.03]
    assert len(drawn_plots) >= 4, ([(p["id"], ink(d.crop(p["rect"]))) for p in d.probe["plots"]], d.png)
    assert all(p["rect"][1] + p["rect"][3] <= d.shot.height for p in drawn_plots), "screenshot cut a plot off"
    for p in d.probe["plots"]:  # every colour is the report's own: plotly's defaults appear nowhere
        img = d.crop(p["rect"])
        for c in PLOTLY_DEFAULTS:
            assert pixels_of(img, c) == 0, (p["id"], c, d.png)


def _colours(trace) -> list[tuple[str, str]]:
    """(policy, colour) pairs a trace draws: a line or box named after its policy, or bars with a
    colour per policy on the x axis."""
    if trace["type"] == "bar" and isinstance(trace["marker"], list):
        return list(zip(trace["x"], trace["marker"]))
    name = trace["name"].rsplit(" request ", 1)[0]  # draft lengths: "POLICY request N"
    return [(name, trace["line"] or trace["marker"])]


@pytest.mark.parametrize("kind", ["plan", "compare"])  # a replay report is one run: no policies to tell apart
def test_one_colour_per_policy_across_plots(drawn):
    kind, names, d = drawn
    seen: dict[str, set[str]] = {n: set() for n in names}
    plots_of: dict[str, list[str]] = {n: [] for n in names}
    for p in d.probe["plots"]:
        for t in p["traces"]:
            for name, colour in _colours(t):
                if name in seen and isinstance(colour, str):
                    seen[name].add(colour.lower())
                    plots_of[name].append(p["id"])
    for name in names:
        assert len(seen[name]) == 1, (name, seen[name])
        assert len(set(plots_of[name])) >= 2, (name, plots_of[name])  # one colour over several plots
    assert max(len(set(v)) for v in plots_of.values()) >= 3, plots_of  # a speculative one: in 3 or more
    assert len({c for s in seen.values() for c in s}) == len(names), seen  # and no two policies share one
    for p in d.probe["plots"]:
        img = d.crop(p["rect"])
        for name in {n for t in p["traces"] for n, _ in _colours(t)} & set(names):
            assert pixels_of(img, next(iter(seen[name]))) > 0, (p["id"], name, d.png)
