"""What planning many passes of a policy asked every pass shares (`entropy_stretch`,
`aspire_stretch`): the plan's record, per-request tables of keyed draws, and handing the smoothed
acceptance estimates back as the step path leaves them.

A stretch is a fixed batch of decode requests over passes with nothing else in them (the
simulator's fast path asks for one between arrivals, finishes and prefills). The acceptance
model's draws are keyed (a row's value depends only on its own arguments), and while a request
decodes its context is its committed position plus a constant, so every draw a cycle starting at
position c can need is fixed by c: tables of them are drawn many starts ahead in one call.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np


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
    # the policy's record of it (None: a run of plain passes), more of it)
    cycles: list[list] = field(default_factory=list)
    relax: list[tuple[int, int, int, int]] = field(default_factory=list)  # (pass, rid, last look, look)


class PageSums:
    """Each pass's KV pages, summed as a plan's columns are planned through it.

    An executor ends a plan of many passes before the first pass whose pages do not fit (on a
    long trace the prefix cache fills the pool, so most plans end there, long before their
    horizon: Mooncake, entropy, a fifth of the passes planned). Planning past that pass is work
    thrown away, so a planner asks `cover` after each span it plans and shortens its horizon to
    the pass returned. The executor cuts at the same pass as before, so the results are the
    same (a horizon too short would only end the plan early; a lower bound of the pages from the
    columns' contexts, for columns planned less far, saved 2 % of entropy's cycles planned and
    cost as much)."""

    NEVER = 1 << 60

    def __init__(self, budget: int, page_size: int, shared: list[int], n: int):
        """budget: pages free for these columns; shared: each column's prefix tokens held in
        the cache (not its own pages); n: the passes planned at most."""
        self.budget, self.ps, self.shared, self.r = budget, page_size, shared, len(shared)
        self.pages, self.cols = [0] * n, [0] * n  # per pass: pages of the columns planned through it, how many

    @staticmethod
    def fits(budget: int, page_size: int, shared: list[int], tokens: list[int], n: int) -> bool:
        """Whether every pass of n fits whatever the columns do: a column holds at most one token
        more a pass than it held at the start (a verification hands back its rejected drafts), so
        its pages on pass p are at most those of tokens + p + 1; summed at the last pass, within
        the budget, `cover` can only answer NEVER (and summing pass by pass is skipped)."""
        return sum(-(-(x + n - s) // page_size) for x, s in zip(tokens, shared)) <= budget

    def cover(self, j: int, f: int, last: int, tokens: int, hz: int) -> int:
        """Column j was planned on passes f..last, holding `tokens` tokens (context and drafts)
        before pass f and one more before each later one (drafting, or decoding plainly), each
        pass reserving room for one more: the first pass where the pages do not fit, once every
        column is planned through it, or NEVER. Passes from hz on are not counted."""
        pe, pc, ps, budget, r = self.pages, self.cols, self.ps, self.budget, self.r
        b = tokens + 1 - self.shared[j] - f  # the reservation before pass p: b + p private tokens
        for p in range(f, min(last + 1, hz, len(pe))):
            x = pe[p] = pe[p] + -(-(b + p) // ps)  # private_pages, inline: a call per pass cost ~2 % of a run
            c = pc[p] = pc[p] + 1
            if c == r and x > budget:
                return p
        return self.NEVER


def _never(*a) -> int:
    return PageSums.NEVER


class StretchBase:
    """Keyed draws in tables by request id, kept across stretches, and the estimates' hand-back.
    A subclass's plan sets `_rids`, `_com`, `_ctx`, `_out`, `_md` (its columns' live state) and
    `_verify` (the keyed outcome draw)."""

    ROWS = 1024  # cycle starts whose draws are drawn at once per request

    def __init__(self, pol):
        self.pol = pol
        # rid -> (first start, starts, draws, context - committed)
        self._vtab: dict = {}

    _offs: dict = {}

    def _estimates(self, rids: list[int], com: list[int]) -> tuple[list, list, list]:
        """Copies of the smoothed acceptance's state for these requests, for planning ahead: each
        one's counts (None: no outcome yet), the pooled counts, and where a relaxation towards the
        pool is due at its next look, the position of its last look (else None)."""
        acc = self.pol.acc
        counts = [(list(x) if (x := acc.counts.get(i)) else None) for i in rids]
        relax = [None] * len(rids)
        for j, i in enumerate(rids):
            p0 = acc.seen.get(i)
            if counts[j] is not None and p0 is not None and com[j] > p0:
                relax[j] = p0
        return counts, list(acc.pop), relax

    def _folder(self, heap: list, counts: list, pending: list, pool: list):
        """fold(P): every planned outcome (pass, column, drafts, accepted) in `heap` before pass P
        into the pooled counts, in pass and running order; a column's first outcome (`pending`)
        starts its counts from the pool as it is then (`AcceptanceEMA.update` on copies)."""
        acc = self.pol.acc

        def fold(P):
            while heap and heap[0][0] < P:
                p, j, x, a = heapq.heappop(heap)
                if pending[j]:
                    counts[j] = acc.fresh(pool)
                    pending[j] = False
                    acc.learn(counts[j], pool, x, a)
                else:
                    acc.learn(None, pool, x, a)
        return fold

    def _begin(self, view, n: int, verify, gate: bool, pages) -> tuple:
        """A plan's start from `view`, as lists per column (the planner's closures alias them):
        `_rids`, `_com`, `_ctx`, `_out`, `_d` (drafts held), `_start` (next pass), `_done`, and the
        estimator's state copied (`_estimates`: `_counts`, `_pool`, `_relax`; `_pending`: a first
        outcome not folded into the pool yet; `_heap`: the outcomes not folded), which `_closed` and
        `_plain` move; `gate` ends the plan after the first verification with drafts, `pages`
        bounds it (`_page_sums`). Returns the record, own(j) (column j's estimate is its own: no
        outcome pending, no relaxation due) and fold(P) (`_folder`)."""
        r = len(view.ids)
        rids, com = view.ids.tolist(), view.committed.tolist()
        self._rids, self._com, self._ctx = rids, com, view.context.tolist()
        self._out = [c + x for c, x in zip(com, view.remaining.tolist())]
        self._d, self._md, self._verify = view.drafted.tolist(), view.max_draft, verify
        st = self._st = Stretch(rids, n, cycles=[[] for _ in range(r)])
        self._gate, self._pcut = gate, self._page_sums(pages, n)  # the pass where the pages run out, once known
        counts, pool, relax = self._counts, self._pool, self._relax = self._estimates(rids, com)
        pending, heap = self._pending, self._heap = [False] * r, []
        self._done, self._start = [False] * r, [0] * r

        def own(j):
            return counts[j] is not None and relax[j] is None and not pending[j]
        return st, own, self._folder(heap, counts, pending, pool)

    def _closed(self, j: int, f: int, v: int, x0: int, x: int, a: int, hz: int) -> int:
        """Column j's cycle from pass f (x0 drafts held then) verified x drafts on pass v, a
        accepted: recorded, its outcome learnt (a first one waits for the pool's fold: `pending`),
        a plain pass marks its next look to relax towards the pool, and the column moves past it.
        Returns the horizon, cut where it finishes, where `gate` ends the plan, or where the pages
        run out."""
        st, com, ctx = self._st, self._com, self._ctx
        st.vp.append(v)
        st.vj.append(j)
        st.dv.append(x)
        st.acc.append(a)
        if x > 0:
            if self._counts[j] is None:
                self._pending[j] = True
            else:
                self.pol.acc.learn(self._counts[j], None, x, a)
            heapq.heappush(self._heap, (v, j, x, a))
            if self._gate and v + 1 < hz:
                hz = v + 1
        elif self._counts[j] is not None:
            self._relax[j] = com[j]  # plain: its next look relaxes towards the pool
        tok = ctx[j] + x0
        com[j] += a + 1
        ctx[j] += a + 1
        self._d[j] = 0
        self._start[j] = v + 1
        if com[j] >= self._out[j]:
            self._done[j] = True
            hz = min(hz, v + 1)
        if (c := self._pcut(j, f, v, tok, hz)) < hz:
            hz = c
        return hz

    def _plain(self, j: int, P: int, Pc: int, hz: int, pr: float, ctx0: list[int]) -> int:
        """Column j (no drafts, no outcome) decoding plainly from pass P while its answer holds
        (`_plain_run`, the subclass's rule): recorded, moved past. Returns the horizon."""
        st, com, ctx = self._st, self._com, self._ctx
        h = self._plain_run(j, P, Pc, hz, pr, ctx0)
        st.cycles[j].append((P, P + h - 1, 0, com[j], None, None))
        for p in range(P, P + h):
            st.vp.append(p)
            st.vj.append(j)
            st.dv.append(0)
            st.acc.append(0)
        com[j] += h
        ctx[j] += h
        self._start[j] = P + h
        if (c := self._pcut(j, P, P + h - 1, ctx[j] - h, hz)) < hz:
            hz = c
        if com[j] >= self._out[j]:
            self._done[j] = True
            hz = min(hz, P + h)
        return hz

    def _page_sums(self, pages, n: int):
        """`PageSums.cover` for `pages` (pages free, page size, shared tokens per column; None:
        no bound)."""
        return PageSums(*pages, n).cover if pages is not None else _never

    def _offsets(self, cap: int) -> np.ndarray:
        """Start offsets of whole()'s rows for one column (a planner's two cycles at once): this
        cycle (0), the next after b accepted of more drafts (1 .. cap) and after all b (2 .. cap + 1)."""
        o = self._offs.get(cap)
        if o is None:
            o = self._offs[cap] = np.array([0, *range(1, cap + 1), *range(2, cap + 2)], np.int64)
        return o

    def _misses(self, J: list[int], tab: dict, reach: list[int] | None = None) -> list[int]:
        """The columns in J whose table in `tab` (by request: first cycle start, last start covered,
        ..., context less committed) does not cover `reach` cycle starts (default 1) from their
        committed position, within their output. Drops the entries of finished requests first
        when there are many, so a table is never reused for another request's state."""
        com, ctx, rids, out = self._com, self._ctx, self._rids, self._out
        reach = reach or [1] * len(J)
        miss = [j for j, h in zip(J, reach) if not ((t := tab.get(rids[j])) is not None and 0 <= com[j] - t[0]
                                                    and min(com[j] + h, out[j]) - t[0] <= t[1]
                                                    and ctx[j] - com[j] == t[3])]
        if miss and len(tab) > 4 * len(rids) + 64:  # entries of finished requests
            keep = set(rids)
            for rid in [x for x in tab if x not in keep]:
                del tab[rid]
        return miss

    def _tables(self, J: list[int], tab: dict, fill, reach: list[int] | None = None) -> None:
        """Tables of draws by (cycle start, drafts) for the columns in J whose table does not reach
        `reach` starts from their committed position (within their output): ROWS starts from
        there, drawn in one call. fill(ids, pos, draft index, context) -> vals(mask, lo, hi)."""
        com, ctx, rids, out = self._com, self._ctx, self._rids, self._out
        miss = self._misses(J, tab, reach)
        if not miss:
            return
        md = self._md
        ids, pos, dx, cx, spans = [], [], [], [], []
        for j in miss:
            c0, o = com[j], out[j]
            rows = max(min(self.ROWS, o - c0), 1)
            c = c0 + np.arange(rows)
            i = np.arange(md)
            ok = i[None, :] < np.minimum(md, o - c - 1)[:, None]  # drafts it may make from there
            cc = np.broadcast_to(c[:, None], ok.shape)[ok]
            ids.append(np.full(len(cc), rids[j], np.int64))
            pos.append(cc)
            dx.append(np.broadcast_to(i[None, :], ok.shape)[ok])
            cx.append(cc + (ctx[j] - c0))
            spans.append((j, c0, rows, ok, ctx[j] - c0))
        vals = fill(np.concatenate(ids), np.concatenate(pos), np.concatenate(dx), np.concatenate(cx))
        lo = 0
        for j, c0, rows, ok, off in spans:
            k = int(ok.sum())
            tab[rids[j]] = (c0, rows, vals(ok, lo, lo + k), off, False)
            lo += k

    def _outcome_fill(self, ids, pos, dx, cx):
        res = self._verify(ids, pos, dx + 1, cx)  # (prefix draws: `_prefix_rows`)

        def vals(ok, lo, hi):
            T = np.zeros((len(ok), self._md + 1), np.int64)
            T[:, 1:][ok] = res[lo:hi]
            return T.tolist()
        return vals

    def _outcome(self, j: int, x: int) -> int:
        """Accepted drafts of column j's verification of x > 0 drafts at its committed position now."""
        rid, c = self._rids[j], self._com[j]
        t = self._vtab.get(rid)
        if t is None or not 0 <= c - t[0] < t[1] or self._ctx[j] - c != t[3]:
            if getattr(self._verify, "prefix_draws", False):
                self._prefix_rows(j)
            else:
                self._tables([j], self._vtab, self._outcome_fill)
            t = self._vtab[rid]
        v = t[2][c - t[0]]
        if t[4]:  # prefix draws: the most drafts' outcome there, min(x, it)
            return x if x < v else v
        return v[x]

    def _prefix_rows(self, j: int) -> None:
        """Column j's outcome table where the model's draws are prefix draws (`outcomes.OutcomeTable
        .run`): per cycle start from its committed position, ROWS of them, the accepted drafts of a
        verification of the most it can hold there (min(max_draft, output - start - 1)), one draw
        per start in one call; a verification of fewer accepts min(drafts, that)."""
        tab, rids = self._vtab, self._rids
        if len(tab) > 4 * len(rids) + 64:  # entries of finished requests
            keep = set(rids)
            for rid in [x for x in tab if x not in keep]:
                del tab[rid]
        c0, o, off = self._com[j], self._out[j], self._ctx[j] - self._com[j]
        rows = max(min(self.ROWS, o - c0), 1)
        k = min(rows, o - c0 - 1)  # starts with a draft to verify (the last position has none)
        if k > 0:
            c = np.arange(c0, c0 + k, dtype=np.int64)
            m = np.minimum(self._md, o - 1 - c)
            a = self._verify(np.full(k, rids[j], np.int64), c, m, c + off).tolist()
        else:
            a = []
        tab[rids[j]] = (c0, rows, a + [0] * (rows - len(a)), off, True)

    def _pass_order(self, st: Stretch, start, done, counts, relax, pool, fold, own, horizon, whole_cycles, pooled,
                    pending=None) -> None:
        """The plan in pass order (`entropy_stretch`, `aspire_stretch`): at the earliest pass P on
        which a column not done and inside the horizon (`horizon()`, which planning moves) is asked
        next, every outcome before P folded into the pool (`fold`); the columns asked there whose
        relaxation towards the pool is due relax (recorded in `st.relax`) and, like those with an
        estimate of their own, are planned cycle by cycle (`whole_cycles`); those with no outcome
        yet at the pool's rate (`pooled`), except, given `pending`, those whose first outcome is
        not folded yet."""
        acc = self.pol.acc
        com, rids = self._com, self._rids
        cols = range(len(rids))
        while True:
            hz = horizon()
            need = [j for j in cols if not done[j] and start[j] < hz]
            if not need:
                return
            P = min(start[j] for j in need)
            fold(P)  # every outcome before P is known: the others' cycles are planned past it
            at = [j for j in need if start[j] == P]
            B = []
            for j in at:
                if counts[j] is not None and relax[j] is not None:  # relaxes towards the pool, then its own
                    p0 = relax[j]
                    acc.relax(counts[j], com[j] - p0, pool[0] / pool[1])
                    st.relax.append((P, rids[j], p0, com[j]))
                    relax[j] = None
                    B.append(j)
                elif own(j):
                    B.append(j)
            if B:
                whole_cycles(B)
            hz = horizon()
            if pending is None:
                A = [j for j in at if counts[j] is None and not done[j] and start[j] < hz]
            else:
                A = [j for j in at if counts[j] is None and not pending[j] and not done[j] and start[j] < hz]
            if A:
                pooled(A, P)

    def _replay(self, st: Stretch, n: int) -> list[tuple]:
        """The estimates as the first n passes leave them: each pass's relaxations (looks), then
        its outcomes (`on_verify`, in running order); each request's last look. Returns each
        column's cycle on the last pass (n - 1)."""
        pol = self.pol
        acc = pol.acc
        outs = sorted((p, j, x, a) for p, j, x, a in zip(st.vp, st.vj, st.dv, st.acc) if x > 0 and p < n)
        rel = [x for x in st.relax if x[0] < n]  # in pass order
        ids, dr, ac = [], [], []

        def flush():  # the outcomes gathered, in pass and running order: one call for many passes
            if ids:
                pol.on_verify(np.array(ids, np.int64), np.array(dr, np.int64), np.array(ac, np.int64))
                ids.clear(), dr.clear(), ac.clear()

        def look(x):  # a relaxation: the look at position pos, the last one at p0
            _, rid, p0, pos = x
            acc.seen[rid] = p0
            acc.get(np.array([rid], np.int64), np.array([pos], np.int64))

        ri = 0
        for p, j, x, a in outs:
            if ri < len(rel) and rel[ri][0] <= p:  # a pass's looks come before its outcomes
                flush()
                while ri < len(rel) and rel[ri][0] <= p:
                    look(rel[ri])
                    ri += 1
            ids.append(st.ids[j])
            dr.append(x)
            ac.append(a)
        flush()
        for x in rel[ri:]:
            look(x)
        m = n - 1
        last = []
        for j, rid in enumerate(st.ids):
            cyc = st.cycles[j]
            k = len(cyc) - 1
            while cyc[k][0] > m:
                k -= 1
            f, v, d0, c0, rec, more = cyc[k]
            if rec is None:  # plain passes: looked at each
                acc.seen[rid] = c0 + m - f
            elif v != m:  # drafting on the last pass
                acc.seen[rid] = c0
            elif v - f + d0 == 0:  # a plain pass
                acc.seen[rid] = c0
            # a verification with drafts on the last pass: its outcome removed the look (on_verify)
            last.append((k, cyc[k]))
        return last
