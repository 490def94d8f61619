"""Per-request smoothed acceptance, learnt from verification outcomes (shared by policies)."""

from __future__ import annotations

import numpy as np


class AcceptanceEMA:
    """Each request's per-token acceptance probability, from exponentially decayed counts.

    A verification with d drafts and a accepted is a runs of successes ended by a failure when
    a < d: it adds a successes to a + [a < d] trials. The estimate is successes / trials over
    decayed counts (the maximum-likelihood rate of the truncated geometric), not an average of
    per-cycle ratios, which short cycles bias low (one early rejection in a 2-draft cycle reads
    as 0.5) and which then talk a policy into ever shorter drafts.

    Counts start from `prior` worth `strength` trials. A request with no outcome yet starts from
    the workload's pooled counts: otherwise a request whose first decision is "no speculation"
    would never produce an outcome and never learn. For the same reason evidence ages while a
    request does not speculate: `get(ids, pos)` relaxes the counts of a request that emitted
    tokens without a verification outcome since it was last looked at towards the pooled rate, by
    `1 - weight` per such token, so after a hard span it tries drafting again.

    `trials` counts the pooled trials of real outcomes (not decayed, the prior not included): how
    much evidence the pooled rate rests on (a policy that starts from the prior tests it while
    this is small: `aspire`'s `explore`).
    """

    def __init__(self, weight: float, prior: float, strength: float = 4.0, population_weight: float = 0.02):
        self.keep = 1.0 - weight
        self.pkeep = 1.0 - population_weight
        self.pop = [prior * strength, strength]  # successes, trials
        self.strength = strength
        self.counts: dict[int, list[float]] = {}
        self.seen: dict[int, int] = {}  # output position at the last look, until an outcome arrives
        self.trials = 0  # pooled trials of real outcomes so far

    def get(self, ids: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
        c, (ps, pt) = self.counts, self.pop
        default = ps / pt
        if pos is not None:
            seen = self.seen
            for i, p in zip(ids.tolist(), pos.tolist()):
                p0 = seen.get(i)
                if p0 is not None and p > p0 and (x := c.get(i)):
                    self.relax(x, p - p0, default)  # tokens emitted without speculating since the last look
                seen[i] = p
        return np.fromiter((x[0] / x[1] if (x := c.get(i)) else default for i in ids.tolist()), np.float64, len(ids))

    def update(self, ids: np.ndarray, drafted: np.ndarray, accepted: np.ndarray) -> None:
        pop, c, seen, learn = self.pop, self.counts, self.seen, self.learn
        trials = 0
        for i, d, a in zip(ids.tolist(), drafted.tolist(), accepted.tolist()):
            seen.pop(i, None)  # an outcome: the tokens since the last look were speculated
            x = c.get(i)
            if x is None:
                x = c[i] = self.fresh(pop)
            trials += learn(x, pop, d, a)
        self.trials += trials

    # ---- the arithmetic on counts ([successes, trials] lists), for `get`, `update` and planners
    # that replay them ahead on copies (policies/stretch.py): written once, so the same bits
    def fresh(self, pool: list[float]) -> list[float]:
        """A request's counts at its first outcome: the pooled rate, worth `strength` trials."""
        return [pool[0] / pool[1] * self.strength, self.strength]

    def learn(self, x: list[float] | None, pool: list[float] | None, d: int, a: int) -> int:
        """One outcome (a accepted of d drafts) into a request's counts x and the pooled counts
        (either None: left out); returns its trials."""
        trials = a + (a < d)
        if x is not None:
            keep = self.keep
            x[0] = keep * x[0] + a
            x[1] = keep * x[1] + trials
        if pool is not None:
            pkeep = self.pkeep
            pool[0] = pkeep * pool[0] + a
            pool[1] = pkeep * pool[1] + trials
        return trials

    def relax(self, x: list[float], tokens: int, default: float) -> None:
        """Counts x after `tokens` tokens emitted with no outcome, towards the pooled rate `default`."""
        w = self.keep ** tokens
        x[0] = w * x[0] + (1.0 - w) * default * self.strength
        x[1] = w * x[1] + (1.0 - w) * self.strength

    def rate_after(self, c0: float, c1: float, d: int, a: int) -> float:
        """The estimate of counts (c0, c1) after one outcome: a accepted of d drafts."""
        keep = self.keep
        return (keep * c0 + a) / (keep * c1 + (a + (a < d)))

    def rates_after(self, c0: float, c1: float, cap: int) -> list[float]:
        """`rate_after` for every outcome a cycle of up to cap drafts can have: b accepted of more
        than b (b = 0..cap-1), then all b accepted (b = 1..cap)."""
        k0, k1 = self.keep * c0, self.keep * c1
        return [(k0 + b) / (k1 + (b + 1)) for b in range(cap)] + [(k0 + b) / (k1 + b) for b in range(1, cap + 1)]

    def copy_for(self, ids: list[int]) -> "AcceptanceEMA":
        """A copy whose `get` and `update` on these requests give what this one's would (their
        counts and last looks, the pool's counts and trials), sharing no state with it."""
        new = object.__new__(AcceptanceEMA)
        new.__dict__.update(self.__dict__)
        c, seen = self.counts, self.seen
        new.counts = {i: list(x) for i in ids if (x := c.get(i)) is not None}
        new.seen = {i: p for i in ids if (p := seen.get(i)) is not None}
        new.pop = list(self.pop)
        return new

    def drop(self, rid: int) -> None:
        self.counts.pop(rid, None)
        self.seen.pop(rid, None)

    # ---- asking ahead (an executor that plans many passes at once): pure, the pool aside
    def own(self, ids: list[int]) -> list:
        """Each request's own counts (a copy), or None where it has no outcome yet (its estimate,
        and its first update, come from the pool's counts, which every request moves)."""
        c = self.counts
        return [(x[0], x[1]) if (x := c.get(i)) else None for i in ids]

    def after(self, counts: list, drafted: list[int], accepted: list[int]) -> list:
        """`own` counts after one more outcome each, as `learn` leaves them (inline: asked often)."""
        keep = self.keep
        return [(keep * x0 + a, keep * x1 + (a + (a < d))) for (x0, x1), d, a in zip(counts, drafted, accepted)]

