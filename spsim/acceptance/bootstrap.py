"""How sure a fitted preset is: a bootstrap interval for the mean accepted length per draft length k.

Resampling follows how the events were gathered: groups (texts, datasets: the label field the
user names, else each request window is its own group) with replacement, then request windows
within each drawn group with replacement. Each replicate refits the acceptance rates (per position;
one pooled rate when the constant model was selected) from its windows' informative tokens
(closed form: counts), and the replicate's mean accepted length
for k drafts, sum over i <= k of prod over j < i of p_j, is taken relative to the full data's. The
2.5/97.5 % quantiles of that ratio, times the selected model's own curve, give the interval
(exact for the rate models; for the latent model it carries the level's uncertainty, not that of
its spread parameters).

Two further figures come from the same replicates:
- `new_group`: the interval a *new* group's mean is expected in (a text the fit never saw). With
  G groups the replicates' variance is about (between-group + within-group / n) / G, a new
  group's mean has about G times that, plus the estimate's own: the half-width times sqrt(G + 1).
  Only where the groups are labels (not request windows) and G >= 2.
- `requests_for`: how many requests to record for a target half-width, from a bootstrap over
  request windows alone (the half-width falls as 1 / sqrt(requests)).
"""

from __future__ import annotations

import math

import numpy as np

KS = tuple(range(1, 9))
TARGETS = (0.10, 0.05, 0.02)
REPLICATES = 400


def window_stats(ev, max_pos: int = 16):
    """(cells [(method, budget)], windows' (W, cells, J) token and accepted counts, window cell,
    window ids in order)."""
    inf = ev.informative()
    j = np.minimum(ev.draft_pos, max_pos - 1)
    cells = sorted({(int(m), int(b)) for m, b in zip(ev.method.tolist(), ev.budget.tolist())})
    cidx = {c: i for i, c in enumerate(cells)}
    ci = np.array([cidx[(int(m), int(b))] for m, b in zip(ev.method.tolist(), ev.budget.tolist())], np.int64)
    wins, w = np.unique(ev.request, return_inverse=True)
    n = np.zeros((len(wins), len(cells), max_pos))
    a = np.zeros_like(n)
    np.add.at(n, (w[inf], ci[inf], j[inf]), 1.0)
    np.add.at(a, (w[inf], ci[inf], j[inf]), ev.accepted[inf].astype(float))
    return cells, n, a, wins


def curve(n: np.ndarray, a: np.ndarray, ks=KS, pooled: bool = False) -> np.ndarray:
    """Mean accepted length for each k from per-position counts (..., J) -> (..., len(ks)); a
    position never reached takes the last reached one's rate. `pooled`: one rate over positions
    (the constant model)."""
    if pooled:
        n, a = np.broadcast_to(n.sum(-1, keepdims=True), n.shape), np.broadcast_to(a.sum(-1, keepdims=True), a.shape)
    p = (a + 0.5) / (n + 1.0)
    reached = n > 0
    last = np.maximum.accumulate(np.where(reached, np.arange(n.shape[-1]), 0), axis=-1)
    p = np.take_along_axis(p, last, axis=-1)
    surv = np.cumprod(p, axis=-1)
    cum = np.cumsum(surv, axis=-1)
    return cum[..., [k - 1 for k in ks]]


def _replicate_weights(groups: np.ndarray, rng, two_stage: bool) -> np.ndarray:
    """How often each window is drawn in one replicate."""
    W = len(groups)
    if not two_stage:
        return np.bincount(rng.integers(0, W, W), minlength=W).astype(float)
    uniq = np.unique(groups)
    members = [np.flatnonzero(groups == g) for g in uniq]
    wts = np.zeros(W)
    for g in rng.integers(0, len(uniq), len(uniq)).tolist():
        m = members[g]
        np.add.at(wts, m[rng.integers(0, len(m), len(m))], 1.0)
    return wts


def _ratios(n, a, groups, two_stage: bool, replicates: int, seed: int, ks, pooled: bool) -> np.ndarray:
    """(replicates, cells, len(ks)) replicate curve / full-data curve."""
    full = curve(n.sum(0), a.sum(0), ks, pooled)
    rng = np.random.default_rng(seed)
    out = np.empty((replicates, n.shape[1], len(ks)))
    for r in range(replicates):
        w = _replicate_weights(groups, rng, two_stage)
        out[r] = curve(np.tensordot(w, n, 1), np.tensordot(w, a, 1), ks, pooled) / np.maximum(full, 1e-12)
    return out


def interval(ev, labels, model_curve, replicates: int = REPLICATES, seed: int = 0, ks=KS,
             kind: str = "position") -> dict:
    """The preset's `interval` block. `labels`: a group label per event (None: request windows);
    `model_curve(method, budget, context, ks)`: the selected model's mean accepted length per k;
    `kind`: the selected model (`constant` refits one rate per replicate, the others per position)."""
    pooled = kind == "constant"
    from spsim.plan import DraftMethod

    cells, n, a, wins = window_stats(ev)
    if labels is None:
        groups, by = np.arange(len(wins)), "request window"
    else:
        first = np.zeros(len(wins), np.int64)
        w = np.unique(ev.request, return_inverse=True)[1]
        first[w[::-1]] = np.arange(len(w))[::-1]  # each window's first event
        groups = np.unique(np.asarray([str(x) for x in np.asarray(labels, object)[first]]), return_inverse=True)[1]
        by = "label"
    G = len(np.unique(groups))
    two_stage = labels is not None
    rat = _ratios(n, a, groups, two_stage, replicates, seed, ks, pooled)
    rat_w = _ratios(n, a, np.arange(len(wins)), False, replicates, seed + 1, ks, pooled) if two_stage else rat
    lo_r, hi_r = np.quantile(rat, [0.025, 0.975], axis=0)
    lo_w, hi_w = np.quantile(rat_w, [0.025, 0.975], axis=0)
    rows = []
    for c, (m, b) in enumerate(cells):
        sel = (ev.method == m) & (ev.budget == b)
        ctx = int(np.median(ev.context[sel]))
        mean = np.asarray(model_curve(m, b, ctx, ks), float)
        hw = (hi_r[c] - lo_r[c]) / 2.0
        win_in_cell = int((n[:, c].sum(1) > 0).sum())
        k_ref = int(np.bincount(ev.draft_pos[sel]).size)  # the longest recorded draft
        kr = ks.index(min(max(k_ref, ks[0]), ks[-1]))
        hw_w = float((hi_w[c, kr] - lo_w[c, kr]) / 2.0)
        row = {"method": DraftMethod(m).label, "budget": b, "context": ctx, "k": list(ks),
               "mean_accepted": [round(float(x), 4) for x in mean],
               "lo": [round(float(x), 4) for x in mean * lo_r[c]], "hi": [round(float(x), 4) for x in mean * hi_r[c]],
               "half_width_rel": [round(float(x), 4) for x in hw], "windows": win_in_cell,
               "requests_for": {"k": ks[kr], "half_width_rel_now": round(hw_w, 4), **{
                   f"{t:.0%}": int(math.ceil(win_in_cell * (hw_w / t) ** 2)) for t in TARGETS}}}
        if two_stage and G >= 2:
            hw_new = hw * math.sqrt(G + 1)
            row["new_group"] = {"half_width_rel": [round(float(x), 4) for x in hw_new],
                                "lo": [round(float(x), 4) for x in mean * (1 - hw_new)],
                                "hi": [round(float(x), 4) for x in mean * (1 + hw_new)]}
        rows.append(row)
    return {"by": by, "groups": int(G), "replicates": replicates, "seed": seed, "level": 0.95, "cells": rows}


def cell_for(block: dict, method: str, budget: int) -> dict | None:
    """The interval row for (method, budget): exact, else the same method's nearest budget, else the first."""
    cells = block.get("cells") or []
    same = [c for c in cells if c["method"] == method]
    if not cells:
        return None
    if not same:
        return cells[0]
    return min(same, key=lambda c: (abs(math.log(max(c["budget"], 1) / max(budget, 1))), c["budget"]))


def half_width_at(cell: dict, k: float, new_group: bool = True) -> float:
    """Relative half-width at draft length k (interpolated), the new-group one where present."""
    src = cell["new_group"]["half_width_rel"] if new_group and "new_group" in cell else cell["half_width_rel"]
    return float(np.interp(k, cell["k"], src))
