"""The configurations a plan sweeps: policy x GPU x model x settings, each a `PlanConfig`.

A configuration's hash names its cached probes, so a rerun finds them; it covers every setting
that changes a simulated run (the sweep's own settings and the shared serving settings).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import asdict, dataclass

from spsim.errors import SpsimError

# swept settings: (PlanConfig field, option, parser)
SWEPT = ("policy", "gpu", "model", "max_batch", "draft_budget", "draft_kv", "tp")


@dataclass(frozen=True)
class PlanConfig:
    policy: str
    gpu: str
    model: str
    max_batch: int
    draft_budget: int
    draft_kv: str
    tp: int

    def label(self, varying: tuple[str, ...] = SWEPT) -> str:
        """A short name showing the swept settings that vary in this plan."""
        parts = []
        for f in varying:
            v = getattr(self, f)
            parts.append(str(v) if f in ("policy", "gpu", "model") else f"{f.replace('_', '-')}={v}")
        return " ".join(parts) or self.policy

    def serving(self, base) -> object:
        """The base serving settings with this configuration's."""
        return base.with_(**asdict(self))

    def hardware(self) -> tuple:
        """What the neighbouring configurations share: the same GPUs serving the same model."""
        return (self.gpu, self.model, self.tp)


def digest(obj) -> str:
    """A stable hash of JSON-able settings."""
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def split_list(text: str, option: str) -> list[str]:
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        raise SpsimError(f"{option}: empty list")
    if len(set(items)) != len(items):
        dup = next(x for x in items if items.count(x) > 1)
        raise SpsimError(f"{option}: {dup!r} is given twice")
    return items


def int_list(text: str, option: str, low: int = 1) -> list[int]:
    """`256`, `64,128,256` or a range `1..8` (every integer in it)."""
    out: list[int] = []
    for item in split_list(text, option):
        m = re.fullmatch(r"(\d+)\s*\.\.\s*(\d+)", item)
        try:
            vals = list(range(int(m.group(1)), int(m.group(2)) + 1)) if m else [int(item)]
        except ValueError:
            raise SpsimError(f"{option}: {item!r} is not an integer or a range like 1..8") from None
        if m and not vals:
            raise SpsimError(f"{option}: empty range {item!r}")
        for v in vals:
            if v < low:
                raise SpsimError(f"{option}: {v} must be >= {low}")
            if v in out:
                raise SpsimError(f"{option}: {v} is given twice")
            out.append(v)
    return out


def expand(policies, gpus, models, max_batch, draft_budget, draft_kv, tp) -> list[PlanConfig]:
    """Every combination, in a fixed order (hardware outermost, policies innermost)."""
    return [PlanConfig(p, g, m, mb, db, dk, t)
            for g, m, t, mb, db, dk, p in itertools.product(gpus, models, tp, max_batch, draft_budget, draft_kv, policies)]


def varying(configs: list[PlanConfig]) -> tuple[str, ...]:
    """The swept settings that take more than one value (policy always shown)."""
    return tuple(f for f in SWEPT if f == "policy" or len({getattr(c, f) for c in configs}) > 1)
