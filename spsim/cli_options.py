"""Command-line options generated from `ServingConfig`, so every command that serves a trace
(`replay`, `compare`, and the runtime's `run`) offers the same flags with the same defaults and
help. A command lists the settings it leaves out and the defaults it changes, and so says so."""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import MISSING, fields

import typer

from .config import ServingConfig

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
            if f.name in defaults:
                help_ += " [this command's default]"
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
