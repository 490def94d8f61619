"""Named acceptance presets (`presets/*.json`, package data) and `make_acceptance(spec, seed)`.

A preset is a JSON file: `name`, `description`, the setting it stands for (`model`, `workload`,
`reference`: draft-KV method, context, budget, output tokens, temperature), `params` (LatentParams),
`stated` (the curve the model gives at the reference setting: tests check sampling reproduces it),
`evidence` (published figures and how close the preset gets) and `beyond_evidence`.
Specs: `fixed:p=0.8`, `position:p0=0.9,decay=0.02`, `latent:mu=3,...` (bare LatentParams), or a
preset name with LatentParams overrides, `sparsespec-llama8b:temperature=0.7`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from spsim.errors import SpecError
from spsim.spec import build, parse_spec

from .latent import LatentAcceptance, LatentParams
from .simple import FixedAcceptance, PositionAcceptance

DEFAULT_ACCEPTANCE = "sparsespec-llama8b"  # Llama-3.1-8B, long context, verify-refreshed top pages
SIMPLE = {"fixed": FixedAcceptance, "position": PositionAcceptance}


@lru_cache(maxsize=None)
def _load_all() -> dict[str, dict]:
    out = {}
    for f in sorted(resources.files(__package__).joinpath("presets").iterdir(), key=lambda p: p.name):
        if f.name.endswith(".json"):
            d = json.loads(f.read_text())
            out[d["name"]] = d
    return out


def list_presets() -> list[str]:
    return sorted(_load_all())


def load_preset(name: str) -> dict:
    presets = _load_all()
    if name not in presets:
        raise SpecError(f"unknown acceptance model {name!r} (known: {', '.join(known_names())})")
    return json.loads(json.dumps(presets[name]))  # a copy callers may edit


def known_names() -> list[str]:
    return sorted(SIMPLE) + ["latent"] + list_presets()


def preset_params(name: str, overrides: dict | None = None) -> LatentParams:
    base = {} if name == "latent" else load_preset(name)["params"]
    return build(LatentParams, name, {**base, **(overrides or {})}) if overrides else build(LatentParams, name, base)


def make_acceptance(spec: str, seed: int = 0):
    """An AcceptanceModel from a spec; draws keyed by `seed`. Unknown names/params raise SpecError."""
    name, params = parse_spec(spec)
    if name in SIMPLE:
        model = build(SIMPLE[name], name, params)
        model._setup(seed)
        return model
    if name != "latent" and name not in _load_all():
        raise SpecError(f"unknown acceptance model {name!r} (known: {', '.join(known_names())})")
    return LatentAcceptance(preset_params(name, params), seed=seed, name=name)
