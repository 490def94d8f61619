"""The `spsim` command line: the top layer. One module per command group (simulator.py: replay,
compare, models, policies; gpu_runtime.py: run; traces.py, acceptance.py, calibration.py,
validate.py, planning.py, server.py); this file only wires them.

Errors caused by input (`SpsimError`) print one line and exit with their code, never a traceback.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from spsim import __version__
from spsim.errors import SpsimError

err_console = Console(stderr=True)

app = typer.Typer(
    name="spsim",
    help="Decide how to serve long-context LLMs with self-speculative decoding: replay request traces "
    "against scheduling policies in simulated time (replay, compare), find the GPUs, policy and rate an SLO "
    "allows (plan), serve them on a real model "
    "(run), and inspect traces, models, policies and acceptance models.",
    epilog="Examples:\n\n"
    "  spsim compare mooncake --limit 1000 --replicas 4 -P ar,sync:k=4,fixed-k:k=8,aspire   # about 20 s\n\n"
    "  spsim replay mooncake --limit 1000 --replicas 4 --policy aspire --out runs/aspire\n\n"
    "Options and more examples: spsim COMMAND --help.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)


def _version(value: bool):
    if value:
        typer.echo(f"spsim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")):
    pass


def _register() -> None:
    # Each command group's module imports only typer, rich and light spsim modules; a command imports
    # its own world (simpy, scipy, torch) when it runs, so `spsim --help` works everywhere and a
    # broken command fails loudly here instead of vanishing from the help.
    from .acceptance import app as acc_app
    from .calibration import register as register_calibrate
    from .gpu_runtime import register as register_run
    from .planning import register as register_plan
    from .server import register as register_serve
    from .simulator import register as register_sim
    from .traces import app as trace_app
    from .validate import register as register_validate

    app.add_typer(trace_app, name="trace", help="Inspect, convert, generate and transform request traces.",
                  epilog="Examples:\n\n  spsim trace stats mooncake\n\n"
                  "  spsim trace gen long.jsonl --preset long-doc-qa -n 2000 --qps 1.5 --seed 1\n\n"
                  "  spsim trace convert burstgpt.csv out.jsonl --rescale-qps 5 --skip-invalid")
    register_sim(app)
    register_run(app)
    register_calibrate(app)
    register_validate(app)
    register_plan(app)
    register_serve(app)
    app.add_typer(acc_app, name="acceptance", help="Show, sample and fit acceptance models.",
                  epilog="Examples:\n\n  spsim acceptance list\n\n  spsim acceptance show sparsespec-llama8b")


_register()


def command():
    """The click command behind `app`, with on/off flags shown without a `<bool>` value in help
    (typer's rich help shows each option's type; a flag takes none)."""
    import typer.main

    cmd = typer.main.get_command(app)

    def walk(c):
        c.help = unwrap(c.help)
        for p in c.params:
            if getattr(p, "is_flag", False):  # typer's options are not click.Option subclasses
                p.metavar = ""
        for sub in getattr(c, "commands", {}).values():
            walk(sub)

    walk(cmd)
    return cmd


def unwrap(text: str | None) -> str | None:
    """Help paragraphs as flowing text: rich help keeps a docstring's line breaks, so a paragraph
    wrapped at the source's width would print broken mid-sentence at the terminal's."""
    if not text:
        return text
    paras = text.split("\n\n")
    return "\n\n".join(p if any(ln.startswith((" ", "-", "*")) for ln in p.split("\n")[1:])
                       else " ".join(ln.strip() for ln in p.split("\n")) for p in paras)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line on stderr, as errors are (not Python's file:line and source)."""
    err_console.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)


# the gpu extra's packages (pyproject.toml): `spsim run`, `calibrate --gpu`, `validate` need them all
GPU_EXTRA = ("torch", "triton", "safetensors", "tokenizers", "gguf")
SERVE_EXTRA = ("starlette", "uvicorn", "prometheus_client", "httpx", "anyio", "h11")


def missing_package(name: str) -> str:
    """One line for a command whose package is not installed: the one command that installs it
    (the whole gpu extra for any of its packages, so a user does not meet them one at a time)."""
    if name.split(".")[0] in GPU_EXTRA:
        return (f"this command needs the Python package {name!r} of spsim's gpu extra, which is not installed "
                f"here: pip install 'spsim[gpu]' (in a checkout: pip install -e '.[gpu]')")
    if name.split(".")[0] in SERVE_EXTRA:
        return (f"this command needs the Python package {name!r} of spsim's serve extra, which is not installed "
                f"here: pip install 'spsim[gpu,serve]' (in a checkout: pip install -e '.[gpu,serve]')")
    return f"this command needs the Python package {name!r}, which is not installed here (pip install {name})"


def main() -> None:
    import warnings

    warnings.showwarning = _show_warning
    try:
        command()(standalone_mode=True)
    except SpsimError as e:
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except ImportError as e:  # a command's world is not installed here (e.g. simpy on the GPU machine)
        if not e.name or e.name.startswith("spsim"):
            raise  # our own import broke: a bug, show it
        err_console.print(f"[bold red]error:[/] {escape(missing_package(e.name))}", highlight=False, soft_wrap=True)
        sys.exit(3)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)

