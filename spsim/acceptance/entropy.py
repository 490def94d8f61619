"""The entropy signal a drafted token carries, and how predictive it is of acceptance.

log(entropy) = log(median) + sigma * n + shift * (token rejected), with n ~ N(0, 1) keyed per
position. Conditional on the token's own acceptance draw, log-entropy is normal with the same spread
and means `shift` apart, so the AUC of entropy for acceptance (probability that a rejected token has
higher entropy than an accepted one) is exactly Phi(shift / (sigma * sqrt(2))), whatever the
acceptance level: the AUC is a parameter, not a by-product of the other parameters.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr, ndtri


def shift_for_auc(auc: float, sigma: float) -> float:
    """Mean gap in log-entropy between rejected and accepted tokens that gives `auc`."""
    if not 0.0 < auc < 1.0:
        raise ValueError(f"auc={auc} must be in (0, 1)")
    return float(ndtri(auc)) * sigma * math.sqrt(2.0)


def auc_for_shift(shift: float, sigma: float) -> float:
    return float(ndtr(shift / (sigma * math.sqrt(2.0))))


def signal(accepted: np.ndarray, noise: np.ndarray, median: float, sigma: float, shift: float) -> np.ndarray:
    """Entropy in nats of each drafted token, from its acceptance indicator and keyed noise."""
    return np.exp(math.log(median) + sigma * noise + shift * (~accepted))


def empirical_auc(entropy: np.ndarray, accepted: np.ndarray) -> float:
    """AUC of entropy as a score for rejection (Mann-Whitney, ties counted half)."""
    from scipy.stats import rankdata

    entropy = np.asarray(entropy, float)
    accepted = np.asarray(accepted, bool)
    n_rej, n_acc = int((~accepted).sum()), int(accepted.sum())
    if n_rej == 0 or n_acc == 0:
        return float("nan")
    ranks = rankdata(entropy)
    return float((ranks[~accepted].sum() - n_rej * (n_rej + 1) / 2) / (n_rej * n_acc))
