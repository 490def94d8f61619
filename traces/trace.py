"""The in-memory trace: columnar, one numpy array per field (never one Python object per request).

Canonical on-disk form is JSONL (see `canonical.py`): an optional header line `{"spsim_trace": 1,
...}` then one request per line with `id`, `arrival_s`, `prompt_tokens`, `output_tokens`, optional
`prefix_blocks`, `slo` and `extra`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SCHEMA_VERSION = 1


@dataclass
class Trace:
    ids: np.ndarray  # str per request, unique: readers give fixed-width numpy str ('U'), no object per row
    arrival_s: np.ndarray  # float64, seconds from the first arrival, non-decreasing
    prompt_tokens: np.ndarray  # int64 > 0
    output_tokens: np.ndarray  # int64 > 0
    # Prefix blocks in CSR form: request i holds prefix_ids[prefix_indptr[i]:prefix_indptr[i+1]].
    # Both None when the source has no prefix information.
    prefix_indptr: np.ndarray | None = None
    prefix_ids: np.ndarray | None = None
    slo_ttft_s: np.ndarray | None = None  # float64, NaN where a request has none
    slo_tpot_s: np.ndarray | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # source columns, one array each
    meta: dict = field(default_factory=dict)  # header: source format, block_size, name, ...
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows skipped while reading
    warnings: dict[str, int] = field(default_factory=dict)  # reason -> rows kept but flagged while reading

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def block_size(self) -> int | None:
        return self.meta.get("block_size")

    def prefix_blocks(self, i: int) -> np.ndarray:
        if self.prefix_indptr is None:
            return np.empty(0, np.int64)
        return self.prefix_ids[self.prefix_indptr[i]:self.prefix_indptr[i + 1]]

    def take(self, idx: np.ndarray) -> "Trace":
        """Rows `idx` (in that order), keeping every column and the metadata."""
        idx = np.asarray(idx, dtype=np.int64)
        pi = pids = None
        if self.prefix_indptr is not None:
            lens = np.diff(self.prefix_indptr)[idx]
            pi = np.zeros(len(idx) + 1, np.int64)
            np.cumsum(lens, out=pi[1:])
            starts = self.prefix_indptr[idx]
            # gather the selected CSR rows without a Python loop per request
            rep = np.repeat(starts - pi[:-1], lens)
            pids = self.prefix_ids[np.arange(pi[-1]) + rep]
        sub = lambda a: None if a is None else a[idx]  # noqa: E731
        return Trace(self.ids[idx], self.arrival_s[idx], self.prompt_tokens[idx], self.output_tokens[idx],
                     pi, pids, sub(self.slo_ttft_s), sub(self.slo_tpot_s),
                     {k: v[idx] for k, v in self.extra.items()}, dict(self.meta), dict(self.skipped),
                     dict(self.warnings))
