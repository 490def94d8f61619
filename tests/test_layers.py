"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml) on an
installed copy of spsim, an upward import seeded into a copy breaks them, every module is in a
layer, and no module imports another package's private name.

The folders become spsim.* only when installed (simulator/ is spsim.simulator), so the contracts
run on a non-editable install into a temporary folder, read from outside the checkout: run inside
the checkout, import-linter would see a different package and a wrong contract could pass.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONF = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONTRACTS = CONF["tool"]["importlinter"]["contracts"]
LAYERS = next(c for c in CONTRACTS if c["type"] == "layers")

# run in a fresh interpreter: spsim must come from the copy, not from the checkout or an editable install
LINT = textwrap.dedent("""
    import sys
    import spsim
    assert spsim.__file__.startswith(sys.argv[1]), f"spsim imported from {spsim.__file__}, not the copy"
    from importlinter.cli import lint_imports_command
    sys.argv = ["lint-imports", sys.argv[2], "--no-cache"]
    lint_imports_command()
""")


def install(dest: Path) -> Path:
    """A non-editable install of the checkout's packages into `dest`/site (no network: no
    dependencies, the environment's setuptools builds it)."""
    src = dest / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in set(CONF["tool"]["setuptools"]["package-dir"].values()):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    site = dest / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--no-compile", "--target", str(site), str(src)],
                       capture_output=True, text=True, cwd=dest)
    assert p.returncode == 0, f"pip install of the checkout failed:\n{p.stdout}\n{p.stderr}"
    assert (site / "spsim" / "simulator" / "engine.py").is_file()
    return site


def lint(site: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", LINT, str(site), str(ROOT / "pyproject.toml")],
                          capture_output=True, text=True, cwd=site, env=env)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return install(tmp_path_factory.mktemp("installed"))


def modules(site: Path) -> set[str]:
    out = set()
    for f in (site / "spsim").rglob("*.py"):
        parts = f.relative_to(site).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_the_layers_hold_on_an_installed_copy(site):
    p = lint(site)
    assert p.returncode == 0, p.stdout + p.stderr
    for c in CONTRACTS:
        assert f"{c['name']} KEPT" in p.stdout, (c["name"], p.stdout)
    assert f"{len(CONTRACTS)} kept, 0 broken" in p.stdout


@pytest.mark.parametrize("seed_in, imported, broken", [
    ("plan.py", "spsim.simulator.engine", LAYERS["name"]),  # the contracts layer importing a world
    ("gpu_runtime/pages.py", "spsim.simulator.engine", "the two worlds never import each other"),
    ("cost/roofline.py", "spsim.policies.batcher", LAYERS["name"]),  # models importing the brain
])
def test_a_seeded_upward_import_breaks_them(site, tmp_path, seed_in, imported, broken):
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    target = copy / "spsim" / seed_in
    # a lazy import, inside a function: import-linter must see those too
    target.write_text(target.read_text() + f"\n\ndef _seeded():\n    import {imported}  # noqa: F401\n")
    p = lint(copy)
    assert p.returncode != 0, p.stdout
    assert f"{broken} BROKEN" in p.stdout, p.stdout
    importer = "spsim." + seed_in.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {imported}" in p.stdout, p.stdout


def test_every_module_is_in_a_layer(site):
    tails = [t.strip() for layer in LAYERS["layers"] for t in layer.replace("|", ":").split(":")]
    assert len(tails) == len(set(tails)), "a layer named twice"
    layers = {f"spsim.{t}" for t in tails}
    found = modules(site)
    assert not layers - found, f"layers naming no module: {sorted(layers - found)}"
    loose = sorted(m for m in found - {"spsim"} if not any(m == t or m.startswith(t + ".") for t in layers))
    assert not loose, f"modules in no layer (add them to [tool.importlinter] and docs/architecture.md): {loose}"


def test_no_module_imports_a_private_name_of_another_package(site):
    def unit(mod: str) -> str:  # spsim.X: a top-level module or package
        return ".".join(mod.split(".")[:2])

    bad = []
    for f in sorted((site / "spsim").rglob("*.py")):
        parts = f.relative_to(site).with_suffix("").parts
        mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        pkg = mod if parts[-1] == "__init__" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1] if node.level else []
            src = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                private = a.name.startswith("_") and not a.name.startswith("__")
                if private and src.startswith("spsim.") and unit(src) != unit(mod):
                    bad.append(f"{mod} imports {a.name} from {src}")
    assert not bad, bad
