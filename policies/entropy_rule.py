"""SparseSpec-L's controller as pure numpy functions, vectorised over requests.

1. Each drafted token's entropy gives a per-token acceptance estimate (`token_acceptance`):
       logit p_hat = logit(prior) + slope * (threshold - ln entropy)
   This is Bayes' rule when log-entropy is normal with spread sigma given acceptance and shifted by
   d when rejected (the simulator's entropy model): slope = d / sigma^2, threshold = ln(median) + d/2
   (`rule_from_auc`). `prior` is the request's acceptance estimate before seeing the entropy (an EMA
   kept by the policy).
2. After each draft, "verify now or draft one more" (`draft_more`): compare the expected accepted
   tokens per unit cost of the whole draft-verify cycle if we verify now with the best achievable
   by drafting m = 1..lookahead more tokens, whose acceptance is not yet seen (taken as `prior`).
   Looking ahead more than one token matters because the verify cost is mostly fixed: one more
   draft alone may not pay while several do.

Costs are in any consistent unit: `draft_cost` per drafted token (r,), `verify_cost[..., n]` the
verification's cost when it checks n drafts (query n + 1), shape (n_max + 1,) or (r, n_max + 1).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri


def rule_from_auc(auc: float = 0.64, entropy_sigma: float = 1.0, entropy_median: float = 0.6) -> tuple[float, float]:
    """(slope, threshold) of the Bayes estimate for an entropy signal with this AUC."""
    d = float(ndtri(auc)) * entropy_sigma * math.sqrt(2.0)
    return d / entropy_sigma ** 2, math.log(entropy_median) + d / 2


def token_acceptance(entropy: np.ndarray, prior, slope: float, threshold: float) -> np.ndarray:
    """Per-token acceptance estimate from entropy (nats); prior broadcasts against entropy."""
    prior = np.minimum(np.maximum(np.asarray(prior, float), 1e-6), 1 - 1e-6)  # np.clip, without its wrapper
    z = np.log(prior / (1 - prior)) + slope * (threshold - np.log(np.maximum(entropy, 1e-12)))
    return 1.0 / (1.0 + np.exp(-z))


def prefix_stats(p_hat: np.ndarray, drafted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From per-token estimates (r, K) of the drafts held (columns >= drafted ignored): expected
    accepted drafts E_n = sum_i prod_{j<=i} p_j and the probability s_n that all n are accepted."""
    r, kcols = p_hat.shape
    held = np.arange(kcols) < np.asarray(drafted)[:, None]
    cp = np.cumprod(np.where(held, p_hat, 1.0), axis=1)
    e = np.where(held, cp, 0.0).sum(axis=1)
    s = cp[:, -1] if kcols else np.ones(r)
    return e, s


def _rows(x, r: int) -> np.ndarray:
    """x as an (r,) float array (np.broadcast_to only where it is not one already: its wrapper
    costs more than the rule's arithmetic on a few requests)."""
    x = np.asarray(x, float)
    return x if x.shape == (r,) else np.broadcast_to(x, (r,))


def _verify_cost_at(verify_cost: np.ndarray, n: np.ndarray) -> np.ndarray:
    vc = np.asarray(verify_cost, float)
    n = np.minimum(n, vc.shape[-1] - 1)
    if vc.ndim == 1:
        return vc[n]
    # take_along_axis's gather, indexed directly (its index building cost more than the gather)
    return vc[np.arange(len(vc))[:, None], n.reshape(len(vc), -1)].reshape(n.shape)


def draft_more(p_hat: np.ndarray, drafted: np.ndarray, prior, draft_cost, verify_cost,
               max_drafts: int, lookahead: int = 8) -> np.ndarray:
    """True where drafting one more token raises the cycle's expected tokens per unit cost.

    p_hat (r, K): estimates of the drafts already held; drafted (r,); prior (r,): acceptance
    expected of tokens not drafted yet; a request never holds more than `max_drafts` (int or (r,)).
    """
    drafted = np.asarray(drafted, np.int64)
    r = len(drafted)
    prior, cd = _rows(prior, r), _rows(draft_cost, r)
    e, s = prefix_stats(p_hat, drafted)
    spent = drafted * cd
    now = (e + 1.0) / (spent + _verify_cost_at(verify_cost, drafted))
    m = np.arange(1, lookahead + 1)
    gain = s[:, None] * np.cumsum(prior[:, None] ** m, axis=1)  # expected extra accepted drafts
    n_after = drafted[:, None] + m
    cost = spent[:, None] + m * cd[:, None] + _verify_cost_at(verify_cost, n_after)
    cap = np.asarray(max_drafts)
    later = np.where(n_after <= cap[..., None], (e[:, None] + gain + 1.0) / cost, -np.inf)
    return (later.max(axis=1) > now) & (drafted < cap)


def first_draft_more(prior, draft_cost, verify_cost: np.ndarray, max_drafts, lookahead: int = 8) -> np.ndarray:
    """`draft_more` for requests holding no drafts, the same floats without the held-draft terms
    (E = 0, s = 1, nothing spent: each drops out exactly): True where drafting a first token
    raises the cycle's expected tokens per unit cost. verify_cost (r, columns)."""
    vc = np.asarray(verify_cost, float)
    r = len(vc)
    prior, cd = _rows(prior, r), _rows(draft_cost, r)
    now = 1.0 / vc[:, 0]
    m = np.arange(1, lookahead + 1)
    gain = np.cumsum(prior[:, None] ** m, axis=1)
    cost = m * cd[:, None] + (vc[:, 1:lookahead + 1] if vc.shape[1] > lookahead else vc[:, np.minimum(m, vc.shape[1] - 1)])
    cap = np.asarray(max_drafts)
    later = np.where(m <= cap[..., None], (gain + 1.0) / cost, -np.inf)
    return (later.max(axis=1) > now) & (0 < cap)


def plan_length(prior, draft_cost, verify_cost, max_drafts: int) -> np.ndarray:
    """Draft length k in 0..max_drafts maximising (E[accepted] + 1) / (k draft_cost + verify(k))
    when every token is accepted with `prior` (no entropy seen yet). Vectorised over requests."""
    prior = np.atleast_1d(np.asarray(prior, float))
    cd = np.broadcast_to(np.asarray(draft_cost, float), prior.shape)
    k = np.arange(max_drafts + 1)
    gain = np.concatenate([np.zeros((len(prior), 1)), np.cumsum(prior[:, None] ** k[1:], axis=1)], axis=1)
    cost = k * cd[:, None] + _verify_cost_at(verify_cost, np.broadcast_to(k, (len(prior), len(k))))
    return ((gain + 1.0) / cost).argmax(axis=1)

