"""Policy registry: `@register` a class, build it from a spec string (`fixed-k:k=8`)."""

from __future__ import annotations

from spsim.errors import SpecError
from spsim.spec import build, parse_spec

from .base import Policy

POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    POLICIES[cls.name] = cls
    return cls


def make_policy(spec: str) -> Policy:
    _load_builtin()
    name, params = parse_spec(spec)
    if name not in POLICIES:
        raise SpecError(f"unknown policy {name!r} (known: {', '.join(sorted(POLICIES))})")
    return build(POLICIES[name], name, params)


def list_policies() -> dict[str, type[Policy]]:
    _load_builtin()
    return dict(POLICIES)


def _load_builtin() -> None:
    # importing the modules runs their @register decorators
    from . import ar, aspire, entropy, fixed_k, oracle, sync  # noqa: F401
