"""Cost profiles: JSON files that rebuild a cost model, and the registry of profile kinds.

A profile is `{"spsim_cost_profile": 1, "kind": ..., "metadata": {...}, ...}`. Its metadata
records what the costs were measured or assumed for: GPU, model shape, tp, dtypes, page size,
package and kernel versions, date, fit error. A kind (the analytic `roofline`, a calibrated model)
registers a loader with `register_kind`; `load_cost_model` dispatches on `kind` and checks the
metadata against what the run asks for, so a profile of another shape is never used silently.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Callable

from spsim.errors import SpsimError

PROFILE_VERSION = 1
KINDS: dict[str, Callable[[dict], object]] = {}  # kind -> loader(profile dict) -> cost model


def register_kind(kind: str, loader: Callable[[dict], object]) -> None:
    KINDS[kind] = loader


def save_profile(cm, path: str | Path) -> None:
    Path(path).write_text(json.dumps(cm.to_profile(), indent=1) + "\n")


def read_profile(path: str | Path) -> dict:
    path = Path(path)
    try:
        prof = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpsimError(f"{path}: cost profile not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SpsimError(f"{path}: not a JSON cost profile ({e})") from None
    if not isinstance(prof, dict) or "spsim_cost_profile" not in prof:
        raise SpsimError(f"{path}: not a cost profile (no 'spsim_cost_profile' key)")
    if prof["spsim_cost_profile"] != PROFILE_VERSION:
        raise SpsimError(f"{path}: cost profile version {prof['spsim_cost_profile']!r}; this spsim reads "
                         f"version {PROFILE_VERSION}")
    return prof


def load_cost_model(path: str | Path, expect: dict | None = None):
    """Rebuild a cost model from a JSON profile; errors name the file. `expect` holds what the run
    asks for (`model_name`, `tp`, `kv_dtype`, `weight_dtype`, `page_size`): a profile recorded for
    other values is an error; other package or kernel versions are a warning."""
    from . import calibrated, roofline  # noqa: F401  (register the built-in kinds; no torch)

    prof = read_profile(path)
    kind = prof.get("kind")
    if kind not in KINDS:
        raise SpsimError(f"{path}: unknown cost profile kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    if not isinstance(prof.get("metadata"), dict):
        raise SpsimError(f"{path}: cost profile has no 'metadata' object")
    check_metadata(path, prof["metadata"], expect or {})
    try:
        return KINDS[kind](prof)
    except (KeyError, TypeError, ValueError) as e:
        raise SpsimError(f"{path}: malformed {kind} profile ({type(e).__name__}: {e})") from None


def check_metadata(path, md: dict, expect: dict) -> None:
    for key, want in expect.items():
        have = md.get(key)
        if want is None or have is None:
            continue
        if _norm(have) != _norm(want):
            if key == "model_name":
                raise SpsimError(f"{path}: profile is for model_name={have!r}, the run asks for {want!r} "
                                 f"(give --model {have}, or calibrate {want})")
            raise SpsimError(f"{path}: profile is for {key}={have!r}, the run asks for {want!r} "
                             "(calibrate for this setting, or drop the option to use the profile's)")
    mine = _versions()
    if (mine.get("torch") or "").endswith("+cpu"):
        return  # no GPU runtime here to differ from the measured one: the simulator alone uses the profile
    for pkg, ver in (md.get("versions") or {}).items():
        if ver and mine.get(pkg) and ver.split("+")[0] != mine[pkg].split("+")[0] and pkg in ("torch", "triton"):
            warnings.warn(f"{path}: profile measured with {pkg} {ver}, this machine has {mine[pkg]}", stacklevel=3)


def _norm(v):
    return v.strip().lower() if isinstance(v, str) else v


def _versions() -> dict:
    from importlib import metadata as im

    out = {}
    for pkg in ("spsim", "numpy", "torch", "triton"):
        try:
            out[pkg] = im.version(pkg)
        except im.PackageNotFoundError:
            out[pkg] = None
    return out
