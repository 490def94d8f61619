"""What an acceptance model implies: curves for `show`, presets' stated figures, and tests.

Two ways, both deterministic for a seed:
- `fixed_k_runs`: requests decoded to the end with fixed-k draft runs through the model's own
  `verify` (runs start where the previous verification left off, as in serving: a run after a
  rejection starts next to a hard token, which matters when spans persist);
- `position_curve`: per draft position j, P(token j accepted) and P(tokens 0..j all accepted), from
  runs started at `fixed_k_runs`' verify points with k = kmax.
"""

from __future__ import annotations

import numpy as np

from spsim.events import FIELDS


def fixed_k_runs(model, k: int, n_requests: int = 2000, output_tokens: int = 128, context: int = 32768,
                 budget: int = 3277, method: int = 1, rid0: int = 0) -> dict:
    """Decode `n_requests` requests of `output_tokens` with draft runs of k (capped so a verification
    never passes the output length). Returns per-verification arrays and summary rates."""
    rid = np.arange(rid0, rid0 + n_requests)
    for r in rid.tolist():
        model.begin(r, context, output_tokens)
    pos = np.zeros(n_requests, np.int64)
    ctx = np.full(n_requests, context, np.int64)
    drafted_all, accepted_all = [], []
    while True:
        live = pos < output_tokens
        if not live.any():
            break
        idx = np.flatnonzero(live)
        d = np.minimum(k, output_tokens - pos[idx] - 1)  # the verification emits one more token
        a = model.verify(rid[idx], pos[idx], d, ctx[idx] + pos[idx], budget, method)
        drafted_all.append(d)
        accepted_all.append(a)
        pos[idx] += a + 1
    for r in rid.tolist():
        model.end(r)
    d = np.concatenate(drafted_all)
    a = np.concatenate(accepted_all)
    full = d == k
    return {
        "k": k,
        "acceptance_fraction": float((a[full] / k).mean()) if full.any() else float("nan"),  # E[accepted/k]
        "draft_acceptance_rate": float(a.sum() / max(d.sum(), 1)),
        "mean_accepted_per_verify": float(a.mean()),
        "verifies": int(len(a)),
        "drafted": d,
        "accepted": a,
    }


def expected_accepted(model, ks, **kw) -> dict:
    """E[accepted/k] and E[accepted] for each k (fixed-k decoding)."""
    out = {"k": [], "acceptance_fraction": [], "mean_accepted": []}
    for k in ks:
        r = fixed_k_runs(model, int(k), **kw)
        full = r["drafted"] == k
        out["k"].append(int(k))
        out["acceptance_fraction"].append(r["acceptance_fraction"])
        out["mean_accepted"].append(float(r["accepted"][full].mean()))
    return out


def position_curve(model, kmax: int, n_requests: int = 2000, output_tokens: int = 128, context: int = 32768,
                   budget: int = 3277, method: int = 1, rid0: int = 0) -> dict:
    """Per draft position j < kmax: conditional acceptance P(j accepted | 0..j-1 accepted) and
    survival P(0..j accepted), over verification points of fixed-kmax decoding."""
    r = fixed_k_runs(model, kmax, n_requests, output_tokens, context, budget, method, rid0)
    a = r["accepted"][r["drafted"] == kmax]
    j = np.arange(kmax)
    reach = (a[:, None] >= j).mean(axis=0)  # P(0..j-1 accepted): reached position j
    surv = (a[:, None] > j).mean(axis=0)  # P(0..j accepted)
    return {"j": j.tolist(), "survival": surv.tolist(),
            "conditional": np.divide(surv, reach, out=np.zeros(kmax), where=reach > 0).tolist()}


def sample_events(model, k: int, n_requests: int, output_tokens: int = 128, context: int = 32768,
                  budget: int = 3277, method: int = 1, rid0: int = 0) -> dict[str, np.ndarray]:
    """Events a fixed-k decoder would record under `model` (for tests and demos)."""
    cols = {f: [] for f in FIELDS}
    rid = np.arange(rid0, rid0 + n_requests)
    pos = np.zeros(n_requests, np.int64)
    for r in rid.tolist():
        model.begin(r, context, output_tokens)
    while (pos < output_tokens).any():
        i = np.flatnonzero(pos < output_tokens)
        d = np.minimum(k, output_tokens - pos[i] - 1)
        c = context + pos[i]
        a = model.verify(rid[i], pos[i], d, c, budget, method)
        for j in range(int(d.max(initial=0))):
            h = d > j
            ii = i[h]
            cols["request"].append(rid[ii])
            cols["out_pos"].append(pos[ii] + j)
            cols["draft_pos"].append(np.full(len(ii), j))
            cols["accepted"].append(a[h] > j)
            cols["entropy"].append(model.draft_entropy(rid[ii], pos[ii], np.full(len(ii), j), c[h], budget, method))
            cols["method"].append(np.full(len(ii), method))  # events carry theirs, one per event
            cols["budget"].append(np.full(len(ii), budget))
            cols["context"].append(c[h])
        pos[i] += a + 1
    for r in rid.tolist():
        model.end(r)
    return {f: np.concatenate(v) for f, v in cols.items()}
