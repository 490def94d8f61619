"""`aspire:replan=pass` decided for many passes at once (`Aspire.fast_plan`), for an executor
that advances a fixed batch of decode requests many passes per event (the simulator's fast path).

Asked every pass, ASPIRE's answer for a request is the k maximising its expected tokens per unit
of cycle cost, from its smoothed acceptance, its context and the batch size. While a request
drafts none of these move unless its estimate comes from the pool (no outcome yet, or a
relaxation due after a plain pass), so a request with its own estimate keeps its answer through
its cycle: the whole cycle is decided at once, and the next one too (its estimate after every
outcome of this one is one of 2 cap + 1 values: all decided in the same call). A request answering
from the pool is decided at the pool's rate while that cannot change (until the pass after the
next verification with drafts: planned, or possible from a request not planned that far), in pass
order (`entropy_stretch` has the same structure and the reasons). A plain answer holds while the
rate cannot change it, or while even acceptance 1 would not pay for a draft. Exploration (answers
that depend on how many trials the pool holds) is left to the step path.
"""

from __future__ import annotations

import numpy as np

from .base import DecodeView
from .stretch import Stretch, StretchBase


class AspireStretch(StretchBase):
    """Plans a stretch for one `Aspire` policy asked every pass (reads its state, changes none)."""

    CHECK_AHEAD = 64  # passes a plain answer is checked ahead at once

    def _cycle_table(self, view: DecodeView, H: int, k_max: int) -> None:
        """Each request's cycle cost for k = 0..k_max drafts at contexts context + 0..H-1: the
        step path's grid and arithmetic (`cycle_costs`), in one call."""
        from .aspire import cycle_costs

        r = len(view.ids)
        ctx = (view.context[:, None] + np.arange(H, dtype=np.int64)).ravel()
        k = len(ctx)
        rows = DecodeView(ids=np.repeat(view.ids, H), context=ctx, drafted=np.zeros(k, np.int64),
                          remaining=np.zeros(k, np.int64), committed=np.zeros(k, np.int64),
                          budget=view.budget, method=view.method,
                          last_entropy=np.full(k, np.nan), sum_entropy=np.zeros(k), num_decode=view.num_decode,
                          prefill_tokens=view.prefill_tokens, max_draft=view.max_draft)
        self._ks, cyc = cycle_costs(self.pol.ctx.cost, rows, k_max)
        self._kp1, self._k0 = self._ks[None, :] + 1, int(self._ks[0])  # ks: k_min..k_max in order
        self._cyc = cyc.reshape(r, H, len(self._ks))

    def _answers(self, prior: np.ndarray, rows, cix: np.ndarray) -> list[int]:
        """The k each (column, context offset) row is given at these estimates (`Aspire.targets`:
        argmax of expected tokens per unit of cycle cost). `expected_tokens`' operations in its
        order, its exponents and the k of each argmax (ks is a range) made once per plan."""
        a = np.minimum(np.maximum(prior, 0.0), 0.999999)[:, None]
        rate = (1.0 - a ** self._kp1) / (1.0 - a) / self._cyc[rows, cix]
        return (rate.argmax(axis=1) + self._k0).tolist()

    def plan(self, view: DecodeView, n: int, entropy, verify, gate: bool, pages=None) -> Stretch | None:
        pol = self.pol
        if pol.exploring:
            return None
        acc = pol.acc
        st, own, fold = self._begin(view, n, verify, gate, pages)
        com, ctx, out, d, md, r = self._com, self._ctx, self._out, self._d, self._md, len(st.ids)
        counts, pool, relax, pending = self._counts, self._pool, self._relax, self._pending
        start, done, heap, ctx0, rec, hz = self._start, self._done, self._heap, list(ctx), st.cycles, n
        self._cycle_table(view, n + 2 * md + 3, pol.k_max or md)  # + drafts held, + the next cycle's candidates
        # a cycle decided at the pool's rate: [first pass, drafts then, latest answer]
        opened: list = [[0, d[j], 0] if counts[j] is None else None for j in range(r)]

        def take(j, x0, k, x, first=None):
            """Column j's cycle from its next pass (or `first`), x0 drafts held, answer k, to a
            verification of x."""
            nonlocal hz
            f = start[j] if first is None else first
            v = f + x - x0
            a_ = self._outcome(j, x) if x else 0
            rec[j].append((f, v, x0, com[j], k, None))
            hz = self._closed(j, f, v, x0, x, a_, hz)
            return a_

        def whole(J):
            """This cycle of each column in J and the next (its estimate after each outcome b of
            this one, of more drafts or of exactly b, answered in the same call)."""
            P, rows, cix, base = [], [], [], []
            for j in J:
                c0, c1 = counts[j]
                cap = min(md, out[j] - com[j] - 1)
                cx = ctx[j] - ctx0[j]
                base.append(len(P))
                P.append(c0 / c1)
                P.extend(acc.rates_after(c0, c1, cap))  # b accepted of more, then all b accepted
                if len(J) > 1:
                    rows += [j] * (2 * cap + 1)
                    cix += [cx] + list(range(cx + 1, cx + cap + 1)) + list(range(cx + 2, cx + cap + 2))
            if len(J) == 1:  # one column (the common case): its context offsets from a cached pattern
                K = self._answers(np.array(P), J[0], (ctx[J[0]] - ctx0[J[0]]) + self._offsets((len(P) - 1) // 2))
            else:
                K = self._answers(np.array(P), np.array(rows), np.array(cix))
            for q, j in enumerate(J):
                r0, x0 = base[q], d[j]
                cap = min(md, out[j] - com[j] - 1)
                k = K[r0]
                x = max(x0, min(k, cap))
                b = take(j, x0, k, x)
                if x == 0 or done[j] or start[j] >= hz:
                    continue
                r1 = r0 + 1 + b if b < x else r0 + cap + b
                k = K[r1]
                take(j, 0, k, min(k, md, out[j] - com[j] - 1))

        def whole_cycles(J):
            while J:
                whole(J)
                J = [j for j in J if not done[j] and start[j] < hz and own(j)]

        def pooled(A, P):
            """Columns in A (no outcome yet) from pass P at the pool's rate, while it cannot change."""
            nonlocal hz
            pr = pool[0] / pool[1]
            Pc = heap[0][0] + 1 if heap else hz
            for j in range(r):
                if not done[j] and P < start[j] < Pc and not own(j):
                    Pc = start[j] + 1
            K = self._answers(np.full(len(A), pr), np.array(A), np.array([ctx[j] - ctx0[j] for j in A]))
            plan = []
            for j, k in zip(A, K):
                x0 = d[j]
                x = max(x0, min(k, md, out[j] - com[j] - 1))
                plan.append((j, k, x0, x))
                if x > 0 and P + x - x0 + 1 < Pc:
                    Pc = P + x - x0 + 1
            for j, k, x0, x in plan:
                o = opened[j]
                if x == 0:  # plain: as long as the answer holds
                    hz = self._plain(j, P, Pc, hz, pr, ctx0)
                    opened[j] = [start[j], 0, 0]
                elif P + x - x0 < Pc:  # the whole cycle
                    take(j, o[1], k, x, first=o[0])
                    opened[j] = None
                else:  # drafting through pass Pc - 1, asked again on Pc
                    d[j] = x0 + Pc - P
                    start[j] = Pc
                    o[2] = k

        whole_cycles([j for j in range(r) if own(j)])
        self._pass_order(st, start, done, counts, relax, pool, fold, own, lambda: hz, whole_cycles, pooled, pending)
        for j in range(r):  # cycles still drafting at the horizon, decided at the pool's rate
            o = opened[j]
            if o is not None and d[j] > 0:
                rec[j].append((o[0], 1 << 60, o[1], com[j], o[2], None))
        st.n = min(n, hz)
        return st if st.n >= 1 else None

    def _plain_run(self, j: int, P: int, Pc: int, hz: int, pr: float, ctx0: list[int]) -> int:
        """Passes from P (at least 1: its answer there is 0) on which column j, holding no drafts
        and no outcome, is given no draft: at the pool's rate pr before pass Pc, after it whatever
        the rate (even acceptance 1 would give 0; expected tokens grow with the rate)."""
        c, cx, o = self._com[j], self._ctx[j], self._out[j]
        h = min(self.CHECK_AHEAD, hz - P, o - c)
        if h <= 1:
            return 1
        i = np.arange(1, h)
        k = np.array(self._answers(np.where(P + i < Pc, pr, 1.0), np.full(h - 1, j), cx - ctx0[j] + i))
        eff = np.minimum(np.minimum(k, self._md), o - c - i - 1)
        return 1 + (int(np.argmax(eff > 0)) if (eff > 0).any() else h - 1)

    def commit(self, st: Stretch, n: int):
        """Leave the estimates as the first n passes would; per column, the target it was last
        given (`StretchPlanner.commit`'s other returns: no entropy signal)."""
        r = len(st.ids)
        target = [0] * r
        m = n - 1
        for j, (_, (f, v, d0, c0, k, _)) in enumerate(self._replay(st, n)):
            if k is not None:
                target[j] = -1 if v == m and v - f + d0 > 0 else k
        return target, [np.nan] * r, [[] for _ in range(r)], [True] * r
