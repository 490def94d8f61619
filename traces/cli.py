"""`spsim trace ...` (filled in by the traces work)."""
import typer

app = typer.Typer(no_args_is_help=True)
