"""Keyed verification outcomes drawn ahead by output position, for the fast path's cycles.

A policy with one target after every verification (`FastPath.cycles`: `fixed-k`, `sync:k=N`)
makes a request that starts a cycle at committed position p check x(p) = min(K, output - p - 1,
max_draft) drafts at context p + (context - committed): everything but p is fixed while it
decodes. The acceptance model's draws are keyed (a row's outcome depends on its own arguments
only, never on the call it is drawn in or on the other rows), so one call draws the outcome at
every position a request's next cycles can start from, and a segment's chain of cycles then
needs no further call: position p -> p + accepted(p) + 1. A cycle that checks another count
(the first after admission, a synchronous batch cut short by another request's end) is drawn on
its own, as before.

Where the model's draws are prefix draws (`prefix_draws`: each draft's acceptance is fixed by its
position, and a verification of x drafts accepts the longest accepted prefix, so min(x, the first
rejected draft's index)), a table with K = max_draft serves every count (`run`): `sync` with auto
k, whose counts change from cycle to cycle.
"""

from __future__ import annotations

import numpy as np

I64 = np.int64


class OutcomeTable:
    """Outcomes by request id and committed position, kept across segments (a request's entries
    are replaced when it needs positions past them; `forget` drops finished requests')."""

    def __init__(self, K: int, max_draft: int, rows: int):
        self.K, self.md, self.rows = K, max_draft, rows
        self.tab: dict[int, tuple[int, int, list[int]]] = {}  # rid -> (first position, ctx - committed, outcomes)
        self.pending: list[tuple[int, int, int, int]] = []  # rid, first position, context there, output

    def get(self, rid: int, c: int, x: int, cx: int, out: int) -> int | None:
        """Accepted drafts of request rid's verification of x drafts from committed c at context
        cx, if drawn already."""
        t = self.tab.get(rid)
        if t is None:
            return None
        i = c - t[0]
        if 0 <= i < len(t[2]) and cx - c == t[1] and x == min(self.K, out - c - 1, self.md):
            return t[2][i]
        return None

    def run(self, rid: int, c: int, cx: int) -> int | None:
        """The drawn outcome at committed c (context cx) whatever its draft count, if drawn
        already: with K = max_draft and a model of prefix draws (`prefix_draws`), a verification
        of x drafts there accepts min(x, this)."""
        t = self.tab.get(rid)
        if t is None:
            return None
        i = c - t[0]
        if 0 <= i < len(t[2]) and cx - c == t[1]:
            return t[2][i]
        return None

    def covers(self, rid: int, c: int) -> bool:
        t = self.tab.get(rid)
        return t is not None and 0 <= c - t[0] < len(t[2])

    def want(self, rid: int, c: int, cx: int, out: int) -> None:
        """Draw with the next call the verifications request rid would make starting a cycle at
        positions c, c + 1, ... (up to `rows` of them, while a draft fits before its end)."""
        if min(c + self.rows, out - 1) > c:
            self.pending.append((rid, c, cx, out))

    def rows_wanted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids, committed, drafts, context) of the rows `want` asked for, for one call."""
        m = [min(self.rows, out - 1 - c) for _, c, _, out in self.pending]
        total = sum(m)
        first = np.repeat(np.cumsum([0] + m[:-1]), m)
        i = np.arange(total, dtype=I64) - first  # position offset within each request's rows
        ids = np.repeat(np.array([x[0] for x in self.pending], I64), m)
        com = np.repeat(np.array([x[1] for x in self.pending], I64), m) + i
        ctx = np.repeat(np.array([x[2] for x in self.pending], I64), m) + i
        out = np.repeat(np.array([x[3] for x in self.pending], I64), m)
        drafts = np.minimum(np.minimum(out - com - 1, self.md), self.K)
        self._m = m
        return ids, com, drafts, ctx

    def store(self, res: list[int]) -> None:
        """The call's results for the rows of `rows_wanted`, in order."""
        row = 0
        for (rid, c, cx, _), m in zip(self.pending, self._m):
            self.tab[rid] = (c, cx - c, res[row:row + m])
            row += m
        self.pending = []

    def forget(self, keep) -> None:
        """Drop the entries of requests not in `keep`."""
        self.tab = {rid: v for rid, v in self.tab.items() if rid in keep}
