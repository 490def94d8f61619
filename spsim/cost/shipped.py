"""Cost profiles shipped with spsim, measured on our GPUs: `calibration/profiles/<gpu>-<model>.json`
(catalog names, e.g. `h200-llama-3.1-8b.json`), data of `spsim.calibration`, which writes them.

Where one exists for a run's GPU and model and was measured at the run's tp, dtypes and page size,
it is the run's default cost model (`--cost auto`); `--cost roofline` keeps the analytic model. Its
package and kernel versions are those of the GPU machine that measured it, so a version differing
from this machine's is not worth a warning here (`--profile FILE` still warns).
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

from spsim.errors import SpsimError


def _profiles() -> Path:
    # the folder is package data of spsim.calibration; found without importing that package (a
    # layer above this one): installed, editable or in a source checkout alike
    spec = importlib.util.find_spec("spsim.calibration")
    return Path(next(iter(spec.submodule_search_locations))) / "profiles"


PROFILES = _profiles()


def profile_path(gpu: str, model: str) -> Path | None:
    """The shipped profile for this GPU and model (any alias), or None."""
    from spsim.hardware import get_gpu
    from spsim.models import get_model

    try:
        name = f"{get_gpu(gpu).name}-{get_model(model).name}.json"
    except SpsimError:
        return None
    p = PROFILES / name
    return p if p.is_file() else None


def _setting(cfg) -> dict:
    return {"tp": cfg.tp, "weight_dtype": cfg.weight_dtype, "kv_dtype": cfg.kv_dtype, "page_size": cfg.page_size}


def shipped_profile(cfg) -> tuple[Path, dict] | None:
    """(file, metadata) of the profile shipped for a `ServingConfig`, or None (no profile for this
    GPU and model, or one measured at another tp, dtype or page size)."""
    from spsim.cost import read_profile

    path = profile_path(cfg.gpu, cfg.model)
    if path is None:
        return None
    md = read_profile(path).get("metadata") or {}
    return None if any(md.get(k) != v for k, v in _setting(cfg).items()) else (path, md)


def shipped_cost_model(cfg):
    """The shipped calibrated model for a `ServingConfig`, or None (`shipped_profile`). The
    model's `source` is its file."""
    from spsim.cost import load_cost_model

    found = shipped_profile(cfg)
    if found is None:
        return None
    path, md = found
    want = _setting(cfg)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*profile measured with.*")
        cm = load_cost_model(path, expect={**want, "model_name": md.get("model_name")})
    cm.source = str(path)
    return cm
