"""`spsim run` / `spsim validate` help and device choice (issue 39, item 5): help that does not
contradict itself, examples that run on a CPU, and a large model refused on the CPU in one line
(it used to end in an out-of-memory traceback)."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from rich.markup import RE_TAGS
from typer.testing import CliRunner

from spsim.cli import app, command
from spsim.errors import SpsimError


def _commands(c, path="spsim"):
    yield path, c
    for name, sub in getattr(c, "commands", {}).items():
        yield from _commands(sub, f"{path} {name}")


def test_no_help_text_loses_brackets_to_rich_markup():
    """rich reads `[word]` as a tag and drops it: "[this command's default]" vanished from `run
    --help`, and `plan --help` said "pip install 'spsim'" for 'spsim[ray]'."""
    eaten = [(path, p.name, m.group(0)) for path, c in _commands(command()) for p in c.params
             for m in RE_TAGS.finditer(getattr(p, "help", None) or "") if len(m.group(2)) % 2 == 0]
    assert not eaten


@pytest.mark.parametrize("cmd", ["run", "validate"])
def test_a_changed_default_is_not_described_as_replays(cmd):
    run = command().commands[cmd]
    (acc,) = [p for p in run.params if p.name == "acceptance"]
    assert "embedded preset" not in acc.help and "this command's own default" in acc.help
    assert acc.default == ("real" if cmd == "run" else acc.default)
    res = CliRunner().invoke(app, [cmd, "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert res.exit_code == 0 and "this command's own default" in res.output


@pytest.mark.parametrize("cmd", ["run", "validate"])
def test_help_examples_name_a_device_that_fits_the_model(cmd):
    """An example with `--model tiny` says `--device cpu` (the default, cuda, fails on a CPU machine)."""
    examples = [line for line in command().commands[cmd].epilog.splitlines() if "spsim " in line]
    assert examples
    for line in examples:
        assert "--device cpu" in line if "--model tiny" in line else "--model tiny" not in line


def _one_line_exit_2(args):
    p = subprocess.run([sys.executable, "-m", "spsim.cli", *args], capture_output=True, text=True)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    return p.stderr


@pytest.mark.parametrize("cmd", ["run", "validate"])
def test_a_large_model_on_the_cpu_is_one_line(cmd):
    msg = _one_line_exit_2([cmd, "mooncake", "--limit", "1", "--model", "llama-3.1-8b", "--device", "cpu"])
    assert "--device cpu serves small models only" in msg and "llama-3.1-8b" in msg


def test_no_cuda_hint_suggests_the_cpu_only_for_small_models(monkeypatch):
    from spsim.cli.gpu_runtime import check_device

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False)))
    with pytest.raises(SpsimError, match="no CUDA device here; --device cpu serves small models"):
        check_device("cuda", "tiny")
    with pytest.raises(SpsimError, match="no CUDA device here, and --model llama-3.1-8b .* too large for the CPU"):
        check_device("cuda", "8b")
    check_device("cpu", "smollm2-135m")  # small: served on the CPU
    check_device("cpu", "llama-3.1-8b", weights="some/folder")  # real weights: sized when loaded
    with pytest.raises(SpsimError, match="--device must be cuda or cpu"):
        check_device("gpu", "tiny")


def test_an_error_keeps_its_brackets():
    msg = _one_line_exit_2(["replay", "mooncake", "--limit", "1", "--policy", "fixed-k:kk[x]=2"])
    assert "kk[x]" in msg
