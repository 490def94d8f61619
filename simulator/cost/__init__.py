"""Cost models: seconds per pass. The analytic roofline is the embedded default; profiles are JSON."""

from __future__ import annotations

import json
from pathlib import Path

from spsim.errors import SpsimError

from .roofline import RooflineCostModel, RooflineParams, fit_error

__all__ = ["RooflineCostModel", "RooflineParams", "fit_error", "make_cost_model", "load_cost_model",
           "save_profile"]


def make_cost_model(model: str = "llama-3.1-8b", gpu: str = "h200", tp: int = 1, weight_dtype: str = "bf16",
                    kv_dtype: str = "bf16", page_size: int = 16) -> RooflineCostModel:
    """The embedded default: a roofline model for `model` on `gpu` (names and aliases, any case)."""
    return RooflineCostModel(model, gpu, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, page_size=page_size)


def save_profile(cm: RooflineCostModel, path: str | Path) -> None:
    Path(path).write_text(json.dumps(cm.to_profile(), indent=1) + "\n")


def load_cost_model(profile_path: str | Path) -> RooflineCostModel:
    """Rebuild a cost model from a JSON profile (`to_profile()`); errors name the file."""
    path = Path(profile_path)
    try:
        prof = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpsimError(f"{path}: cost profile not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SpsimError(f"{path}: not a JSON cost profile ({e})") from None
    if not isinstance(prof, dict) or "spsim_cost_profile" not in prof:
        raise SpsimError(f"{path}: not a cost profile (no 'spsim_cost_profile' key)")
    kind = prof.get("kind")
    if kind == RooflineCostModel.name:
        try:
            return RooflineCostModel.from_profile(prof)
        except (KeyError, TypeError, ValueError) as e:
            raise SpsimError(f"{path}: malformed roofline profile ({type(e).__name__}: {e})") from None
    raise SpsimError(f"{path}: unknown cost profile kind {kind!r} (known: {RooflineCostModel.name})")
