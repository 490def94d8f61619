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


def accept_draws(seed: int, rid: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """logit(U) of each position's accept draw and its entropy noise: the independent models'
    arrays (a draft at draft index j is accepted iff logit(U) < logit(p_j))."""
    from scipy.special import logit

    from . import keyed

    accept, noise = keyed.request_keys(seed, (keyed.ACCEPT, keyed.ENTROPY), rid, n)
    with np.errstate(divide="ignore"):
        lu = logit(keyed.keys_to_uniform(accept))
    return lu, keyed.keys_to_normal(noise)


class KeyedDraws:
    """What the keyed acceptance models share: two arrays per output position in a `PositionStore`
    (`_store`: the accept draw, then the entropy noise), begun and ended with the request and
    gathered per call. Draws depend on (seed, request, position) only, so p_j is by draft index
    (`prefix_draws`: the fast path may draw a cycle's outcomes ahead)."""

    prefix_draws = True
    _store: PositionStore

    def begin(self, rid, prompt_tokens, output_tokens) -> None:
        self._store.begin(rid, output_tokens)

    def end(self, rid) -> None:
        self._store.end(rid)

    def _rows(self, rid, out_pos, j: np.ndarray) -> np.ndarray:
        """The accept arrays of each request's positions out_pos + j, as (requests, len(j))."""
        first = np.asarray(out_pos, np.int64)
        st = self._store.ensure(rid, first + len(j))
        return self._store.bufs[0][(st + first)[:, None] + j]

    def _at(self, rid, out_pos, draft_pos: np.ndarray) -> np.ndarray:
        """Buffer offsets of each draft's position."""
        pos = np.asarray(out_pos, np.int64) + draft_pos
        return self._store.ensure(rid, pos + 1) + pos

    @staticmethod
    def _accepted(fail: np.ndarray, j: np.ndarray, drafted: np.ndarray) -> np.ndarray:
        """Drafts accepted per row: up to the first failure, at most `drafted` (the spare column
        past the drafts always fails)."""
        fail |= j >= drafted[:, None]
        return fail.argmax(axis=1)
