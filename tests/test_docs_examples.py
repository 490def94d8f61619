"""The project stands alone (published figures and their sources in docs/, no pointer outside the
repository), the help describes only commands that exist, with examples and a help text for every
option, and the README's examples name real commands and options and run in reasonable time."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import typer

from spsim.cli import app

ROOT = Path(__file__).resolve().parents[1]
OTHERS_OWN = {"docs/runtime.md"}  # checked by its owner


def _project_texts():
    paths = [ROOT / "README.md", ROOT / "benchmarks" / "paper_shapes.py"]
    paths += [p for p in sorted((ROOT / "docs").glob("*.md")) if str(p.relative_to(ROOT)) not in OTHERS_OWN]
    return paths


@pytest.mark.parametrize("path", _project_texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pointer_outside_the_repository(path):
    text = path.read_text()
    design_card = "DESIGN" + ".md"  # spelled apart so this check does not cite it itself
    assert design_card not in text
    assert "shared" + "/" not in text and "/work/" not in text


def test_published_figures_are_in_the_repository():
    figs = json.loads((ROOT / "docs" / "published_figures.json").read_text())
    anchors = (ROOT / "docs" / "anchors.md").read_text()
    assert "| paper | setting | figure | source |" in anchors
    for key, entry in figs.items():
        if key.startswith(("_", "spsim_")):
            continue
        assert entry["source"] and entry["setting"], key
    ss = figs["sparsespec_l_fixed_k"]
    assert ss["k"] == [4, 8, 12, 16, 20] and ss["adaptive_speedup_vs_ar"] == 2.79
    # every published number is in the table, as published
    for figure in ("93.4 / 86.7 / 78.5 / 72.6 / 67.9", "2.10 / 2.39 / 2.69 / 2.66 / 2.62", "2.79x", "0.638",
                   "1.74x at k = 2", "0.36x at k = 16", "6.3 %", "0.84 / 0.83 / 0.82 / 0.81 / 0.79 / 0.79",
                   "1.70-4.58x", "+27 %", "16.4 percentage points", "2.24x", "1.83x",
                   "4.1 ms at 1-64 tokens, 5.7 ms at 128, 7.1 ms at 256, 12.4 ms at 512", "4.27 TB/s"):
        assert figure in anchors, figure
    for source in ("arXiv 2607.27735", "arXiv 2609.17943", "MagicDec blog"):
        assert source in anchors
    for k, pub in zip(ss["k"], ss["acceptance_fraction"]):
        assert f"{pub * 100:.1f}" in anchors


def test_paper_shapes_reads_the_repository_figures():
    text = (ROOT / "benchmarks" / "paper_shapes.py").read_text()
    assert '"docs" / "published_figures.json"' in text
    assert "json.loads(r\"\"\"" not in text  # no second copy of the figures


# ---- help

def _commands():
    root = typer.main.get_command(app)

    def walk(cmd, path):
        yield " ".join(path), cmd
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            yield from walk(sub, path + [name])

    return dict(walk(root, []))


COMMANDS = _commands()
# spsim/cli/traces.py is another part's file: its subcommands' examples are asked of its owner
TRACE_SUBCOMMANDS = {"trace stats", "trace convert", "trace gen", "trace head"}


def test_root_help_names_only_commands_that_exist():
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["--help"])
    text = " ".join(r.stdout.split())
    assert "plan capacity" not in text
    top = {name for name in COMMANDS if name and " " not in name}
    assert top == {"trace", "replay", "compare", "models", "policies", "acceptance", "run", "calibrate", "validate", "plan",
                   "serve", "bench"}
    for name in top:
        assert f" {name} " in text


@pytest.mark.parametrize("name", list(COMMANDS), ids=lambda n: n or "spsim")
def test_every_command_has_examples(name):
    assert "Examples:" in (COMMANDS[name].epilog or ""), name


@pytest.mark.parametrize("name", list(COMMANDS), ids=lambda n: n or "spsim")
def test_every_option_and_argument_has_help(name):
    cmd = COMMANDS[name]
    missing = [p.name for p in cmd.params if not getattr(p, "help", None) and getattr(p, "name", "") != "help"]
    assert not missing, (name, missing)


# ---- README examples

def _readme_examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if "spsim " in line:
                out.append(line[line.index("spsim "):])
    return out


EXAMPLES = _readme_examples()


def test_readme_has_examples():
    assert len(EXAMPLES) >= 10


@pytest.mark.parametrize("line", EXAMPLES)
def test_readme_example_parses(line):
    """Every README example names an existing command and options it accepts (parsed, not run)."""
    args = shlex.split(line)[1:]
    cmd, path = COMMANDS[""], []
    while args and args[0] in (getattr(cmd, "commands", None) or {}):
        path.append(args[0])
        cmd = cmd.commands[args.pop(0)]
    assert path, line
    ctx = cmd.make_context(" ".join(["spsim", *path]), list(args))  # raises on an unknown option
    assert ctx is not None


@pytest.mark.parametrize("line", [x for x in EXAMPLES if x.startswith(("spsim compare", "spsim replay"))])
def test_readme_runs_are_bounded(line):
    """Runs on the shipped traces are cut to a size that takes seconds, not the 21 minutes of a whole
    trace on one replica."""
    if " mooncake" in line or " azure-conv" in line:
        assert "--limit" in line, line


def test_readme_runtime_example_serves_its_requests(tmp_path):
    """The README's `spsim run` example on the CPU completes every request it asks for, with sparse
    drafts (a tiny model's 4K context rejects long-context prompts; a draft budget over the whole
    context reads the full KV and is the CPU reference's slow path)."""
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    (line,) = [x for x in EXAMPLES if x.startswith("spsim run ")]
    # as a user runs it: the CPU path, not the Triton interpreter the kernel tests set (10x slower)
    # one torch thread: on a shared 2-core machine torch's thread pool can be 20x slower
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "spsim.cli", *shlex.split(line)[1:], "--json"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    limit = int(line.split("--limit ")[1].split()[0])
    assert json.loads(r.stdout)["completed"] == limit and "drafts are not sparse" not in r.stderr


@pytest.mark.parametrize("name", [n for n in COMMANDS if n], ids=str)
def test_command_summary_is_one_short_line(name):
    """The first paragraph of a command's help is its line in the parent's command list."""
    summary = (COMMANDS[name].help or "").strip().split("\n\n")[0]
    assert summary and "\n" not in summary.strip() and len(summary) <= 120, (name, summary)


def test_help_paragraphs_flow_at_the_terminal_width():
    """Rich help keeps a docstring's line breaks: `spsim` unwraps each paragraph, so none prints
    broken mid-sentence (here: `acceptance fit`'s wrapped paragraphs)."""
    from click.testing import CliRunner

    from spsim.cli import command

    r = CliRunner().invoke(command(), ["acceptance", "fit", "--help"])
    lines = [ln.strip(" │") for ln in r.stdout.splitlines()]
    i = next(i for i, ln in enumerate(lines) if ln.startswith("Candidates:"))
    assert lines[i + 1].startswith("the latent model; the one"), lines[i:i + 3]  # not "the latent model;" alone
