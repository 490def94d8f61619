"""Maximum-likelihood fit of LatentParams to recorded accept events.

Likelihood: each request's informative tokens (up to and including the first rejection of each run;
later ones are censored) are Bernoulli(sigmoid(logit p)) with logit p as in `latent.py`. The
request level is integrated by Gauss-Hermite quadrature and the AR(1) span process by a forward
pass over a Rouwenhorst chain (M states: matches the AR(1)'s mean, variance and lag-one
correlation), so the likelihood is exact up to that discretisation. Only parameters the events can
identify are fitted (staleness only if draft positions vary, context slopes only if context/budget
varies, a method's terms only if it appears); the rest come from the `base` preset.

The entropy signal is fitted in closed form: log-entropy is normal given acceptance, with the same
spread and a shift when rejected, so AUC = Phi(shift / (sigma sqrt 2)).
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

from spsim.plan import DraftMethod

from . import entropy as ent
from spsim.events import Events
from .latent import LatentParams, log_ratio

_Q, _M = 7, 9  # quadrature nodes for the request level, chain states for the span process


def rouwenhorst(rho: float, m: int = _M) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(states, transition matrix, stationary distribution) of a unit-variance AR(1) chain."""
    p = (1.0 + rho) / 2.0
    P = np.array([[p, 1 - p], [1 - p, p]])
    for n in range(3, m + 1):
        z = np.zeros((n, n))
        z[:-1, :-1] += p * P
        z[:-1, 1:] += (1 - p) * P
        z[1:, :-1] += (1 - p) * P
        z[1:, 1:] += p * P
        z[1:-1] /= 2.0
        P = z
    states = np.linspace(-1.0, 1.0, m) * math.sqrt(m - 1)
    pi = np.array([math.comb(m - 1, i) for i in range(m)], float) / 2 ** (m - 1)
    return states, P, pi


class _Data:
    """Informative tokens arranged as (request, position) matrices; missing positions are NaN."""

    def __init__(self, ev: Events):
        keep = ev.informative()
        req, pos = ev.request[keep], ev.out_pos[keep]
        self.reqs, r = np.unique(req, return_inverse=True)
        t = pos
        self.shape = (len(self.reqs), int(t.max()) + 1)
        self.y = np.full(self.shape, np.nan)
        self.y[r, t] = ev.accepted[keep]
        self.j = np.zeros(self.shape)
        self.j[r, t] = ev.draft_pos[keep]
        self.lr = np.zeros(self.shape)
        self.lr[r, t] = log_ratio(ev.context[keep], ev.budget[keep])
        self.m = np.full(self.shape, int(DraftMethod.VERIFY_QUEST))
        self.m[r, t] = ev.method[keep]
        self.n_obs = int(keep.sum())
        self.cols = np.flatnonzero(~np.isnan(self.y).all(axis=0))


def loglik(p: LatentParams, d: "_Data") -> float:
    """Log-likelihood of the informative tokens: one chain per request-level node, mixed at the end."""
    off, cs, st, sc, knee = p.method_terms()
    offset = off[d.m] - cs[d.m] * d.lr - (st[d.m] + sc[d.m] * np.maximum(d.lr - knee[d.m], 0.0)) * d.j
    gh_x, gh_w = np.polynomial.hermite_e.hermegauss(_Q)
    gh_w = gh_w / gh_w.sum()
    states, P, pi = rouwenhorst(p.rho)
    base = p.mu + p.sigma_req * gh_x[:, None] + p.sigma_span * states[None, :]  # (Q, M)
    R = d.shape[0]
    alpha = np.broadcast_to(pi, (R, _Q, _M)).copy()  # per node: P(state, obs so far | level node)
    logscale = np.zeros(R)
    last = 0
    Pk = {1: P}
    for t in d.cols:
        gap = int(t - last)
        if gap:
            if gap not in Pk:
                Pk[gap] = np.linalg.matrix_power(P, gap)
            alpha = alpha @ Pk[gap]
        last = t
        y = d.y[:, t]
        lp = base[None] + offset[:, t, None, None]
        pr = expit(lp)
        em = np.where(y[:, None, None] == 1, pr, np.where(y[:, None, None] == 0, 1.0 - pr, 1.0))
        alpha = alpha * em
        s = alpha.sum(axis=(1, 2))  # scale shared by all nodes keeps their relative weights
        logscale += np.log(s)
        alpha /= s[:, None, None]
    per_node = alpha.sum(axis=2)  # (R, Q): likelihood ratio across level nodes
    return float((logscale + np.log(per_node @ gh_w)).sum())


# free parameters: name -> (bounds); which are free depends on the data
_BOUNDS = {"mu": (-5.0, 12.0), "stale": (-1.0, 2.0), "ctx_slope": (-1.0, 2.0), "step_residual": (0.0, 2.0),
           "static_offset": (-8.0, 8.0), "static_ctx_slope": (-1.0, 3.0), "static_stale": (-1.0, 3.0),
           "sigma_req": (0.0, 4.0), "sigma_span": (0.0, 5.0), "rho": (0.0, 0.995)}


def free_params(ev: Events) -> list[str]:
    names = ["mu", "sigma_req", "sigma_span", "rho"]
    methods = set(np.unique(ev.method).tolist())
    varies_j = bool(len(np.unique(ev.draft_pos)) > 1)
    lr = log_ratio(ev.context, ev.budget)
    varies_lr = bool(np.ptp(lr) > 0.1)
    per_verify = methods & {DraftMethod.VERIFY_QUEST, DraftMethod.VERIFY_ATTN}
    per_step = methods & {DraftMethod.STEP_LAYER, DraftMethod.STEP_QUEST}
    if per_verify or per_step:
        names += ["stale"] * varies_j + ["ctx_slope"] * varies_lr
    if per_step and per_verify and varies_j:
        names.append("step_residual")
    if DraftMethod.STATIC in methods:
        if methods - {DraftMethod.STATIC}:
            names.append("static_offset")
        names += ["static_stale"] * varies_j + ["static_ctx_slope"] * varies_lr
    return names


def fit_entropy(ev: Events) -> dict:
    inf = ev.informative() & np.isfinite(ev.entropy) & (ev.entropy > 0)
    le, acc = np.log(ev.entropy[inf]), ev.accepted[inf]
    if acc.sum() < 2 or (~acc).sum() < 2:
        return {}
    m_acc, m_rej = le[acc].mean(), le[~acc].mean()
    resid = np.concatenate([le[acc] - m_acc, le[~acc] - m_rej])
    sigma = float(resid.std())
    shift = float(m_rej - m_acc)
    return {"entropy_median": float(math.exp(m_acc)), "entropy_sigma": sigma,
            "auc": float(min(max(ent.auc_for_shift(shift, sigma), 0.01), 0.99))}


def fit(ev: Events, base: LatentParams | None = None, maxiter: int = 200) -> tuple[LatentParams, dict]:
    """MLE of the identifiable parameters; returns (params, report with log-likelihood)."""
    base = base or LatentParams()
    d = _Data(ev)
    names = free_params(ev)
    x0 = np.array([getattr(base, n) for n in names], float)
    bounds = [_BOUNDS[n] for n in names]
    x0 = np.clip(x0, [b[0] for b in bounds], [b[1] for b in bounds])
    fixed = asdict(base)

    def make(x):
        return LatentParams(**{**fixed, **dict(zip(names, x.tolist()))})

    def nll(x):
        return -loglik(make(x), d) / d.n_obs

    res = minimize(nll, x0, method="L-BFGS-B", bounds=bounds, options={"maxiter": maxiter})
    params = make(res.x)
    ent_fit = fit_entropy(ev)
    if ent_fit:
        params = LatentParams(**{**asdict(params), **ent_fit})
    return params, {"free": names, "loglik": -res.fun * d.n_obs, "tokens": d.n_obs,
                    "loglik_per_token": -float(res.fun), "converged": bool(res.success),
                    "iterations": int(res.nit)}


def heldout_loglik(p: LatentParams, ev: Events) -> float:
    d = _Data(ev)
    return loglik(p, d) / d.n_obs
