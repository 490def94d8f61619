"""Per-request, per-position arrays kept in flat numpy buffers, so a call over r requests is one
gather (`start[rid] + pos`), not a Python loop over requests.

`build(rid, n)` (given by the model) returns the arrays for positions 0..n-1 of a request; they
must depend only on (seed, rid, position), so a longer rebuild has the same prefix and results never
depend on call order or on when a request was begun. Ended requests' space is reclaimed by
compaction when the buffers fill.

`begin` only records the length a request will need; its arrays are built on first use (`ensure`).
A request that never drafts (autoregressive runs, AR-like requests) never pays for a build, which
costs far more than the rest of its simulation.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

PAD = 64  # positions built past a request's output length (drafts never pass it; cheap insurance)


class PositionStore:
    def __init__(self, n_arrays: int, build: Callable[[int, int], tuple]):
        self.build_fn = build
        self.bufs = [np.empty(1 << 16) for _ in range(n_arrays)]
        self.start = np.full(1024, -1, np.int64)  # rid -> offset into the buffers
        self.length = np.zeros(1024, np.int64)  # 0 when not built or ended
        self.want: dict[int, int] = {}  # rid -> length to build on first use (begun, not built)
        self.used = 0
        self.live = 0  # positions held by requests not yet ended

    def build(self, rid: int, n: int) -> None:
        if rid < 0:
            raise ValueError(f"request id {rid} must be >= 0")
        arrays = self.build_fn(rid, n)
        if rid >= len(self.start):
            grow = max(rid + 1, 2 * len(self.start))
            self.start = np.concatenate([self.start, np.full(grow - len(self.start), -1, np.int64)])
            self.length = np.concatenate([self.length, np.zeros(grow - len(self.length), np.int64)])
        self.live -= int(self.length[rid])
        self.length[rid] = 0
        if self.used + n > len(self.bufs[0]):
            self._compact(n)
        s = self.used
        for buf, a in zip(self.bufs, arrays):
            buf[s:s + n] = a
        self.start[rid], self.length[rid] = s, n
        self.used += n
        self.live += n

    def _compact(self, need: int) -> None:
        live = np.flatnonzero(self.length > 0)
        cap = len(self.bufs[0])
        while self.live + need > cap // 2:
            cap *= 2
        new = [np.empty(cap) for _ in self.bufs]
        s = 0
        for rid in live.tolist():  # rare (amortised); one slice copy per live request
            a, n = self.start[rid], self.length[rid]
            for nb, ob in zip(new, self.bufs):
                nb[s:s + n] = ob[a:a + n]
            self.start[rid] = s
            s += n
        self.bufs, self.used = new, s

    def begin(self, rid: int, n: int) -> None:
        rid, n = int(rid), int(n) + PAD
        if not (rid < len(self.length) and self.length[rid] >= n):
            self.want[rid] = n  # built by the first `ensure` that needs it

    def end(self, rid: int) -> None:
        rid = int(rid)
        self.want.pop(rid, None)
        if rid < len(self.length) and self.length[rid] > 0:
            self.live -= int(self.length[rid])
            self.start[rid], self.length[rid] = -1, 0

    def ensure(self, rid: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Start offsets of `rid`, (re)building any request whose arrays end before `end`."""
        try:
            if (end <= self.length[rid]).all():
                return self.start[rid]
        except IndexError:
            pass
        for r, e in zip(np.asarray(rid).tolist(), np.broadcast_to(end, np.shape(rid)).tolist()):  # slow path
            if r < 0:
                raise ValueError(f"request id {r} must be >= 0")
            if r >= len(self.length) or self.length[r] < e:
                self.build(r, max(int(e) + PAD, self.want.pop(r, 0)))
        return self.start[rid]
