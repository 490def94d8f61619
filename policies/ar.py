"""`ar`: the autoregressive baseline: every pass is a plain decode step, no speculation."""

from dataclasses import dataclass

import numpy as np

from .base import DecodeView, Policy
from .registry import register


@register
@dataclass
class Autoregressive(Policy):
    name = "ar"
    speculative = False
    description = "autoregressive baseline (no speculation)"

    def targets(self, view: DecodeView) -> np.ndarray:
        return np.zeros(len(view.ids), np.int64)

    def fast_plan(self, ahead, max_passes: int):
        return ahead.held(max_passes) if ahead.ask() else None  # plain passes up to the first finish
