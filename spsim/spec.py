"""The one spec grammar used everywhere (CLI, compare lists, files): `name` or `name:k=v,k=v`.

Values are parsed as int, then float, then bool (`true`/`false`), else kept as strings; the class
that receives them validates types and ranges (see `build`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from .errors import SpecError

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """`fixed-k:k=8` -> ("fixed-k", {"k": 8})."""
    spec = spec.strip()
    name, _, rest = spec.partition(":")
    name = name.strip()
    if not _NAME.match(name):
        raise SpecError(f"spec {spec!r}: bad name {name!r} (expected e.g. 'aspire' or 'fixed-k:k=8')")
    params: dict[str, Any] = {}
    if rest.strip():
        for item in rest.split(","):
            key, eq, val = item.partition("=")
            key = key.strip().replace("-", "_")
            if not eq or not key or not val.strip():
                raise SpecError(f"spec {spec!r}: expected key=value, got {item!r}")
            if key in params:
                raise SpecError(f"spec {spec!r}: {key} given twice")
            params[key] = _value(val.strip())
    return name, params


def split_specs(text: str) -> list[str]:
    """Split a comma list of specs where params also use commas: `ar,fixed-k:k=8,entropy`.

    An item without ':' that contains '=' continues the previous spec's parameters.
    """
    out: list[str] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if "=" in item and ":" not in item and out:
            out[-1] += "," + item
        else:
            out.append(item)
    return out


def build(cls: type, spec_name: str, params: dict[str, Any]):
    """Instantiate dataclass `cls` from spec params, with a clear error for unknown or mistyped keys."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, val in params.items():
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise SpecError(f"{spec_name}: unknown parameter {key!r} (known: {known})")
        want = fields[key].type
        want = want if isinstance(want, type) else {"int": int, "float": float, "bool": bool, "str": str}.get(str(want).split("|")[0].strip(), None)
        if want is float and isinstance(val, int) and not isinstance(val, bool):
            val = float(val)
        if want is not None and not isinstance(val, want):
            raise SpecError(f"{spec_name}: parameter {key}={val!r} should be {want.__name__}")
        kwargs[key] = val
    missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:  # said here in the spec's words, not as the constructor's TypeError
        given = ",".join(f"{n}=..." for n in [*kwargs, *missing])
        raise SpecError(f"{spec_name}: missing parameter{'s' * (len(missing) > 1)} {', '.join(missing)} "
                        f"(expected {spec_name}:{given})")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:
        raise SpecError(f"{spec_name}: {e}") from None
