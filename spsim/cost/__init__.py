"""Cost models: seconds per pass, for both worlds (no simpy, no torch).

`CostModel` is the protocol; the analytic roofline is the embedded default; calibrated models fitted
on a GPU register their own profile kind. Profiles are JSON (`spsim.cost.profile`).
"""

from __future__ import annotations

from .base import CostModel
from .calibrated import CalibratedCostModel, CalibratedParams
from .profile import KINDS, load_cost_model, read_profile, register_kind, save_profile
from .roofline import RooflineCostModel, RooflineParams, fit_error

__all__ = ["CostModel", "CalibratedCostModel", "CalibratedParams", "RooflineCostModel", "RooflineParams", "fit_error", "make_cost_model",
           "load_cost_model", "read_profile", "register_kind", "save_profile", "KINDS"]


def make_cost_model(model: str = "llama-3.1-8b", gpu: str = "h200", tp: int = 1, weight_dtype: str = "bf16",
                    kv_dtype: str = "bf16", page_size: int = 16) -> RooflineCostModel:
    """The embedded default: a roofline model for `model` on `gpu` (names and aliases, any case)."""
    return RooflineCostModel(model, gpu, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, page_size=page_size)
