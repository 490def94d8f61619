"""The entropy rule decided for many passes at once (`Entropy.plan_stretch`), for an executor that
advances a fixed batch of decode requests many passes per event (the simulator's fast path).

Between changes of the batch every input of the rule is known ahead: each draft's entropy and each
verification's outcome are keyed draws (functions of a request's position, never of when they are
asked: the executor passes them in as functions), costs follow from contexts and the batch size.
Two things couple requests:
- the pooled rate of the acceptance estimates: a request with no outcome yet answers from it, and
  one that decoded plainly relaxes towards it at its next look. Such a request is decided pass by
  pass, in pass order, against the pool as the step path would see it then (every verification
  before that pass folded in, in pass and running order); a request whose estimate is its own
  (an outcome, no relaxation due) keeps it through its cycle, so its whole cycle is decided at
  once: every state "holding n drafts" evaluated in one call, many requests per call;
- the estimate grid's width (the batch's most drafts held): numpy sums a row in order below 8
  columns and pairwise from 8, so the sum at n drafts depends on the width's eighth. A cycle is
  decided at the narrowest width its states allow; afterwards the passes whose real width is wider
  are decided again at it, and the stretch ends at the first pass whose answer changes.
A request shown to decode plainly whatever the pool (even perfect acceptance would not pay for a
draft at its context) skips its passes at once.

`commit` leaves the policy as asking it pass by pass on the first n passes would: the outcomes in
order, each relaxation where it happened, each request's held estimates and last look.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from . import entropy_rule as er
from .base import DecodeView

_FMAX = float(np.finfo(np.float64).max)


@dataclass
class Stretch:
    """A planned stretch: every verification (pass, column, drafts, accepted) in plan order, each
    request's cycles, the relaxations, and `n`, the passes it is valid for."""

    ids: list[int]
    n: int
    vp: list[int] = field(default_factory=list)
    vj: list[int] = field(default_factory=list)
    dv: list[int] = field(default_factory=list)
    acc: list[int] = field(default_factory=list)
    # per column: cycles in pass order, (first pass, last pass, drafts held at first, committed then,
    # estimates of drafts 0.. (None: plain run), entropies of the drafts made from the first pass)
    cycles: list[list] = field(default_factory=list)
    relax: list[tuple[int, int, int, int]] = field(default_factory=list)  # (pass, rid, last look, look)


class StretchPlanner:
    """Plans a stretch for one `Entropy` policy (reads its state, changes none of it)."""

    CHECK_AHEAD = 64  # passes a request shown cost-bound is checked ahead at once

    def __init__(self, pol):
        self.pol = pol

    # ---------------------------------------------------------------- costs and estimates
    def _costs(self, ctx: np.ndarray, view: DecodeView, share: float):
        """(draft cost, verify costs by drafts held) at these contexts, plus the pass overhead's
        share: the step path's grids and additions (`Entropy._marginal_costs`)."""
        c = view.max_draft + 1
        k = len(ctx)
        dm, vm = self.pol.ctx.cost.marginal(ctx[:, None].repeat(c, 1), np.full((k, c), view.budget[0]),
                                            np.full((k, c), view.method[0]), np.arange(1, c + 1)[None, :].repeat(k, 0))
        return dm[:, 0] + share, vm + share

    def _est(self, ent: np.ndarray, prior: np.ndarray) -> np.ndarray:
        pol = self.pol
        return er.token_acceptance(np.minimum(np.where(ent == ent, ent, pol.entropy_median), _FMAX), prior,
                                   pol.slope, pol.thr)

    # ---------------------------------------------------------------- the plan
    def plan(self, view: DecodeView, n: int, entropy, verify, gate: bool) -> Stretch | None:
        """`entropy(rid, pos, draft_pos, ctx)` and `verify(rid, pos, drafted, ctx)`: keyed draws
        (arrays in, array out). `gate`: the stretch ends after the first verification with drafts
        (it frees pages a waiting request may take). None: nothing to plan."""
        pol = self.pol
        acc = pol.acc
        r = len(view.ids)
        rids = view.ids.tolist()
        com, ctx = view.committed.tolist(), view.context.tolist()
        out = [c + x for c, x in zip(com, view.remaining.tolist())]
        d = view.drafted.tolist()
        md, L = view.max_draft, pol.lookahead
        keep, strength = acc.keep, acc.strength
        nd = max(view.num_decode, 1)
        share = pol.ctx.cost.pass_overhead(nd, prefill_tokens=view.prefill_tokens) / nd
        self._view, self._share = view, share
        st = Stretch(rids, n, cycles=[[] for _ in range(r)])
        self.st = st
        hz = n
        counts = [(list(x) if (x := acc.counts.get(i)) else None) for i in rids]
        pool = list(acc.pop)
        start = [0] * r
        held = [list(pol._p.get(i, []))[:x] for i, x in zip(rids, d)]
        # pass-0 looks: the estimate of the newest draft (if not held yet) and relaxations due
        relax0 = [None] * r  # last look where a relaxation is due at the next look
        for j, i in enumerate(rids):
            p0 = acc.seen.get(i)
            if counts[j] is not None and p0 is not None and com[j] > p0:
                relax0[j] = p0
        pending = [False] * r  # first outcome made: counts from the pool as it is then
        kmax = np.zeros(n + 1, np.int64)  # most drafts held by any request, per pass
        heap: list = []  # outcomes not folded into the pool yet: (pass, column, drafts, accepted)
        folded = 0  # passes folded
        done = [False] * r
        last_ent = np.where(view.drafted > 0, view.last_entropy, np.nan)
        self.checks = []  # pure cycles' decisions, for the width check
        self.first_spec = None

        def fold(P):
            nonlocal folded
            while heap and heap[0][0] < P:
                p, j, x, a = heapq.heappop(heap)
                trials = a + (a < x)
                if pending[j] and counts[j] is None:
                    counts[j] = [pool[0] / pool[1] * strength, strength]
                    pending[j] = False
                    cj = counts[j]
                    cj[0] = keep * cj[0] + a
                    cj[1] = keep * cj[1] + trials
                pool[0] = acc.pkeep * pool[0] + a
                pool[1] = acc.pkeep * pool[1] + trials
            folded = P

        def pure(J):
            """One whole cycle of each column in J (own estimate, kept through the cycle)."""
            nonlocal hz
            k = len(J)
            jr = np.array(J)
            a = np.array([counts[j][0] / counts[j][1] for j in J])
            cxa = np.array([ctx[j] for j in J], np.int64)
            cd, vc = self._costs(cxa, view, share)
            d0 = [d[j] for j in J]
            cap = [min(md, out[j] - com[j] - 1) for j in J]
            # entropies of every draft the cycle may make, drawn at once
            m = [max(c - x, 0) for c, x in zip(cap, d0)]
            tot = sum(m)
            ests = []
            if tot:
                rep = np.repeat(np.arange(k), m)
                first = np.repeat(np.cumsum([0] + m[:-1]), m)
                dpos = np.arange(tot) - first + np.repeat(np.array(d0, np.int64), m)
                ent = entropy(np.array(rids, np.int64)[jr[rep]], np.array(com, np.int64)[jr[rep]], dpos, cxa[rep])
                est = self._est(ent, a[rep])
                ent_l, est_l = ent.tolist(), est.tolist()
            row = 0
            for q, j in enumerate(J):
                ests.append(held[j][:d0[q]] + (est_l[row:row + m[q]] if m[q] else []))
                row += m[q]
            # states n = d0..cap, by width group (n // 8): the narrowest width a state allows
            more = [dict() for _ in J]
            live = list(range(k))
            g = 0
            while live:
                rows = [(q, s) for q in live for s in range(max(d0[q], 8 * g), min(cap[q], 8 * g + 7) + 1)]
                if rows:
                    qs = np.array([x[0] for x in rows])
                    W = 8 * g + 7 if g else 7
                    ph = np.ones((len(rows), max(W, 1)))
                    for i, (q, s) in enumerate(rows):
                        if s:
                            ph[i, :s] = ests[q][:s]
                    res = er.draft_more(ph[:, :W], np.array([x[1] for x in rows], np.int64), a[qs], cd[qs], vc[qs],
                                        np.array(cap)[qs], L).tolist()
                    for (q, s), y in zip(rows, res):
                        more[q][s] = y
                # on to the next width group while every state so far drafts on (or none was in it)
                live = [q for q in live if cap[q] > 8 * g + 7
                        and all(more[q][s] for s in range(max(d0[q], 8 * g), 8 * g + 8))]
                g += 1
            dvs = []
            for q, j in enumerate(J):
                s = d0[q]
                while more[q].get(s):
                    s += 1
                dvs.append(s)
            spec = [q for q in range(k) if dvs[q] > 0]
            outc = [0] * k
            if spec:
                sj = [J[q] for q in spec]
                res = verify(np.array([rids[j] for j in sj], np.int64), np.array([com[j] for j in sj], np.int64),
                             np.array([dvs[q] for q in spec], np.int64), np.array([ctx[j] for j in sj], np.int64))
                for q, x in zip(spec, res.tolist()):
                    outc[q] = x
            row = 0
            for q, j in enumerate(J):
                f, x, a_ = start[j], dvs[q], outc[q]
                v = f + x - d0[q]
                ents = ent_l[row:row + x - d0[q]] if tot else []
                row += m[q]
                st.cycles[j].append((f, v, d0[q], com[j], ests[q], ents))
                self.checks.append((j, f, d0[q], x, float(a[q]), cd[q], vc[q], cap[q], ests[q], more[q]))
                if f <= n:  # drafts held on each of its passes
                    seg = np.arange(d0[q], d0[q] + min(v, n) - f + 1)
                    np.maximum(kmax[f:f + len(seg)], seg, out=kmax[f:f + len(seg)])
                self._verified(j, v, x, a_)
                held[j] = []
                if x > 0:
                    cj = counts[j]
                    trials = a_ + (a_ < x)
                    cj[0] = keep * cj[0] + a_
                    cj[1] = keep * cj[1] + trials
                    heapq.heappush(heap, (v, j, x, a_))
                    if gate and v + 1 < hz:
                        hz = v + 1
                else:
                    relax0[j] = com[j]  # plain: the next look relaxes towards the pool
                com[j] += a_ + 1
                ctx[j] += a_ + 1
                d[j] = 0
                start[j] = v + 1
                if com[j] >= out[j]:
                    done[j] = True
                    hz = min(hz, v + 1)

        def pooled(A, P):
            """Columns in A (no outcome yet) decided at pass P from the pool's rate."""
            nonlocal hz
            k = len(A)
            prior_v = pool[0] / pool[1]
            prior = np.full(k, prior_v)
            # the newest draft's estimate, made on this pass's look
            new = [q for q, j in enumerate(A) if d[j] > len(held[j])]
            if new:
                e = self._est(np.array([self._last[A[q]] for q in new]), prior[:len(new)])
                for q, x in zip(new, e.tolist()):
                    held[A[q]].append(x)
            K = max(int(kmax[P]), 1)
            ph = np.ones((k, K))
            for q, j in enumerate(A):
                if d[j]:
                    ph[q, :d[j]] = held[j][:d[j]]
            cxa = np.array([ctx[j] for j in A], np.int64)
            cd, vc = self._costs(cxa, view, share)
            cap = np.array([min(md, out[j] - com[j] - 1) for j in A], np.int64)
            dd = np.array([d[j] for j in A], np.int64)
            mo = er.draft_more(ph, dd, prior, cd, vc, cap, L).tolist()
            dr = [q for q in range(k) if mo[q]]
            if dr:
                ent = entropy(np.array([rids[A[q]] for q in dr], np.int64), np.array([com[A[q]] for q in dr], np.int64),
                              dd[dr], cxa[dr])
                for q, x in zip(dr, ent.tolist()):
                    j = A[q]
                    self._open[j][5].append(x)
                    self._last[j] = x
                    d[j] += 1
                    start[j] = P + 1
            ver = [q for q in range(k) if not mo[q] and d[A[q]] > 0]
            outc = {}
            if ver:
                res = verify(np.array([rids[A[q]] for q in ver], np.int64), np.array([com[A[q]] for q in ver], np.int64),
                             dd[ver], cxa[ver])
                outc = dict(zip(ver, res.tolist()))
            plain = [q for q in range(k) if not mo[q] and d[A[q]] == 0]
            runs = self._cost_bound([A[q] for q in plain], P, min(hz, n)) if plain else {}
            for q in range(k):
                if mo[q]:
                    continue
                j = A[q]
                x = d[j]
                o = self._open[j]
                if x > 0:
                    a_ = outc[q]
                    st.cycles[j].append((o[0], P, o[2], com[j], held[j][:x], o[5]))
                    self._verified(j, P, x, a_)
                    heapq.heappush(heap, (P, j, x, a_))
                    pending[j] = True
                    if gate and P + 1 < hz:
                        hz = P + 1
                    com[j] += a_ + 1
                    ctx[j] += a_ + 1
                    h = 1
                else:
                    h = runs[j]
                    st.cycles[j].append((P, P + h - 1, 0, com[j], None, None))
                    for p in range(P, P + h):
                        self._verified(j, p, 0, 0)
                    com[j] += h
                    ctx[j] += h
                held[j] = []
                d[j] = 0
                start[j] = P + h
                self._open[j] = None
                if com[j] >= out[j]:
                    done[j] = True
                    hz = min(hz, start[j])
            for j in A:
                if self._open[j] is None and not done[j] and start[j] < hz and counts[j] is None and not pending[j]:
                    self._open[j] = [start[j], None, 0, com[j], None, []]

        self._verified = lambda j, p, x, a_: (st.vp.append(p), st.vj.append(j), st.dv.append(x), st.acc.append(a_))
        self._last = last_ent.tolist()
        self._open = [None] * r
        self._com, self._ctx, self._out = com, ctx, out
        for j in range(r):  # columns decided pass by pass: their open cycle
            if counts[j] is None:
                self._open[j] = [0, None, d[j], com[j], None, []]
        for j in range(r):
            if counts[j] is not None and relax0[j] is None and d[j] > len(held[j]):  # own estimate at pass 0
                x = counts[j]
                held[j].append(float(self._est(np.array([self._last[j]]), np.array([x[0] / x[1]]))[0]))

        while True:
            live = [j for j in range(r) if not done[j] and start[j] < hz]
            if not live:
                break
            # pure columns whose cycle starts no later than the first pass a pooled one needs
            while True:
                P = min([start[j] for j in live if counts[j] is None or relax0[j] is not None or pending[j]],
                        default=hz)
                J = [j for j in live if counts[j] is not None and relax0[j] is None and not pending[j]
                     and start[j] <= P and start[j] < hz and not done[j]]
                if not J:
                    break
                pure(J)
                live = [j for j in live if not done[j] and start[j] < hz]
            if P >= hz or not live:
                break
            fold(P)
            at = [j for j in live if start[j] == P]
            B = []
            for j in at:
                if counts[j] is not None and relax0[j] is not None:  # relaxes towards the pool, then its own
                    p0, x = relax0[j], counts[j]
                    w = keep ** (com[j] - p0)
                    default = pool[0] / pool[1]
                    x[0] = w * x[0] + (1.0 - w) * default * strength
                    x[1] = w * x[1] + (1.0 - w) * strength
                    st.relax.append((P, rids[j], p0, com[j]))
                    relax0[j] = None
                    B.append(j)
                elif counts[j] is not None and not pending[j]:
                    B.append(j)
            if B:
                pure(B)
            A = [j for j in at if counts[j] is None and not done[j] and start[j] < hz]
            for j in A:  # this pass's drafts held, before the width is read
                if d[j] > kmax[P]:
                    kmax[P] = d[j]
            if A:
                pooled(A, P)
        for j in range(r):  # cycles still drafting at the horizon, decided pass by pass
            o = self._open[j]
            if o is not None and d[j] > 0:
                st.cycles[j].append((o[0], 1 << 60, o[2], com[j], list(held[j]), o[5]))
        st.n = min(n, hz)
        st.n = min(st.n, self._width_check(kmax, st.n))
        if st.n < 1:
            return None
        return st

    def _cost_bound(self, J: list[int], P: int, hz: int) -> dict[int, int]:
        """For columns decoding plainly at pass P with no outcome (their answer there is 0): the
        passes from P on (at least 1) on which they are certain to answer 0 whatever the pool:
        even acceptance 1 would not pay for a first draft (the rule is monotone in the rate)."""
        view, share, md, L = self._view, self._share, self._view.max_draft, self.pol.lookahead
        out = {}
        for j in J:
            c, cx, o = self._com[j], self._ctx[j], self._out[j]
            h = min(self.CHECK_AHEAD, hz - P, o - c)
            if h <= 1:
                out[j] = 1
                continue
            i = np.arange(1, h, dtype=np.int64)
            cd, vc = self._costs(cx + i, view, share)
            cap = np.minimum(md, o - c - i - 1)
            more = er.first_draft_more(np.ones(h - 1), cd, vc, cap, L)
            out[j] = 1 + (int(np.argmax(more)) if more.any() else h - 1)
        return out

    def _width_check(self, kmax: np.ndarray, n: int) -> int:
        """The first pass (or n) where a whole cycle's answer, decided at its narrowest width,
        changes at the width the batch has there (8 columns or more: numpy's pairwise sum)."""
        rows = []
        for j, f, d0, x, a, cd, vc, cap, ests, more in self.checks:
            for s in range(d0, x + 1):
                p = f + s - d0
                if p >= n:
                    break
                K = int(kmax[p])
                if K >= 8 and K // 8 > s // 8:
                    rows.append((p, s, K // 8 * 8 + 7, a, cd, vc, cap, ests, more[s]))
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
                                np.array([x[4] for x in grp]), np.stack([x[5] for x in grp]),
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
        acc = pol.acc
        # outcomes pass by pass in running order, each pass's relaxations (looks) before them
        order = sorted((p, j) for p, j, x in zip(st.vp, st.vj, st.dv) if x > 0 and p < n)
        byp = {}
        for p, j, x, a in zip(st.vp, st.vj, st.dv, st.acc):
            if x > 0 and p < n:
                byp.setdefault(p, {})[j] = (x, a)
        rel = [x for x in st.relax if x[0] < n]
        ri = 0
        passes = sorted({p for p, _ in order} | {x[0] for x in rel})
        for p in passes:
            while ri < len(rel) and rel[ri][0] == p:
                _, rid, p0, pos = rel[ri]
                acc.seen[rid] = p0
                acc.get(np.array([rid], np.int64), np.array([pos], np.int64))
                ri += 1
            if p in byp:
                g = byp[p]
                js = sorted(g)
                pol.on_verify(np.array([st.ids[j] for j in js], np.int64), np.array([g[j][0] for j in js], np.int64),
                              np.array([g[j][1] for j in js], np.int64))
        m = n - 1
        r = len(st.ids)
        target, last, ents, restart = [0] * r, [np.nan] * r, [[] for _ in range(r)], [False] * r
        for j, rid in enumerate(st.ids):
            cyc = st.cycles[j]
            k = len(cyc) - 1
            while cyc[k][0] > m:
                k -= 1
            f, v, d0, c0, ests, en = cyc[k]
            restart[j] = k > 0  # a verification before this cycle: its entropy sum restarted
            if ests is None or v == m:  # verified on the last pass
                x = 0 if ests is None else v - f + d0
                pol._p[rid] = []
                target[j] = -1 if x > 0 else 0
                restart[j] = True
                if x == 0:
                    acc.seen[rid] = c0 + (m - f if ests is None else 0)
            else:  # drafting on the last pass, holding d before it
                h = d0 + m - f
                pol._p[rid] = list(ests[:h])
                target[j] = h + 1
                last[j] = en[h - d0]
                ents[j] = en[:h - d0 + 1]
                acc.seen[rid] = c0
            # a verification with drafts on the last pass: its outcome removed the look (on_verify)
        return target, last, ents, restart
