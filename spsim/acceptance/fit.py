"""Maximum-likelihood fit of LatentParams to recorded accept events.

Likelihood: each request's informative tokens (up to and including the first rejection of each run;
later ones are censored) are Bernoulli(sigmoid(logit p)) with logit p as in `latent.py`. The
request level is integrated by Gauss-Hermite quadrature and the AR(1) span process by a forward
pass over a Rouwenhorst chain (M states: matches the AR(1)'s mean, variance and lag-one
correlation), so the likelihood is exact up to that discretisation. Only parameters the events can
identify are fitted (staleness only if draft positions vary, context slopes only if context/budget
varies, a method's terms only if it appears beside the method it is measured against); the rest
come from the `base` preset.

Censoring is the fit's business, not the user's: a run's tokens after its first rejection never
reached a decision (the verification stopped there), so only tokens up to and including the first
rejection enter the likelihood, whether the file writes the later ones (padded) or not. A window
that ended early (a rejection, the request's end) simply contributes fewer positions; positions
never drafted (plain decode steps) are bridged by the span chain's transition over the gap.

Honesty: a fit whose parameters end at a bound is reported as not converged, naming them; the
held-out report sets the model against two baselines fitted on the same training events (one
acceptance rate per method and budget; one rate per method, budget and draft position), so a user
sees whether the structured model earns its parameters.

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
           "static_offset": (-8.0, 8.0), "static_ctx_slope": (-1.0, 3.0), "static_stale": (-1.0, 10.0),
           "static_stale_ctx": (0.0, 20.0), "verify_attn_offset": (-5.0, 5.0), "step_quest_offset": (-5.0, 5.0),
           "step_quest_residual": (0.0, 2.0), "sigma_req": (0.0, 4.0), "sigma_span": (0.0, 5.0), "rho": (0.0, 0.995)}


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
    if per_verify and varies_j:
        names += ["step_residual"] * (DraftMethod.STEP_LAYER in methods)
        names += ["step_quest_residual"] * (DraftMethod.STEP_QUEST in methods)
    if per_verify == {DraftMethod.VERIFY_QUEST, DraftMethod.VERIFY_ATTN}:
        names.append("verify_attn_offset")
    if per_step == {DraftMethod.STEP_LAYER, DraftMethod.STEP_QUEST}:
        names.append("step_quest_offset")
    if DraftMethod.STATIC in methods:
        if methods - {DraftMethod.STATIC}:
            names.append("static_offset")
        names += ["static_stale"] * varies_j + ["static_ctx_slope"] * varies_lr
        # the long-context cliff needs draft lengths at contexts beyond the knee and below it
        st = ev.method == DraftMethod.STATIC
        if varies_j and varies_lr and np.ptp(lr[st]) > 0.5:
            names.append("static_stale_ctx")
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
    at = [n for n, v, (lo, hi) in zip(names, res.x, bounds) if min(v - lo, hi - v) <= 1e-4 * (hi - lo)]
    status = ("at bounds: " + ", ".join(at) + " (the events push these past the range the model allows; "
              "read them as limits, not estimates)") if at else str(res.message)
    return params, {"free": names, "loglik": -res.fun * d.n_obs, "tokens": d.n_obs, "windows": d.shape[0],
                    "loglik_per_token": -float(res.fun), "converged": bool(res.success) and not at,
                    "at_bounds": at, "status": status, "iterations": int(res.nit)}


def heldout_loglik(p: LatentParams, ev: Events) -> float:
    d = _Data(ev)
    return loglik(p, d) / d.n_obs


class Baselines:
    """Rates fitted on training events, scored on held-out ones (log-likelihood per informative
    token): `constant` one rate per (method, budget); `position` one per (method, budget, draft
    position), falling back to the constant where training never reached that position. Rates
    carry half a pseudo-count each way so no held-out token gets probability 0."""

    def __init__(self, train: Events):
        inf = train.informative()
        self.rates, self.pos_rates = {}, {}
        m, b, j, a = train.method[inf], train.budget[inf], train.draft_pos[inf], train.accepted[inf]
        tot_n, tot_a = len(a), int(a.sum())
        self.overall = (tot_a + 0.5) / (tot_n + 1.0)
        keys = np.stack([m, b], 1)
        for key in np.unique(keys, axis=0) if len(a) else []:
            sel = (m == key[0]) & (b == key[1])
            self.rates[tuple(key.tolist())] = (a[sel].sum() + 0.5) / (sel.sum() + 1.0)
            for jj in np.unique(j[sel]).tolist():
                s2 = sel & (j == jj)
                self.pos_rates[(*key.tolist(), jj)] = (a[s2].sum() + 0.5) / (s2.sum() + 1.0)

    def loglik(self, test: Events) -> dict:
        inf = test.informative()
        m, b, j, a = test.method[inf], test.budget[inf], test.draft_pos[inf], test.accepted[inf]
        const = np.array([self.rates.get((mm, bb), self.overall) for mm, bb in zip(m.tolist(), b.tolist())])
        pos = np.array([self.pos_rates.get((mm, bb, jj), c)
                        for mm, bb, jj, c in zip(m.tolist(), b.tolist(), j.tolist(), const.tolist())])
        ll = lambda p: float(np.mean(np.where(a, np.log(p), np.log1p(-p)))) if len(a) else math.nan  # noqa: E731
        return {"constant": ll(const), "position": ll(pos)}


def group_folds(labels: np.ndarray, k: int) -> np.ndarray:
    """Fold (0..k-1) of each event, by its group label: groups ranked by a hash of their label and
    dealt round-robin, so folds are balanced in groups and the same for any file order."""
    import hashlib

    uniq, inv = np.unique(np.asarray([str(x) for x in labels], dtype=object), return_inverse=True)
    h = [hashlib.blake2b(str(u).encode(), digest_size=8).hexdigest() for u in uniq.tolist()]
    rank = np.empty(len(uniq), np.int64)
    rank[np.argsort(h, kind="stable")] = np.arange(len(uniq))
    return (rank % k)[inv]


def kfold(ev: Events, labels: np.ndarray, k: int, base: LatentParams) -> dict:
    """K-fold cross-validation by group: per fold the held-out log-likelihood per token of the
    fitted model and of the baselines, and the fold-to-fold spread of every fitted parameter."""
    folds = group_folds(labels, k)
    rows, params = [], []
    for f in range(k):
        test = folds == f
        if not test.any() or test.all():
            continue
        tr, te = ev.take(~test), ev.take(test)
        p, rep = fit(tr, base)
        params.append(asdict(p))
        rows.append({"fold": f, "groups": int(len(np.unique(np.asarray([str(x) for x in labels[test]])))),
                     "tokens": int(te.informative().sum()), "converged": rep["converged"],
                     "at_bounds": rep["at_bounds"], "loglik_per_token_fitted": heldout_loglik(p, te),
                     **{f"loglik_per_token_{n}_baseline": v for n, v in Baselines(tr).loglik(te).items()}})
    if not rows:
        return {"folds": 0, "note": "fewer than two groups: no fold can be held out"}
    free = free_params(ev)
    spread = {n: {"mean": float(np.mean([q[n] for q in params])), "sd": float(np.std([q[n] for q in params])),
                  "min": float(min(q[n] for q in params)), "max": float(max(q[n] for q in params))}
              for n in free + ["auc"]}
    mean = {key: float(np.mean([r[key] for r in rows])) for key in rows[0] if key.startswith("loglik")}
    return {"folds": len(rows), "per_fold": rows, "mean": mean, "parameter_spread": spread}
