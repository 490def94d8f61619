"""Rate-table acceptance: the simple candidates `spsim acceptance fit` sets against the latent model.

`constant`: one acceptance rate per (method, budget); `position`: one per (method, budget, draft
position), the last fitted position's rate holding beyond it. Drafted tokens are accepted
independently, with draws keyed by (seed, request, output position) as every model here (no
call-order randomness). A (method, budget) the table lacks takes the same method's rate at the
nearest budget (in log budget), else the rate pooled over everything: a replay at another
setting says nothing new, it reuses the closest evidence.

Rates are fitted from informative tokens (up to and including each run's first rejection) with
half a pseudo-count each way, so no rate is exactly 0 or 1.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logit as _logit

from spsim.plan import DraftMethod

from . import entropy as ent
from .store import KeyedDraws, PositionStore, accept_draws

KINDS = ("constant", "position")


def fit_rates(ev, kind: str, max_pos: int = 16) -> dict:
    """{"kind", "rates": [{"method", "budget", "p": [...]}], "overall"} from events' informative tokens."""
    if kind not in KINDS:
        raise ValueError(f"rate model kind {kind!r} (known: {', '.join(KINDS)})")
    inf = ev.informative()
    m, b, j, a = ev.method[inf], ev.budget[inf], np.minimum(ev.draft_pos[inf], max_pos - 1), ev.accepted[inf]
    rows = []
    for mm, bb in sorted({(int(x), int(y)) for x, y in zip(m.tolist(), b.tolist())}):
        sel = (m == mm) & (b == bb)
        if kind == "constant":
            p = [(a[sel].sum() + 0.5) / (sel.sum() + 1.0)]
        else:  # positions up to the last one reached in this cell
            n = np.bincount(j[sel], minlength=int(j[sel].max()) + 1)
            k = np.bincount(j[sel], weights=a[sel], minlength=len(n))
            p = ((k + 0.5) / (n + 1.0)).tolist()
        rows.append({"method": DraftMethod(mm).label, "budget": bb, "p": [float(x) for x in p],
                     "tokens": int(sel.sum())})
    overall = float((a.sum() + 0.5) / (len(a) + 1.0))
    return {"kind": kind, "rates": rows, "overall": overall}


class RateAcceptance(KeyedDraws):
    """AcceptanceModel over a fitted rate table (`fit_rates`), keyed draws as `simple.py`'s."""

    def __init__(self, table: dict, auc: float = 0.64, entropy_median: float = 0.6, entropy_sigma: float = 1.0,
                 seed: int = 0, name: str = "rates"):
        self.table, self.name, self.seed = table, name, int(seed)
        self.auc, self.entropy_median, self.entropy_sigma = float(auc), float(entropy_median), float(entropy_sigma)
        self._shift = ent.shift_for_auc(self.auc, self.entropy_sigma)
        self._store = PositionStore(2, self._build)
        self._cells = {(int(DraftMethod.parse(r["method"])), int(r["budget"])): np.asarray(r["p"], float)
                       for r in table["rates"]}
        self._overall = float(table["overall"])
        self._thr: dict[tuple[int, int], np.ndarray] = {}  # (method, budget) -> logit(p_j), 64+ positions

    def _build(self, rid: int, n: int):
        return accept_draws(self.seed, rid, n)

    def rates(self, method: int, budget: int) -> np.ndarray:
        """The per-position rates used for (method, budget): the cell, else the same method at the
        nearest budget, else the pooled rate."""
        p = self._cells.get((method, budget))
        if p is None:
            same = [b for (m, b) in self._cells if m == method]
            if same:
                near = min(same, key=lambda b: (abs(math.log(max(b, 1) / max(budget, 1))), b))
                p = self._cells[(method, near)]
            else:
                p = np.array([self._overall])
        return p

    def _thresholds(self, method: int, budget: int, k: int) -> np.ndarray:
        t = self._thr.get((method, budget))
        if t is None or len(t) < k:
            p = self.rates(method, budget)
            full = np.concatenate([p, np.full(max(k, 64) - len(p), p[-1])]) if len(p) < max(k, 64) else p
            t = self._thr[(method, budget)] = _logit(full)
        return t[:k]

    def _row_thresholds(self, method, budget, k: int) -> np.ndarray:
        """(rows, k) logit thresholds, one lookup per distinct (method, budget); (1, k) for one
        method and budget."""
        if np.ndim(method) == 0 and np.ndim(budget) == 0:
            return self._thresholds(int(method), int(budget), k)[None, :]
        keys = np.stack([np.asarray(method, np.int64), np.asarray(budget, np.int64)], 1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        tab = np.stack([self._thresholds(int(m), int(b), k) for m, b in uniq.tolist()])
        return tab[inv.reshape(-1)]

    def verify(self, rid, out_pos, drafted, context, budget, method) -> np.ndarray:
        drafted = np.asarray(drafted, np.int64)
        k = max(drafted.tolist(), default=0) + 1  # one spare column: every row fails somewhere
        if k <= 1:
            return np.zeros(len(drafted), np.int64)
        j = np.arange(k)
        return self._accepted(self._rows(rid, out_pos, j) >= self._row_thresholds(method, budget, k), j, drafted)

    def draft_entropy(self, rid, out_pos, draft_pos, context, budget, method) -> np.ndarray:
        draft_pos = np.asarray(draft_pos, np.int64)
        at = self._at(rid, out_pos, draft_pos)
        k = max(draft_pos.tolist(), default=0) + 1
        thr = np.take_along_axis(self._row_thresholds(method, budget, k), draft_pos[:, None], 1)[:, 0]
        acc = self._store.bufs[0][at] < thr
        return ent.signal(acc, self._store.bufs[1][at], self.entropy_median, self.entropy_sigma, self._shift)
