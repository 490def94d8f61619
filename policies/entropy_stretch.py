"""The entropy rule decided for many passes at once (`Entropy.fast_plan`), for an executor that
advances a fixed batch of decode requests many passes per event (the simulator's fast path).

Between changes of the batch every input of the rule is known ahead: each draft's entropy and each
verification's outcome are keyed draws (functions of a request's position, never of when they are
asked: the executor passes them in as functions), costs follow from contexts and the batch size.
Two things couple requests:
- the pooled rate of the acceptance estimates: a request with no outcome yet answers from it, and
  one that decoded plainly relaxes towards it at its next look. Such a request is decided in pass
  order against the pool as the step path would see it then (every verification before that pass
  folded in, in pass and running order), a cycle at a time while the rate cannot change (until the
  pass after the next verification with drafts, planned or possible). A request whose estimate is
  its own (an outcome, no relaxation due) keeps it through its cycle, so its whole cycle is decided
  at once, and its next one too: its estimate after this one's outcome follows from the outcome,
  and its draft estimates are made then, a row of numpy calls per cycle (elementwise operations,
  so the same bits as the step path's grid);
- the estimate grid's width (the batch's most drafts held): numpy sums a row in order below 8
  columns and pairwise from 8, so the sum at n drafts depends on the width's eighth. A cycle is
  decided at the narrowest width its states allow; afterwards the passes where the batch holds 8 or
  more are decided again at their width with `draft_more`, and the stretch ends at the first pass
  whose answer changes.
The rule's arithmetic runs on Python floats in `draft_more`'s order (`cycle_more`: IEEE operations,
the same bits); its transcendental parts (`token_acceptance`, the prior's powers) are numpy calls
on the same elementwise operations. A request shown to decode plainly whatever the pool (even
perfect acceptance would not pay for a draft at its context) skips its passes at once, drawing
nothing (the step path builds no acceptance arrays for a request that never drafts).

`commit` leaves the policy as asking it pass by pass on the first n passes would: the outcomes in
order, each relaxation where it happened, each request's held estimates and last look.
"""

from __future__ import annotations

import heapq

import numpy as np

from . import entropy_rule as er
from .base import DecodeView, spec_shares
from .stretch import Stretch, StretchBase

_FMAX = float(np.finfo(np.float64).max)


def _odds(x: float) -> float:
    """token_acceptance's clip of a prior to [1e-6, 1 - 1e-6] and its odds, on a Python float (IEEE
    operations: the same bits as numpy's)."""
    x = (1 - 1e-6 if x > 1 - 1e-6 else x) if x > 1e-6 else 1e-6
    return x / (1 - x)


def _pairwise(a: list[float], w: int) -> float:
    """numpy's sum of a row of w columns holding `a` then zeros (8 accumulators from 8 columns)."""
    a = a + [0.0] * (w - len(a))
    if w < 8:
        s = 0.0
        for x in a:
            s += x
        return s
    r = a[:8]
    i = 8
    while i < w - w % 8:
        for k in range(8):
            r[k] += a[i + k]
        i += 8
    s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < w:
        s += a[i]
        i += 1
    return s


def cycle_more(est: list[float] | None, d0: int, G: list[float], cd: float, vc: list[float], cap: int, L: int) -> int:
    """The drafts a cycle verifies: from d0 held, `draft_more` at each state "holding s drafts"
    until it says verify, on Python floats with its operations in its order (IEEE arithmetic, so
    the same bits), each state at the narrowest grid it allows (s < 8: running sums; from 8,
    numpy's pairwise sum over 8 * (s // 8) + 7 columns). est: estimates of drafts 0..; G: the
    running sums of prior ** m, m = 1..L; None with d0 = 0: only the first state is decided (1:
    it drafts), which reads no estimate."""
    last = len(vc) - 1
    if last < cap + L:  # the verify costs past the last column: the last one's (draft_more's clamp)
        vc = vc + [vc[last]] * (cap + L - last)
    mcd = [m * cd for m in range(1, L + 1)]
    cps = []
    cp, e = 1.0, 0.0
    for i in range(d0):
        cp = est[i] if i == 0 else cp * est[i]
        cps.append(cp)
        e += cp
    s = d0
    while True:
        if s >= cap:
            return s
        if s >= 8 and s % 8 == 0:  # numpy's pairwise sum from 8 columns (grid width s + 7); at
            # the widths up to the next multiple of 8 it adds the new terms in order, as below
            e = _pairwise(cps, s + 7)
        sv = cp if s else 1.0
        spent = s * cd
        now = (e + 1.0) / (spent + vc[s])
        more = False
        k = cap - s if cap - s < L else L  # states up to cap drafts only
        for g, mc, v in zip(G[:k], mcd, vc[s + 1:s + 1 + k]):
            if (e + sv * g + 1.0) / (spent + mc + v) > now:
                more = True
                break
        if not more or est is None:
            return s + more
        cp = est[s] if s == 0 else cp * est[s]
        cps.append(cp)
        e += cp
        s += 1


class StretchPlanner(StretchBase):
    """Plans a stretch for one `Entropy` policy (reads its state, changes none of it)."""

    CHECK_AHEAD = 64  # passes a request shown cost-bound is checked ahead at once

    def __init__(self, pol):
        super().__init__(pol)
        self._etab: dict = {}  # entropies by request id, kept across stretches (`_tables`)

    # ---------------------------------------------------------------- costs, entropies, estimates
    def _cost_tables(self, view: DecodeView, H: int, share: float) -> None:
        """Each request's draft cost and verify costs by drafts held at contexts context + 0..H-1
        (a request's context grows by at most one token a pass, past the drafts it holds), plus the pass overhead's share:
        the step path's grids and additions (`Entropy._marginal_costs`), in one call."""
        r, c = len(view.ids), view.max_draft + 1
        cost = self.pol.ctx.cost
        d_add, v_add = spec_shares(cost, view, c)  # as the step path adds them
        # the model's tables where it has them: no (request, k) grid for the draft cost (one column
        # read), whole table rows for the verify costs
        ctx = view.context[:, None] + np.arange(H, dtype=np.int64)
        tb = cost.tables(view.budget, view.method, int(ctx.max()) + 1, c + 1)
        if tb is not None:
            self._cd = tb[0][ctx, 0] + share + d_add
            self._vc = tb[1].take(ctx, axis=0)[:, :, 1:c + 1] + share + v_add
            return
        ctx = (view.context[:, None] + np.arange(H, dtype=np.int64)).ravel()
        k = len(ctx)
        dm, vm = cost.marginal(ctx[:, None].repeat(c, 1), view.budget, view.method,
                               np.arange(1, c + 1)[None, :].repeat(k, 0))
        self._cd, self._vc = (dm[:, 0] + share + d_add).reshape(r, H), (vm + share + v_add).reshape(r, H, c)

    def _ent_tables(self, J: list[int], reach: list[int] | None = None) -> None:
        """Entropy tables (`StretchBase._tables`' coverage rule) for the columns in J that need one:
        ROWS cycle starts from the committed position by max_draft draft indices, each entry the
        draft's entropy and `token_acceptance`'s entropy term of it, NaN past what it may draft
        there. Every grid entry drawn in one call (those past the output lie within the store's
        padding; keyed draws, so the others are as drawn alone), then masked."""
        tab, com, ctx, rids, out, md = self._etab, self._com, self._ctx, self._rids, self._out, self._md
        miss = self._misses(J, tab, reach)
        if not miss:
            return
        pol = self.pol
        grid = getattr(self._entropy, "rows", None)
        if grid is not None:  # one request's grid per call, offsets once per start
            i = np.arange(md, dtype=np.int64)
            for j in miss:
                c0, o = com[j], out[j]
                rows = max(min(self.ROWS, o - c0), 1)
                c = np.arange(c0, c0 + rows, dtype=np.int64)
                E = grid(rids[j], c, c + (ctx[j] - c0), md)
                Q = pol.slope * (pol.thr - np.log(np.maximum(np.minimum(np.where(E == E, E, pol.entropy_median),
                                                                        _FMAX), 1e-12)))
                past = i >= np.minimum(md, o - c - 1)[:, None]
                E[past] = np.nan
                Q[past] = np.nan
                tab[rids[j]] = (c0, rows, (E, Q), ctx[j] - c0, False)  # a row's entropies listed when read
            return
        ids, pos, cx, spans = [], [], [], []
        for j in miss:
            c0, o = com[j], out[j]
            rows = max(min(self.ROWS, o - c0), 1)
            c = np.arange(c0, c0 + rows, dtype=np.int64).repeat(md)
            ids.append(np.full(rows * md, rids[j], np.int64))
            pos.append(c)
            cx.append(c + (ctx[j] - c0))
            spans.append((j, c0, rows, ctx[j] - c0))
        one = len(miss) == 1
        pos = pos[0] if one else np.concatenate(pos)
        dx = np.tile(np.arange(md, dtype=np.int64), len(pos) // md)
        e = self._entropy(ids[0] if one else np.concatenate(ids), pos, dx, cx[0] if one else np.concatenate(cx))
        q = pol.slope * (pol.thr - np.log(np.maximum(np.minimum(np.where(e == e, e, pol.entropy_median), _FMAX),
                                                        1e-12)))
        past = dx >= np.minimum(md, np.asarray(self._out_of(miss, spans), np.int64) - pos - 1)
        e[past] = np.nan
        q[past] = np.nan
        lo = 0
        for j, c0, rows, off in spans:
            E, Q = e[lo:lo + rows * md].reshape(rows, md), q[lo:lo + rows * md].reshape(rows, md)
            tab[rids[j]] = (c0, rows, (E, Q), off, False)
            lo += rows * md

    def _out_of(self, miss, spans):
        """Each grid entry's request output length (for the mask)."""
        out = self._out
        if len(miss) == 1:
            return out[miss[0]]
        return np.concatenate([np.full(rows * self._md, out[j], np.int64) for j, _, rows, _ in spans])

    def _ests(self, J: list[int], a: list[float]):
        """(estimates, entropies) as lists per column of the drafts it would make in a cycle
        starting at its committed position now with acceptance estimate a (NaN past what it may
        draft). `token_acceptance`'s operations in its order, its entropy term drawn with the
        table."""
        tab, com, rids = self._etab, self._com, self._rids
        self._ent_tables(J)
        ts = [tab[rids[j]] for j in J]
        i = [com[j] - t[0] for j, t in zip(J, ts)]
        Q = ts[0][2][1][i[0]][None, :] if len(J) == 1 else np.stack([t[2][1][k] for t, k in zip(ts, i)])
        p = [min(max(x, 1e-6), 1 - 1e-6) for x in a]
        lp = np.log(np.array([x / (1 - x) for x in p]))
        est = 1.0 / (1.0 + np.exp(-(lp[:, None] + Q)))
        return est.tolist(), [t[2][0][k].tolist() for t, k in zip(ts, i)]

    # ---------------------------------------------------------------- the plan
    def plan(self, view: DecodeView, n: int, entropy, verify, gate: bool, pages=None) -> Stretch | None:
        """`entropy(rid, pos, draft_pos, ctx)` and `verify(rid, pos, drafted, ctx)`: keyed draws
        (arrays in, array out). `gate`: the stretch ends after the first verification with drafts
        (it frees pages a waiting request may take). `pages`: the KV pages' bound
        (`stretch.PageSums`). None: nothing to plan."""
        pol = self.pol
        acc = pol.acc
        st, own, fold = self._begin(view, n, verify, gate, pages)
        rids, com, ctx, out, d, md, r = self._rids, self._com, self._ctx, self._out, self._d, self._md, len(st.ids)
        counts, pool, relax = self._counts, self._pool, self._relax
        start, done, heap, ctx0, rec, hz = self._start, self._done, self._heap, list(ctx), st.cycles, n
        L = pol.lookahead
        nd = max(view.num_decode, 1)
        share = pol.ctx.cost.pass_overhead(nd, prefill_tokens=view.prefill_tokens) / nd
        self._cost_tables(view, n + md + 2, share)  # + the drafts held at the start (emitted once verified)
        cdt, vct = self._cd, self._vc
        cdl = cdt.tolist()
        mL = np.arange(1, L + 1)
        self._entropy = entropy
        held = [list(pol._p.get(i, []))[:x] for i, x in zip(rids, d)]
        kmax = [0] * (n + 1)  # most drafts held by any request, per pass, where 8 or more
        opened: list = [None] * r  # a cycle decided pass by pass: [first pass, drafts then, entropies]
        checks = []  # whole cycles: (column, first pass, drafts then, drafts verified, prior, cd, vc, cap, ests)

        def take(j, x0, el, en, x, prior, cd, vcr, cap):
            """Column j's cycle from its next pass: from x0 drafts held to a verification of x."""
            nonlocal hz
            f = start[j]
            v = f + x - x0
            a_ = self._outcome(j, x) if x else 0
            ests = el[:x]
            rec[j].append((f, v, x0, com[j], ests, en[x0:x]))
            if f < n:
                checks.append((j, f, x0, x, prior, cd, vcr, cap, ests, x))
                for p in range(f + max(0, 8 - x0), min(v, n) + 1):  # 8 drafts or more held (the width check's)
                    if x0 + p - f > kmax[p]:
                        kmax[p] = x0 + p - f
            held[j] = []
            hz = self._closed(j, f, v, x0, x, a_, hz)
            return a_

        etab = self._etab

        def whole1(j):
            """Whole cycles of column j, its states "holding s drafts" decided in turn until it
            verifies (`cycle_more`), at the narrowest width each allows: this cycle, and the next
            one too, whose estimate follows from this one's outcome b (b accepted of more drafts,
            or of exactly b): each cycle's estimates and prior powers made as a row of their own
            (only 2 of the 2 * cap + 1 rows a grid of all outcomes would hold are ever read).
            Column by column: a column's cycles read only its own state, and numpy calls on one
            column's rows cost less than gathering several columns' rows into one."""
            c0, c1 = counts[j]
            cj = com[j]
            cap = min(md, out[j] - cj - 1)
            x0 = d[j]
            cx = ctx[j] - ctx0[j]
            vcr, cd = vct[j, cx].tolist(), cdl[j][cx]
            # the prior's powers, cycle by cycle (this one's, then the next one's once its outcome
            # is known): elementwise, so the same bits as in one call
            p0 = c0 / c1
            G0 = (np.array([p0]) ** mL).cumsum().tolist()
            if x0 == 0:  # holding no drafts: whether it drafts at all reads no estimate (a fifth of
                # the cycles are plain), so that is decided first, from the prior's powers alone
                if not cycle_more(None, 0, G0, cd, vcr, cap, L):
                    take(j, 0, [], [], 0, p0, cd, vcr, cap)
                    return
            t = etab.get(rids[j])
            if not (t is not None and 0 <= cj - t[0] and min(cj + cap + 2, out[j]) - t[0] <= t[1]
                    and ctx[j] - cj == t[3]):
                self._ent_tables([j], [cap + 2])
                t = etab[rids[j]]
            i = cj - t[0]
            Q = t[2][1]
            # token_acceptance, with the entropy term drawn (its clip and odds on Python floats: IEEE
            # operations, the same bits), a row per cycle: this one's now, the next one's (its row of
            # the table: it starts b + 1 on) once its outcome is known
            et = t[2][0]
            el = (1.0 / (1.0 + np.exp(-(np.log(np.array([_odds(p0)])) + Q[i])))).tolist()
            if held[j]:  # estimates made on earlier looks
                el[:len(held[j])] = held[j]
            x = cycle_more(el, x0, G0, cd, vcr, cap, L)
            # (the entropies as a row of the table: listed only where `commit` reads them)
            b = take(j, x0, el, et[i], x, p0, cd, vcr, cap)
            if x == 0 or done[j] or start[j] >= hz:
                return
            # its estimate after b accepted of more drafts, or of exactly b (AcceptanceEMA.update)
            p1 = acc.rate_after(c0, c1, x, b)
            cx = ctx[j] - ctx0[j]
            cap1 = min(md, out[j] - com[j] - 1)
            vcr, cd = vct[j, cx].tolist(), cdl[j][cx]
            el = (1.0 / (1.0 + np.exp(-(np.log(np.array([_odds(p1)])) + Q[i + b + 1])))).tolist()
            x = cycle_more(el, 0, (np.array([p1]) ** mL).cumsum().tolist(), cd, vcr, cap1, L)
            take(j, 0, el, et[i + b + 1], x, p1, cd, vcr, cap1)

        def whole_cycles(J):
            """Cycle after cycle of the columns in J while each keeps its own estimate, the column
            furthest behind first, up to the first pass where a column deciding from the pool
            (no outcome yet, a relaxation due) is asked next: `_pass_order` takes them up again
            there. A column's cycles read only its own state, so neither the order nor the
            stops change an answer, but a finish or the pages' cut found at pass p then stops
            the others near p instead of after they were planned far past it."""
            lim = hz
            for k in range(r):
                if start[k] < lim and not done[k] and not own(k):
                    lim = start[k]
            if len(J) == 1:
                j = J[0]
                while True:
                    whole1(j)
                    if done[j] or start[j] >= min(hz, lim) or not own(j):
                        return
            h = [(start[j], j) for j in J]
            heapq.heapify(h)
            while h:
                j = heapq.heappop(h)[1]
                whole1(j)
                if not done[j] and start[j] < min(hz, lim) and own(j):
                    heapq.heappush(h, (start[j], j))

        def pooled(A, P):
            """Columns in A (no outcome yet) from pass P, at the pool's rate: constant until the
            pass after the next verification with drafts, which is known (planned cycles) or may
            come from a column not planned past P. A cycle that verifies before then is taken
            whole, one still drafting then up to there; a plain answer holds while the rate
            cannot change it, or while even acceptance 1 would not."""
            nonlocal hz
            pr = pool[0] / pool[1]
            Pc = heap[0][0] + 1 if heap else hz
            for j in range(r):  # (columns with their own estimate too: `whole_cycles` plans them
                # only up to the next pass a pooled column is asked)
                if not done[j] and P < start[j] < Pc:
                    Pc = start[j] + 1
            G = (np.array([pr]) ** mL).cumsum().tolist()
            # a plain answer reads no estimate: the others' draws only (a request that never
            # drafts never has its acceptance arrays built, as on the step path)
            cx = {j: ctx[j] - ctx0[j] for j in A}
            cap = {j: min(md, out[j] - com[j] - 1) for j in A}
            B = [j for j in A if d[j] or cycle_more(None, 0, G, cdl[j][cx[j]], vct[j, cx[j]].tolist(), cap[j], L)]
            estl, ent = self._ests(B, [pr] * len(B)) if B else ([], [])
            est = dict(zip(B, zip(estl, ent)))
            plan = []
            for j in A:
                x0, (el, en) = d[j], est.get(j, (None, None))
                if held[j]:
                    el[:len(held[j])] = held[j]
                vcr = vct[j, cx[j]].tolist()
                x = cycle_more(el, x0, G, cdl[j][cx[j]], vcr, cap[j], L) if el is not None else 0
                plan.append((j, x0, el, x, cap[j], cdl[j][cx[j]], vcr, en))
                if x > 0 and P + x - x0 + 1 < Pc:
                    Pc = P + x - x0 + 1
            for j, x0, el, x, cap_, cd, vcr, en in plan:
                o = opened[j]
                if x == 0:  # plain: as long as the answer holds
                    hz = self._plain(j, P, Pc, hz, pr, ctx0)
                    opened[j] = [start[j], 0, []]
                else:
                    v = P + x - x0
                    top = min(v, Pc - 1)  # its last pass decided here
                    checks.append((j, P, x0, x, pr, cd, vcr, cap_, el[:x], x0 + top - P))
                    for p in range(P + max(0, 8 - x0), min(top, n) + 1):
                        if x0 + p - P > kmax[p]:
                            kmax[p] = x0 + p - P
                    if v < Pc:  # the whole cycle
                        a_ = self._outcome(j, x)
                        o[2].extend(en[x0:x])
                        rec[j].append((o[0], v, o[1], com[j], el[:x], o[2]))
                        held[j] = []
                        opened[j] = None
                        hz = self._closed(j, o[0], v, o[1], x, a_, hz)  # (no outcome before: pending)
                    else:  # drafting through pass Pc - 1, asked again on Pc
                        dn = x0 + Pc - P
                        o[2].extend(en[x0:dn])
                        held[j] = el[:dn - 1]
                        d[j] = dn
                        start[j] = Pc
                if com[j] >= out[j]:
                    done[j] = True
                    hz = min(hz, start[j])

        for j in range(r):
            if counts[j] is None:
                opened[j] = [0, d[j], []]
        whole_cycles([j for j in range(r) if own(j)])
        self._pass_order(st, start, done, counts, relax, pool, fold, own, lambda: hz, whole_cycles, pooled)
        for j in range(r):  # cycles still drafting at the horizon, decided pass by pass
            o = opened[j]
            if o is not None and d[j] > 0:
                rec[j].append((o[0], 1 << 60, o[1], com[j], list(held[j]), o[2]))
        st.n = min(n, hz)
        st.n = min(st.n, self._width_check(checks, np.array(kmax, np.int64), st.n))
        return st if st.n >= 1 else None

    def _plain_run(self, j: int, P: int, Pc: int, hz: int, pr: float, ctx0: list[int]) -> int:
        """Passes from P (at least 1: its answer there is 0) on which column j, holding no drafts
        and no outcome, answers 0: at the pool's rate pr before pass Pc, after it whatever the
        rate (even acceptance 1 would not pay for a first draft; the rule is monotone in it)."""
        c, cx, o = self._com[j], self._ctx[j], self._out[j]
        h = min(self.CHECK_AHEAD, hz - P, o - c)
        if h <= 1:
            return 1
        i = np.arange(1, h)
        prior = np.where(P + i < Pc, pr, 1.0)
        k = cx - ctx0[j] + i
        more = er.first_draft_more(prior, self._cd[j, k], self._vc[j, k], np.minimum(self._md, o - c - i - 1),
                                   self.pol.lookahead)
        return 1 + (int(np.argmax(more)) if more.any() else h - 1)

    def _width_check(self, checks: list, kmax: np.ndarray, n: int) -> int:
        """The first pass (or n) where a whole cycle's answer, decided at its narrowest width,
        changes at the width the batch has there (8 columns or more: numpy's pairwise sum)."""
        if not kmax[:n].any():
            return n
        rows = []
        km = kmax.tolist()
        hot = np.concatenate(([0], np.cumsum(kmax > 0))).tolist()  # passes at 8 drafts or more, running count
        for j, f, d0, x, a, cd, vc, cap, ests, upto in checks:
            # a state holding 3 drafts or fewer sums them the same way at any width (the pairwise
            # sum's accumulators hold one each, added ((a0 + a1) + (a2 + 0)) + ..., and zeros
            # after: exactly the running sum), so its answer cannot change: from 4 on
            lo = f + (4 - d0 if d0 < 4 else 0)
            if lo >= n or hot[min(f + upto - d0 + 1, n)] == hot[lo]:
                continue
            for s in range(d0 if d0 > 4 else 4, upto + 1):
                p = f + s - d0
                if p >= n:
                    break
                K = km[p]
                if K >= 8 and K // 8 > s // 8:
                    rows.append((p, s, K // 8 * 8 + 7, a, cd, vc, cap, ests, s < x))
        if not rows:
            return n
        bad = n
        for W in sorted({x[2] for x in rows}):
            grp = [x for x in rows if x[2] == W]
            ph = np.ones((len(grp), W))
            for i, x in enumerate(grp):
                if x[1]:
                    ph[i, :x[1]] = x[7][:x[1]]
            res = er.draft_more(ph, np.array([x[1] for x in grp], np.int64), np.array([x[3] for x in grp]),
                                np.array([x[4] for x in grp]), np.array([x[5] for x in grp]),
                                np.array([x[6] for x in grp], np.int64), self.pol.lookahead).tolist()
            for x, y in zip(grp, res):
                if y != x[8] and x[0] < bad:
                    bad = x[0]
        return bad

    # ---------------------------------------------------------------- handing back
    def commit(self, st: Stretch, n: int):
        """Leave the policy as the step path's first n passes would; returns, per column, the
        target it was last given, its newest draft's entropy (NaN after a verification), the
        entropies of the drafts it holds made in the stretch, and whether it verified in it (its
        entropy sum restarts)."""
        pol = self.pol
        r = len(st.ids)
        target, last, ents, restart = [0] * r, [np.nan] * r, [[] for _ in range(r)], [False] * r
        m = n - 1
        for j, (k, (f, v, d0, c0, ests, en)) in enumerate(self._replay(st, n)):
            rid = st.ids[j]
            restart[j] = k > 0  # a verification before this cycle: its entropy sum restarted
            if ests is None or v == m:  # verified on the last pass
                pol._p[rid] = []
                target[j] = -1 if ests is not None and v - f + d0 > 0 else 0
                restart[j] = True
            else:  # drafting on the last pass, holding h before it
                h = d0 + m - f
                pol._p[rid] = list(ests[:h])
                target[j] = h + 1
                if isinstance(en, np.ndarray):  # (a row of an entropy table)
                    en = en.tolist()
                last[j] = en[h - d0]
                ents[j] = en[:h - d0 + 1]
        return target, last, ents, restart
