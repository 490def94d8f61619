"""Policy registry: `@register` a class, build it from a spec string (`fixed-k:k=8`)."""

from __future__ import annotations

from dataclasses import dataclass

from spsim.errors import SpecError
from spsim.spec import build, parse_spec

from .base import Policy

POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    POLICIES[cls.name] = cls
    return cls


@dataclass(frozen=True)
class PolicySpec:
    """A policy spec parsed and checked once; `make()` gives a fresh policy (one per replica)."""

    cls: type[Policy]
    name: str
    params: tuple

    def make(self) -> Policy:
        return build(self.cls, self.name, dict(self.params))


def parse_policy(spec: str) -> PolicySpec:
    _load_builtin()
    name, params = parse_spec(spec)
    if name not in POLICIES:
        raise SpecError(f"unknown policy {name!r} (known: {', '.join(sorted(POLICIES))})")
    ps = PolicySpec(POLICIES[name], name, tuple(params.items()))
    ps.make()  # validates the parameters now, with the spec's name in the error
    return ps


def make_policy(spec: str) -> Policy:
    return parse_policy(spec).make()


def list_policies() -> dict[str, type[Policy]]:
    _load_builtin()
    return dict(POLICIES)


def _load_builtin() -> None:
    # importing the modules runs their @register decorators
    from . import ar, aspire, entropy, fixed_k, oracle, sync  # noqa: F401
