"""The seam between the two worlds: who may import what, and a CLI that starts anywhere.

Each check runs in a fresh interpreter where the forbidden packages cannot be imported
(`sys.modules[name] = None` makes `import name` fail), as on the GPU machine (no simpy, no plotly)
or a machine without torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_blocked(blocked: list[str], code: str) -> subprocess.CompletedProcess:
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in blocked)
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.mark.parametrize("module,blocked", [
    ("spsim.cost", ["simpy", "torch", "triton", "plotly"]),
    ("spsim.events", ["simpy", "torch", "triton", "plotly"]),
    ("spsim.build", ["simpy", "torch", "triton", "plotly"]),
    ("spsim.policies.batcher", ["simpy", "torch", "triton", "plotly"]),
    ("spsim.policies.registry", ["simpy", "torch", "triton", "plotly"]),
    ("spsim.gpu_runtime.dispatch", ["simpy", "plotly"]),
])
def test_world_imports(module, blocked):
    code = f"import importlib; importlib.import_module({module!r}); from spsim.policies.registry import list_policies; list_policies()"
    r = run_blocked(blocked, code)
    assert r.returncode == 0, r.stderr


def _imports(folder: str) -> set[str]:
    names = set()
    for f in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
    return names


def test_policies_import_neither_world():
    bad = {m for m in _imports("policies") if m.startswith(("spsim.simulator", "spsim.gpu_runtime", "simpy", "torch"))}
    assert not bad


def test_gpu_runtime_imports_no_simpy():
    bad = {m for m in _imports("gpu_runtime") if m.startswith(("simpy", "spsim.simulator", "plotly"))}
    assert not bad


def _commands():
    import typer.main

    from spsim.cli import app

    out = [[]]

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            out.append(path + [name])
            walk(sub, path + [name])

    walk(typer.main.get_command(app), [])
    return out


def test_every_command_has_help_without_simpy_or_plotly():
    cmds = _commands()
    assert ["replay"] in cmds and ["trace", "stats"] in cmds and ["acceptance", "fit"] in cmds
    code = ("from typer.testing import CliRunner\nfrom spsim.cli import app\nr = CliRunner()\n"
            f"for c in {cmds!r}:\n"
            "    res = r.invoke(app, c + ['--help'])\n"
            "    assert res.exit_code == 0 and 'Usage' in res.output, (c, res.output, res.exception)\n"
            "assert 'simpy' not in sys.modules or sys.modules['simpy'] is None\n")
    r = run_blocked(["simpy", "plotly"], code)
    assert r.returncode == 0, r.stderr


def test_replay_without_simpy_says_what_is_missing():
    r = run_blocked(["simpy"], "sys.argv = ['spsim', 'replay', '--limit', '3']\nfrom spsim.cli import main\nmain()")
    assert r.returncode == 3
    assert "needs the Python package 'simpy'" in r.stderr and "Traceback" not in r.stderr


def test_flags_show_no_value_in_help():
    from spsim.cli import command

    cmd = command()
    flags = [p for c in cmd.commands.values() for p in c.params if getattr(p, "is_flag", False)]
    assert flags and all(p.metavar == "" for p in flags)
    r = subprocess.run([sys.executable, "-c", "import sys; from spsim.cli import main; sys.argv=['spsim','replay','--help']; main()"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120, env={**__import__("os").environ, "COLUMNS": "200"})
    line = next(x for x in r.stdout.splitlines() if "--json" in x)
    assert "<bool>" not in line and "<int>" in next(x for x in r.stdout.splitlines() if "--max-batch" in x)
