"""Stop a probe as soon as its SLO can no longer be met (exact early stopping).

While a probe runs, every request's latencies have lower bounds that only grow:
- TTFT: the first token's time minus the arrival once known; before it, the time its replica's
  state is current to (`Replica.clock`, the start of the pass or segment in flight: everything that
  ended before it is applied) minus the arrival, for requests already routed;
- TPOT: exact once finished; after the first token, (replica clock - first token) / (output - 1),
  since the last token comes after the replica clock;
- E2EL: exact once finished, else replica clock - arrival.
A percentile term `pQ <= B` over the N requests it will count (numpy's linear percentile) fails
for certain once K requests have a lower bound above B with K >= N - floor(Q/100 * (N - 1)): the
order statistic at floor(Q/100 * (N - 1)) is then above B and the interpolated percentile is at
least that. N is not known before the end (rejections): the number of requests not rejected so
far bounds it from above, and the condition only gets harder with N, so using that bound is safe.
A mean term fails once the sum of lower bounds over that bound on N exceeds B; `attain=` once the
requests already missing (rejected, or a lower bound above a per-request bound) leave fewer than
`attain` of all requests able to meet it. ITL terms are not watched (ITL is per emission).

A probe stopped this way fails: the full run would have failed too (no approximation). A run the
watch never stops is the same run as without it (the watch only reads state)."""

from __future__ import annotations

import math

import numpy as np

from spsim.slo import SLO


class SLOWatch:
    """`watch(table, replicas, now)` for `spsim.simulator.engine.simulate`: a string naming the term
    that can no longer be met, else None."""

    def __init__(self, slo: SLO, output_tokens: np.ndarray):
        self.slo = slo
        self.out = np.asarray(output_tokens, np.int64)
        self.multi = self.out > 1  # requests with a TPOT (one-token outputs have none)
        self.terms = [t for t in slo.run_level() if t.metric != "itl"]
        self.per_request = [t for t in slo.per_request() if t.metric != "itl"]
        self.active = bool(self.terms or self.per_request)
        self.checks = 0

    def __call__(self, table, replicas, now: float) -> str | None:
        self.checks += 1
        n = table.n
        rep = table.replica
        routed = rep >= 0
        clocks = np.array([min(float(r.clock), now) for r in replicas] + [0.0])
        c = clocks[rep]  # rep == -1 (not arrived): the trailing 0, masked below
        rejected = table.reject > 0
        arr, first, fin = table.arrival, table.t_first, table.t_finish
        has_first, has_fin = ~np.isnan(first), ~np.isnan(fin)
        lb = {}
        since_arrival = np.where(routed, np.maximum(c - arr, 0.0), 0.0)
        lb["ttft"] = np.where(has_first, first - arr, since_arrival)
        lb["e2el"] = np.where(has_fin, fin - arr, since_arrival)
        with np.errstate(invalid="ignore", divide="ignore"):
            run_tpot = np.where(has_first & routed, np.maximum(c - first, 0.0) / np.maximum(self.out - 1, 1), 0.0)
            lb["tpot"] = np.where(has_fin, (fin - first) / np.maximum(self.out - 1, 1), run_tpot)
        for t in self.terms:
            keep = ~rejected & (self.multi if t.metric == "tpot" else True)
            n_up = int(keep.sum())
            if n_up == 0:
                continue
            v = lb[t.metric][keep]
            if t.stat == "mean":
                if v.sum() / n_up > t.bound_s:
                    return f"{t.text()}: the mean of what is already known exceeds the bound"
                continue
            q = 50.0 if t.stat == "median" else t.percentile
            over = int((v > t.bound_s).sum())
            # floor of numpy's virtual index, rounded down where it is an integer up to float error
            need = n_up - max(0, math.floor(q / 100.0 * (n_up - 1) - 1e-9))
            if over >= need:
                return (f"{t.text()}: {over:,} requests already over {_dur(t.bound_s)} of at most {n_up:,} "
                        f"(the {t.stat} cannot be met)")
        if self.per_request:
            bad = rejected.copy()
            for t in self.per_request:
                bad |= ~rejected & (lb[t.metric] > t.bound_s) & (self.multi if t.metric == "tpot" else True)
            missing = int(bad.sum())
            if n - missing < self.slo.attain * n - 1e-9:
                return (f"attain={self.slo.attain:.0%}: {missing:,} of {n:,} requests already miss "
                        f"{','.join(t.text() for t in self.per_request)}")
        return None


def _dur(s: float) -> str:
    return f"{s * 1e3:g} ms" if s < 1 else f"{s:g} s"
