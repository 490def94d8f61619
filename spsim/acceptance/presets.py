"""Named acceptance presets (`presets/*.json`, package data) and `make_acceptance(spec, seed)`.

A preset is a JSON file: `name`, `description`, the setting it stands for (`model`, `workload`,
`reference`: draft-KV method, context, budget, output tokens, temperature), `params` (LatentParams),
`stated` (the curve the model gives at the reference setting: tests check sampling reproduces it),
`evidence` (published figures and how close the preset gets) and `beyond_evidence`.
A fitted preset's `acceptance_model` (`latent`, `constant`, `position`; absent: latent) says
which model it replays: the rate models from its `rates` table (`rates.py`), exactly as selected.
Specs: `fixed:p=0.8`, `position:p0=0.9,decay=0.02`, `latent:mu=3,...` (bare LatentParams), a
preset name with LatentParams overrides, `sparsespec-llama8b:temperature=0.7`, or a preset file
written by `spsim acceptance fit`: `file:path=fitted.json,temperature=0.7`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

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
    return sorted(SIMPLE) + ["latent", "file"] + list_presets()


def preset_params(name: str, overrides: dict | None = None) -> LatentParams:
    base = {} if name == "latent" else load_preset(name)["params"]
    return build(LatentParams, name, {**base, **(overrides or {})}) if overrides else build(LatentParams, name, base)


def load_preset_file(path: str) -> dict:
    """A preset JSON written by `spsim acceptance fit` (or by hand)."""
    from spsim.errors import InputError

    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(path, None, None, "no such file") from None
    except json.JSONDecodeError as e:
        raise InputError(path, e.lineno, None, f"not JSON ({e.msg})") from None
    if not isinstance(d, dict) or not isinstance(d.get("params"), dict):
        raise InputError(path, None, "params", "missing (not an acceptance preset)")
    d.setdefault("reference", {"method": "verify-quest", "context": 32768, "budget": 3277, "output_tokens": 128})
    kind = d.get("acceptance_model", "latent")
    if kind not in ("latent", "constant", "position"):
        raise InputError(path, None, "acceptance_model", f"{kind!r} is not a model (latent, constant, position)")
    if kind != "latent" and not (isinstance(d.get("rates"), dict) and isinstance(d["rates"].get("rates"), list)
                                 and "overall" in d["rates"]):
        raise InputError(path, None, "rates", f"missing or malformed (acceptance_model {kind!r} replays its rate "
                         "table)")
    return d


def resolve(spec: str) -> tuple[str, dict, dict | None]:
    """(name, parameter overrides, preset dict or None for simple/latent); `file:path=X.json,...`
    loads a preset file."""
    name, params = parse_spec(spec)
    if name == "file":
        if not isinstance(params.get("path"), str):
            raise SpecError(f"spec {spec!r}: file needs path=PRESET.json")
        return name, {k: v for k, v in params.items() if k != "path"}, load_preset_file(params["path"])
    if name in SIMPLE or name == "latent":
        return name, params, None
    return name, params, load_preset(name)


def make_acceptance(spec: str, seed: int = 0):
    """An AcceptanceModel from a spec; draws keyed by `seed`. Unknown names/params raise SpecError."""
    name, params, preset = resolve(spec)
    if preset is not None and preset.get("acceptance_model", "latent") != "latent":
        return _rate_model(name, preset, params, seed)
    if preset is not None:
        return LatentAcceptance(build(LatentParams, name, {**preset["params"], **params}), seed=seed, name=name)
    if name in SIMPLE:
        model = build(SIMPLE[name], name, params)
        model._setup(seed)
        return model
    return LatentAcceptance(build(LatentParams, name, params), seed=seed, name=name)


def _rate_model(name: str, preset: dict, overrides: dict, seed: int):
    """A fitted preset whose selected model is a rate table (`constant`, `position`): replayed as
    exactly that table; only the entropy signal's parameters may be overridden."""
    from .rates import KINDS, RateAcceptance

    kind = preset["acceptance_model"]
    assert kind in KINDS  # load_preset_file checked the file
    ent = {k: preset["params"][k] for k in ("auc", "entropy_median", "entropy_sigma") if k in preset["params"]}
    bad = sorted(set(overrides) - set(ent) - {"auc", "entropy_median", "entropy_sigma"})
    if bad:
        raise SpecError(f"{name}: a {kind}-rate preset takes no parameter {bad[0]!r} (only auc, entropy_median, "
                        "entropy_sigma); its rates are what the fit selected")
    return RateAcceptance(preset["rates"], **{**ent, **overrides}, seed=seed, name=f"{name} ({kind} rates)")
