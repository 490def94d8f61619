"""Prefix blocks against the prompt they describe (Mooncake's `hash_ids`, canonical `prefix_blocks`).

A request's blocks cover its prompt, `block_size` tokens each, the last one possibly partial. More
than ceil(prompt / block_size) cannot happen (a corrupt row, or another block size): the row fails.
Far fewer can happen (a source that hashed only part of the prompt) but quietly shrinks what the
prefix cache may share, so rows covering under half of the prompt's full blocks are kept and
counted as warnings. Rows without the field carry no prefix information and are not checked.
"""

from __future__ import annotations

import numpy as np


def too_many(lens: np.ndarray, prompt: np.ndarray, block_size: int) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        p = np.where(np.isfinite(prompt), prompt, np.inf)  # bad prompts fail their own checks first
        return lens > np.ceil(p / block_size)


def too_many_problem(prompt_field: str, block_size: int) -> str:
    return f"more blocks than the prompt holds (at most ceil({prompt_field} / {block_size}))"


def too_few(lens: np.ndarray, prompt: np.ndarray, present: np.ndarray, block_size: int) -> np.ndarray:
    """Rows (kept ones: valid prompts) whose blocks cover under half of the prompt's full blocks."""
    return present & (2 * lens < prompt // block_size)


def too_few_reason(field: str, block_size: int) -> str:
    return f"{field}: covers under half of the prompt's full {block_size}-token blocks"
