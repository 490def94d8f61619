"""Command-line options generated from `ServingConfig`, so every command that serves a trace
(`replay`, `compare`, and the runtime's `run`) offers the same flags with the same defaults and
help. A command lists the settings it leaves out and the defaults it changes, and so says so."""

from __future__ import annotations

import functools
import inspect
import os
import re
import tempfile
import typing
from dataclasses import MISSING, fields
from pathlib import Path

import typer

from .config import ServingConfig
from .errors import SpsimError

_HINTS = None


def _hints() -> dict:
    global _HINTS
    if _HINTS is None:
        _HINTS = typing.get_type_hints(ServingConfig)
    return _HINTS


def serving_options(exclude: tuple[str, ...] = (), defaults: dict | None = None, config_cls=ServingConfig):
    """Decorate a typer command taking `serving: ServingConfig`: adds one option per setting
    (except `exclude`, which keep their defaults) and hands the command the config they build."""
    defaults = defaults or {}

    def deco(fn):
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.name != "serving"]
        added = []
        for f in fields(ServingConfig):
            flags = f.metadata.get("flags")
            if f.name in exclude or not flags:
                continue
            default = defaults.get(f.name, f.default if f.default is not MISSING else None)
            help_ = f.metadata["help"]
            if f.name in defaults:  # the shared "(default: ...)" is replay's; rich would eat "[...]"
                help_ = re.sub(r" ?\(default: [^)]*\)", "", help_).rstrip(".") + " (this command's own default)."
            added.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=_hints()[f.name],
                                           default=typer.Option(default, *flags, help=help_)))
        names = {p.name for p in added}

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            settings = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
            kwargs["serving"] = config_cls(**{**defaults, **settings}).validate()
            return fn(*args, **kwargs)

        # typer reads the signature: the command's own parameters, then the settings
        kinds = sorted(params, key=lambda p: p.kind)
        wrapper.__signature__ = sig.replace(parameters=[*kinds, *added])
        return wrapper

    return deco


# Trace selection, shared by every command that reads a trace for serving.
LIMIT = typer.Option(None, "--limit", "-n", help="Use only the first N requests of the trace.")
TRACE_FORMAT = typer.Option(None, "--format", help="Force the trace format (default: detected).")
SKIP_INVALID = typer.Option(False, "--skip-invalid", help="Skip bad trace rows (reported on stderr by reason "
                            "and counted in the summary's trace_skipped) instead of stopping at the first.")


# Every results file a command writes into its --out folder (summary, tables, events, reports).
RESULT_FILES = ("summary.json", "requests.csv", "requests.parquet", "events.jsonl", "passes.jsonl", "compare.json",
                "compare.csv", "report.html", "report.csv", "report.md", "validate.json", "runtime_summary.json",
                "sim_summary.json",
                "runtime_requests.csv", "sim_requests.csv", "results.csv", "probes.csv", "recommendation.json",
                "recommendation.md")


def check_out_dir(out: Path | None, files: tuple[str, ...] = (), option: str = "--out",
                  label: str | None = None) -> None:
    """Fail now, before a long run, if results could not be written to the folder `out` (created
    when the run ends) and files `files` in it: one line naming the path (`label`, else
    `OPTION OUT`), exit 2. A results folder that holds another command's results files gets a
    warning: they would sit beside results they do not describe."""
    if out is None:
        return
    p = Path(out)
    where = label or f"{option} {out}"
    try:
        if p.exists() and not p.is_dir():
            raise SpsimError(f"{where}: exists and is not a folder" if label is None else f"{where}: {p} is not a folder")
        probe = p
        while not probe.exists():  # the nearest part of the path that exists
            if probe.parent == probe:
                break
            probe = probe.parent
        if not probe.is_dir():
            raise SpsimError(f"{where}: cannot create it: {probe} is not a folder")
        for name in files:
            f = p / name
            if f.is_dir():
                raise SpsimError(f"{where}: {f} is a folder, where a results file goes")
            if f.exists() and not os.access(f, os.W_OK):
                raise SpsimError(f"{where}: {f} exists and is not writable")
        with tempfile.TemporaryFile(dir=probe):
            pass
        stale = [n for n in RESULT_FILES if n not in files and (p / n).is_file()] if label is None else []
    except OSError as e:
        raise SpsimError(f"{where}: cannot write there ({e.strerror or e})") from None
    if stale:
        from .cli_report import warn

        warn([f"{where} holds {', '.join(stale)} from an earlier run, which this command does not write: they will "
              "not match the new results (remove them or choose another folder)"])


def policy_specs(policies: str) -> list[str]:
    """--policies, each spec checked before the trace is read; a policy given twice (the same spec
    after defaults, e.g. `ar,ar`) runs once, with a warning."""
    from .cli_report import warn
    from .policies.registry import parse_policy
    from .spec import split_specs

    specs = split_specs(policies)
    if not specs:
        raise SpsimError("--policies is empty")
    seen: dict[str, str] = {}
    out = []
    for spec in specs:
        canon = parse_policy(spec).make().spec
        if canon in seen:
            same = "is given twice" if spec == seen[canon] else f"is the same policy as {seen[canon]!r}"
            warn([f"--policies: {spec!r} {same}; running it once"])
            continue
        seen[canon] = spec
        out.append(spec)
    return out
