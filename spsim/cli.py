"""The `spsim` command line. Each part contributes its own typer app; this file only wires them.

Errors caused by input (`SpsimError`) print one line and exit with their code, never a traceback.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from . import __version__
from .errors import SpsimError

err_console = Console(stderr=True)

app = typer.Typer(
    name="spsim",
    help="Decide how to serve long-context LLMs with self-speculative decoding: replay traces "
    "against scheduling policies, calibrate cost models on a GPU, plan capacity.",
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
    from spsim.traces.cli import app as trace_app

    app.add_typer(trace_app, name="trace", help="Inspect, convert, generate and transform request traces.")
    try:
        from spsim.simulator.cli import register as register_sim
    except ImportError:  # during bring-up only; removed once the simulator lands
        register_sim = None
    if register_sim:
        register_sim(app)
    try:
        from spsim.simulator.acceptance.cli import app as acc_app
    except ImportError:
        acc_app = None
    if acc_app:
        app.add_typer(acc_app, name="acceptance", help="Show, sample and fit acceptance models.")


_register()


def main() -> None:
    try:
        app()
    except SpsimError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
