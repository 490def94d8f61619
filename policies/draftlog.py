"""Per-request draft lengths over time, for a sample of requests: what makes a policy's decisions
visible (ASPIRE's draft length per request moving with load and acceptance).

The batcher (step path, `Batcher.record_verifications`) and the simulator's fast path (cycle
segments, `spsim.simulator.segment`) hand every verification with drafts to `DraftLog.add`; the
log keeps those of sampled requests only: `sample` request ids chosen by a hash of the id
(deterministic: the same requests whatever the run, the path or the replica), so memory stays
bounded by the sample's verifications. Recording reads the outcomes and changes nothing;
`Batcher.draft_log` is None (the default) when no one asked for it, and then costs one attribute
test per verification call.
"""

from __future__ import annotations

import numpy as np

DEFAULT_SAMPLE = 24


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 of each id: a fixed pseudo-random order of request ids."""
    z = (x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sample_ids(n: int, sample: int) -> np.ndarray:
    """The `sample` request ids (of 0..n-1) a log keeps, in increasing order."""
    if sample >= n:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.argsort(_mix(np.arange(n)), kind="stable")[:sample]).astype(np.int64)


class DraftLog:
    def __init__(self, n_requests: int, sample: int = DEFAULT_SAMPLE):
        if sample < 1:
            raise ValueError("sample must be >= 1")
        self.ids = sample_ids(n_requests, sample)
        self.keep = np.zeros(n_requests, bool)
        self.keep[self.ids] = True
        self._parts: list[tuple[np.ndarray, ...]] = []

    def add(self, rids, drafted, accepted, times) -> None:
        """Verifications with drafts: request ids, drafts held, drafts accepted, end times (s)."""
        rids = np.asarray(rids, np.int64)
        m = self.keep[rids]
        if not m.any():
            return
        t = np.broadcast_to(np.asarray(times, np.float64), rids.shape)
        self._parts.append((rids[m].copy(), np.asarray(drafted, np.int64)[m].copy(),
                            np.asarray(accepted, np.int64)[m].copy(), t[m].copy()))

    def records(self) -> dict[str, np.ndarray]:
        """Every kept verification, by request then time: `rid`, `t_s`, `drafted`, `accepted`."""
        if not self._parts:
            z = np.zeros(0, np.int64)
            return {"rid": z, "t_s": np.zeros(0), "drafted": z, "accepted": z}
        rid, d, a, t = (np.concatenate(x) for x in zip(*self._parts))
        order = np.lexsort((t, rid))
        return {"rid": rid[order], "t_s": t[order], "drafted": d[order], "accepted": a[order]}

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.records())
