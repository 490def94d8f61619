"""Packaging: every sub-package is installed under spsim.*, the core install needs no GPU stack."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed():
    mapping = CONF["tool"]["setuptools"]["package-dir"]
    listed = set(CONF["tool"]["setuptools"]["packages"])
    found = set()
    for pkg, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([pkg, *rel.parts]) if rel.parts else pkg)
    assert found == listed, f"pyproject packages out of date: missing {found - listed}, stale {listed - found}"


def test_core_dependencies_exclude_gpu_stack():
    deps = " ".join(CONF["project"]["dependencies"]).lower()
    for heavy in ("torch", "triton"):
        assert heavy not in deps
    assert "torch" in " ".join(CONF["project"]["optional-dependencies"]["gpu"])


def test_no_generic_top_level_names():
    # simulator/, policies/, ... install as spsim.simulator, spsim.policies, ...
    assert all(k == "spsim" or k.startswith("spsim.") for k in CONF["tool"]["setuptools"]["package-dir"])


def test_version_flag():
    p = subprocess.run([sys.executable, "-m", "spsim.cli", "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("spsim ")


def test_every_command_has_help():
    from typer.testing import CliRunner

    from spsim.cli import app

    runner = CliRunner()
    for cmd in (["replay"], ["compare"], ["models"], ["policies"], ["trace", "stats"], ["trace", "convert"],
                ["trace", "gen"], ["trace", "head"], ["acceptance", "show"], ["acceptance", "fit"]):
        r = runner.invoke(app, [*cmd, "--help"])
        assert r.exit_code == 0 and "Usage" in r.output, cmd
