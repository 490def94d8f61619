"""Model selection for `spsim acceptance fit`: the simplest model that predicts held-out requests'
accepted lengths as well as any.

Candidates, simplest first: `constant` (one rate per method and budget), `position` (one per
method, budget and draft position), `latent` (`latent.py`, fitted by `fit.py`). Each is fitted on
the training events and asked what the held-out runs accept: every held-out run (its request,
start, draft length, context, budget and method) gets the candidate's expected accepted length
(exact for the rate models; for the latent model the mean over `SEEDS` draws, new requests at the
same positions), and the mean per (method, budget) is set against the observed one. The score is
the runs-weighted mean relative error over those groups; log-likelihood per token is reported
beside it but does not decide (a model can win on likelihood and still mispredict lengths, which
is what a replay needs).

Rules, in order: `latent` is out when its fit ends at a parameter bound (its numbers there are
limits, not estimates); `position` is out when some position it would use has fewer than
`MIN_TOKENS` training tokens; among the rest the best score wins, except that a more complex
model must beat every simpler one by more than `TOLERANCE` (relative error), else the simpler is
kept. Without held-out runs the latent model is kept when it converged, else the simplest.
"""

from __future__ import annotations

import math

import numpy as np

from .latent import LatentAcceptance
from .rates import RateAcceptance, fit_rates

CANDIDATES = ("constant", "position", "latent")
MIN_TOKENS = 30  # training tokens per (method, budget, position) the position model needs
TOLERANCE = 0.005  # relative error a more complex model must gain to be preferred
SEEDS = 64  # draws of the latent model per held-out run (runs of one request share draws: few are noisy)


def run_table(ev) -> dict:
    """Per run: window, start, drafted, accepted, method, budget, context (arrays)."""
    start = ev.out_pos - ev.draft_pos
    key = ev.request.astype(np.int64) * (1 << 32) + start
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    drafted, accepted = ev.runs()
    return {"window": ev.request[first], "start": start[first], "drafted": drafted, "accepted": accepted,
            "method": ev.method[first], "budget": ev.budget[first], "context": ev.context[first]}


def predict_runs(make_model, runs: dict, seeds: int = SEEDS) -> np.ndarray:
    """Mean accepted length of each run over `seeds` draws of the model (`make_model(seed)`)."""
    out = np.zeros(len(runs["start"]))
    if not len(out):
        return out
    # each window gets its own model request id, long enough for its last run
    win, inv = np.unique(runs["window"], return_inverse=True)
    end = np.zeros(len(win), np.int64)
    np.maximum.at(end, inv, runs["start"] + runs["drafted"] + 1)
    for s in range(seeds):
        m = make_model(s)
        for r, e in zip(range(len(win)), end.tolist()):
            m.begin(r, 0, int(e))
        out += m.verify(inv, runs["start"], np.maximum(runs["drafted"], 0), runs["context"], runs["budget"],
                        runs["method"])
    return out / seeds


def expected_rates(table: dict, runs: dict) -> np.ndarray:
    """Exact expected accepted length of each run under a rate table: sum over i <= drafted of
    prod over j < i of p_j (no sampling noise)."""
    m = RateAcceptance(table)
    out = np.zeros(len(runs["start"]))
    kmax = int(max(runs["drafted"].max(initial=0), 1))
    for mm, bb in {(int(x), int(y)) for x, y in zip(runs["method"].tolist(), runs["budget"].tolist())}:
        p = m.rates(mm, bb)
        p = np.concatenate([p, np.full(kmax - len(p), p[-1])]) if len(p) < kmax else p[:kmax]
        cum = np.concatenate([[0.0], np.cumsum(np.cumprod(p))])
        sel = (runs["method"] == mm) & (runs["budget"] == bb)
        out[sel] = cum[np.maximum(runs["drafted"][sel], 0)]
    return out


def group_errors(runs: dict, predicted: np.ndarray) -> tuple[float, list[dict]]:
    """(runs-weighted mean |predicted - observed| / observed over (method, budget) groups, rows)."""
    from spsim.plan import DraftMethod

    rows, num, den = [], 0.0, 0
    for m, b in sorted({(int(x), int(y)) for x, y in zip(runs["method"].tolist(), runs["budget"].tolist())}):
        sel = (runs["method"] == m) & (runs["budget"] == b) & (runs["drafted"] > 0)
        if not sel.any():
            continue
        obs, pred = float(runs["accepted"][sel].mean()), float(predicted[sel].mean())
        err = abs(pred - obs) / max(obs, 1e-9)
        rows.append({"method": DraftMethod(m).label, "budget": b, "runs": int(sel.sum()),
                     "observed_mean_accepted": obs, "predicted_mean_accepted": pred, "relative_error": err})
        num, den = num + err * sel.sum(), den + int(sel.sum())
    return (num / den if den else math.nan), rows


def rates_loglik(table: dict, ev) -> float:
    """Held-out log-likelihood per informative token of a rate table."""
    m = RateAcceptance(table)
    inf = ev.informative()
    if not inf.any():
        return math.nan
    p = np.array([m.rates(int(mm), int(bb))[min(int(j), len(m.rates(int(mm), int(bb))) - 1)]
                  for mm, bb, j in zip(ev.method[inf].tolist(), ev.budget[inf].tolist(), ev.draft_pos[inf].tolist())])
    a = ev.accepted[inf]
    return float(np.mean(np.where(a, np.log(p), np.log1p(-p))))


def position_support(table: dict, ev) -> tuple[bool, str]:
    """Whether every position the position model uses rests on >= MIN_TOKENS training tokens."""
    inf = ev.informative()
    thin = []
    for r in table["rates"]:
        from spsim.plan import DraftMethod

        sel = inf & (ev.method == int(DraftMethod.parse(r["method"]))) & (ev.budget == r["budget"])
        n = np.bincount(ev.draft_pos[sel], minlength=len(r["p"]))[:len(r["p"])]
        if (n < MIN_TOKENS).any():
            thin.append(f"{r['method']}/{r['budget']} position {int(np.argmax(n < MIN_TOKENS))} ({int(n.min())} tokens)")
    return (not thin), ("fewer than %d training tokens at %s" % (MIN_TOKENS, "; ".join(thin[:3]))) if thin else ""


def candidates(train, base_params) -> dict:
    """{kind: {"expect": runs -> expected accepted per run, "table" or "params", "report"}} fitted on `train`."""
    from .fit import fit as fit_latent

    out = {}
    for kind in ("constant", "position"):
        table = fit_rates(train, kind)
        out[kind] = {"table": table, "expect": (lambda t: lambda runs: expected_rates(t, runs))(table)}
    params, rep = fit_latent(train, base_params)
    out["latent"] = {"params": params, "report": rep,
                     "expect": lambda runs: predict_runs(lambda s: LatentAcceptance(params, seed=s), runs)}
    return out


def select(cands: dict, train, test, force: str | None = None) -> dict:
    """Score every candidate on the held-out runs and choose (`force`: the user's choice, scored
    like the others); returns the selection report."""
    from .fit import heldout_loglik

    runs = run_table(test) if test is not None and len(test) else None
    scores, excluded = {}, {}
    lat = cands["latent"]["report"]
    if not lat["converged"]:
        excluded["latent"] = (f"its fit ended at parameter bounds ({', '.join(lat['at_bounds'])})"
                              if lat["at_bounds"] else f"its fit did not converge ({lat['status']})")
    ok, why = position_support(cands["position"]["table"], train)
    if not ok:
        excluded["position"] = why
    for kind in CANDIDATES:
        row = {}
        if runs is not None and (runs["drafted"] > 0).any():
            err, groups = group_errors(runs, cands[kind]["expect"](runs))
            row.update({"relative_error": err, "groups": groups})
        if test is not None and len(test):
            row["loglik_per_token"] = (heldout_loglik(cands[kind]["params"], test) if kind == "latent"
                                       else rates_loglik(cands[kind]["table"], test))
        scores[kind] = row
    eligible = [k for k in CANDIDATES if k not in excluded]
    scored = runs is not None and all("relative_error" in scores[k] and np.isfinite(scores[k]["relative_error"])
                                      for k in eligible)
    if scored:
        chosen = eligible[0]
        for k in eligible[1:]:  # a more complex model must beat the one kept by the tolerance
            if scores[k]["relative_error"] < scores[chosen]["relative_error"] - TOLERANCE:
                chosen = k
        best = scores[chosen]["relative_error"]
        why = (f"{chosen}: held-out mean accepted length off by {best:.1%} (" + ", ".join(
            f"{k} {scores[k]['relative_error']:.1%}" for k in CANDIDATES) + f"); a more complex model is kept only "
            f"if it gains more than {TOLERANCE:.1%}")
    else:
        chosen = "latent" if "latent" in eligible else eligible[0]
        why = f"{chosen}: no held-out runs to score the candidates on (the latent model when it converged, else the simplest)"
    if force:
        chosen, why = force, f"{force}: chosen by --model (the automatic choice: {why})"
    if excluded:
        why += "; left out: " + "; ".join(f"{k} ({v})" for k, v in excluded.items())
    return {"chosen": chosen, "reason": why, "candidates": scores, "excluded": excluded,
            "heldout_runs": 0 if runs is None else int(len(runs["start"]))}
