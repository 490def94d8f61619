"""The spread a replay's acceptance carries when it comes from a fitted preset (`file:path=`).

Two sources, combined as independent: the preset's own bootstrap interval (`bootstrap.py`: what
the recorded events leave open about the mean accepted length at this method, budget and draft
length, for a new group where the fit had labelled groups), and the acceptance draws of this
replay (the seeds): from several seeds' results where given (`spsim compare --seeds N`), else
estimated from one run's requests (the standard error of accepted / verifications over requests,
which is what another seed redraws).
"""

from __future__ import annotations

import math

import numpy as np

Z = 1.96


def preset_interval(spec: str | None) -> dict | None:
    """The `interval` block of a `file:` spec's preset, else None."""
    if not spec or not str(spec).startswith("file:"):
        return None
    from .presets import resolve

    _, _, preset = resolve(spec)
    return (preset or {}).get("interval")


def seed_sd_from_requests(accepted, verifies) -> float:
    """Standard error of sum(accepted) / sum(verifies) over requests (ratio estimator)."""
    a, v = np.asarray(accepted, float), np.asarray(verifies, float)
    keep = v > 0
    a, v = a[keep], v[keep]
    n = len(v)
    if n < 2 or v.sum() <= 0:
        return math.nan
    m = a.sum() / v.sum()
    return float(math.sqrt(((a - m * v) ** 2).sum() * n / (n - 1)) / v.sum())


def spread(block: dict, method: str, budget: int, mean: float, drafts_per_verify: float, seed_sd: float,
           seeds: int) -> dict:
    """Interval of the mean accepted per verification: preset half-width (+) seeds' (Z sd)."""
    from .bootstrap import cell_for, half_width_at

    cell = cell_for(block, method, budget)
    hw_p = half_width_at(cell, drafts_per_verify) if cell else math.nan
    hw_s = Z * seed_sd / mean if mean and np.isfinite(seed_sd) else 0.0
    hw = math.sqrt(hw_p ** 2 + hw_s ** 2) if np.isfinite(hw_p) else hw_s
    return {"mean_accepted_per_verify": mean, "preset_half_width_rel": hw_p, "seed_sd": seed_sd,
            "seeds": seeds, "seed_half_width_rel": hw_s, "half_width_rel": hw,
            "lo": mean * (1 - hw), "hi": mean * (1 + hw), "level": 0.95,
            "preset_cell": None if cell is None else {"method": cell["method"], "budget": cell["budget"]},
            "preset_interval_for": "a new group" if cell and "new_group" in cell else "the fitted mean"}


def note(s: dict) -> str:
    if s["seeds"] > 1:
        seeds = f"{s['seeds']} seeds: sd {s['seed_sd']:.3f}"
    elif np.isfinite(s["seed_sd"]):
        seeds = f"one seed: sd {s['seed_sd']:.3f} estimated from the requests"
    else:
        seeds = "one seed: --seeds N adds the seeds' spread"
    return (f"acceptance from a fitted preset: mean accepted per verification {s['mean_accepted_per_verify']:.3f}, "
            f"95 % [{s['lo']:.3f}, {s['hi']:.3f}] (+/-{s['half_width_rel']:.1%}: the preset's interval "
            f"+/-{s['preset_half_width_rel']:.1%} for {s['preset_interval_for']}, {seeds})")
