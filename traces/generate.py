"""Synthetic traces: Poisson or Gamma arrivals at a QPS, lengths from specs, and named presets.

Randomness: one SeedSequence(seed) split into independent streams for arrivals, prompt and output
lengths, so changing the output distribution leaves arrivals and prompts as they were.
"""

from __future__ import annotations

import numpy as np

from spsim.errors import SpecError

from .common import str_ids
from .lengths import sample_lengths
from .trace import Trace


def arrivals(n: int, qps: float, kind: str = "poisson", cv: float = 1.0,
             rng: np.random.Generator | None = None) -> np.ndarray:
    """n arrival times starting at 0 with mean gap 1/qps. gamma: gap CV = cv (cv > 1 is burstier)."""
    rng = rng or np.random.default_rng(0)
    if not qps > 0:
        raise SpecError(f"qps must be > 0, got {qps}")
    if kind == "poisson":
        if cv != 1.0:  # exponential gaps have CV 1; another CV would be silently ignored
            raise SpecError(f"cv={cv:g} needs gamma arrivals (Poisson gaps have CV 1)")
        gaps = rng.exponential(1.0 / qps, size=max(n - 1, 0))
    elif kind == "gamma":
        if not cv > 0:
            raise SpecError(f"gamma arrivals need cv > 0, got {cv}")
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / (qps * shape), size=max(n - 1, 0))
    else:
        raise SpecError(f"unknown arrival process {kind!r} (known: poisson, gamma)")
    return np.concatenate([[0.0], np.cumsum(gaps)])[:n]


def generate(n: int, qps: float, arrival: str = "poisson", cv: float = 1.0,
             prompt="lognormal:median=8000,sigma=0.8", output="lognormal:median=256,sigma=0.8",
             seed: int = 0, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None) -> Trace:
    """A synthetic trace of n requests; `prompt`/`output` are length specs (see lengths.py)."""
    if n < 1:
        raise SpecError(f"n must be >= 1, got {n}")
    sa, sp, so = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    t = Trace(ids=str_ids(np.arange(n)), arrival_s=arrivals(n, qps, arrival, cv, sa),
              prompt_tokens=sample_lengths(prompt, sp, n, "prompt"),
              output_tokens=sample_lengths(output, so, n, "output"))
    if slo_ttft_s is not None or slo_tpot_s is not None:
        t.slo_ttft_s = np.full(n, np.nan if slo_ttft_s is None else slo_ttft_s)
        t.slo_tpot_s = np.full(n, np.nan if slo_tpot_s is None else slo_tpot_s)
    t.meta = {"source_format": "generated", "generator": {
        "n": n, "qps": qps, "arrival": arrival, "cv": cv,
        "prompt": str(prompt), "output": str(output), "seed": seed}}
    return t


# Long-context presets. The parameters are chosen to represent each workload's shape, not fitted
# to a dataset; docs/traces.md lists them with the reasoning.
PRESETS = {
    "long-doc-qa": {
        "about": "long-document QA (LongBench-v2-like): long prompts, short answers, Poisson arrivals",
        "prompt": "lognormal:median=32000,sigma=0.6,min=4096,max=128000",
        "output": "lognormal:median=200,sigma=0.8,min=16,max=2048",
        "arrival": "poisson", "cv": 1.0,
    },
    "long-reasoning": {
        "about": "long reasoning outputs: modest prompts, thousands of generated tokens, Poisson arrivals",
        "prompt": "lognormal:median=1500,sigma=1.0,min=64,max=16384",
        "output": "lognormal:median=6000,sigma=0.7,min=512,max=32768",
        "arrival": "poisson", "cv": 1.0,
    },
    "agentic": {
        "about": "agentic loops: very long prompts (tool context), short outputs, bursty Gamma arrivals (CV 2)",
        "prompt": "lognormal:median=40000,sigma=0.5,min=8192,max=131072",
        "output": "lognormal:median=150,sigma=0.9,min=8,max=2048",
        "arrival": "gamma", "cv": 2.0,
    },
}


def preset(name: str, n: int, qps: float, seed: int = 0) -> Trace:
    if name not in PRESETS:
        raise SpecError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    p = PRESETS[name]
    t = generate(n, qps, p["arrival"], p["cv"], p["prompt"], p["output"], seed)
    t.meta["preset"] = name
    return t
