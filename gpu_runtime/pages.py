"""Page lists per (request, KV head): what every attention kernel in this package reads.

The KV cache is `[num_pages, num_kv_heads, page_size, head_dim]` (one physical page holds a span of
`page_size` tokens of one request for every KV head, each head's span contiguous). A *row* is one
(request, KV head) pair, `row = request * num_kv_heads + head`; its list names the physical pages
it attends to, in token order, the last one holding `last_len` tokens.

Rows are stored as `start` + `count` into one `indices` array. A CSR `indptr` is the special case
`start = indptr[:-1]`, `count = diff(indptr)`; selections use a padded `[rows, K]` matrix
(`start = row * K`) so building them needs no device-to-host sync. Host (numpy) copies of `count`
and `last_len` travel along: the work planner splits the KV on the host without reading the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class PageLists:
    start: torch.Tensor  # (rows,) int32: offset of the row's first page id in `indices`
    count: torch.Tensor  # (rows,) int32: pages in the row
    last_len: torch.Tensor  # (rows,) int32: tokens in the row's last page (1..page_size)
    indices: torch.Tensor  # int32 physical page ids
    count_np: np.ndarray  # host copies, for planning
    last_len_np: np.ndarray
    num_kv_heads: int
    page_size: int

    @property
    def num_rows(self) -> int:
        return len(self.count_np)

    @property
    def kv_len_np(self) -> np.ndarray:
        """Tokens each row attends to."""
        c = self.count_np.astype(np.int64)
        return np.where(c > 0, (c - 1) * self.page_size + self.last_len_np, 0)

    @classmethod
    def from_host(cls, start, count, last_len, indices, num_kv_heads, page_size, device) -> "PageLists":
        start, count, last_len = (np.asarray(a, dtype=np.int64) for a in (start, count, last_len))
        assert ((last_len >= 1) & (last_len <= page_size) | (count == 0)).all(), "last_len out of range"
        t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.int32), device=device)  # noqa: E731
        return cls(t(start), t(count), t(last_len), t(indices), count.copy(), last_len.copy(),
                   num_kv_heads, page_size)

    @classmethod
    def from_csr(cls, indptr, indices, last_len, num_kv_heads, page_size, device) -> "PageLists":
        indptr = np.asarray(indptr, dtype=np.int64)
        return cls.from_host(indptr[:-1], np.diff(indptr), last_len, indices, num_kv_heads, page_size, device)


def pages_for(tokens, page_size: int) -> np.ndarray:
    return (np.asarray(tokens, dtype=np.int64) + page_size - 1) // page_size


def last_page_len(tokens, page_size: int) -> np.ndarray:
    t = np.asarray(tokens, dtype=np.int64)
    return np.where(t > 0, (t - 1) % page_size + 1, 0)


def full_page_lists(page_tables, kv_lens, num_kv_heads: int, page_size: int, device) -> PageLists:
    """Every page of each request, the same list for each of its KV heads (decode, verify, prefill).

    `page_tables[r]` lists request r's physical pages in token order (at least `ceil(kv_lens[r] /
    page_size)` of them); `kv_lens[r]` counts the tokens attended, this pass's own tokens included.
    A request's KV-head rows share one copy of its page ids (`start` equal): a pass's host work and
    its host-to-device copy are a KV-head count smaller (8x for Llama-3.1-8B).
    """
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    n = pages_for(kv_lens, page_size)
    per_req = [np.asarray(pt, dtype=np.int64)[:k] for pt, k in zip(page_tables, n)]
    assert all(len(p) == k for p, k in zip(per_req, n)), "page table shorter than its context"
    offs = np.concatenate([[0], np.cumsum(n)[:-1]]) if len(n) else np.zeros(0, np.int64)
    indices = np.concatenate(per_req) if len(per_req) else np.zeros(0, np.int64)
    last = np.repeat(last_page_len(kv_lens, page_size), num_kv_heads)
    return PageLists.from_host(np.repeat(offs, num_kv_heads), np.repeat(n, num_kv_heads), last, indices,
                               num_kv_heads, page_size, device)


def concat_page_lists(parts: list[PageLists], layout: list[int] | None = None) -> PageLists:
    """Rows of several lists, in order (e.g. draft rows from a selection, then full verify rows).
    `layout`: the order the parts' page ids are stored in (default the rows' order): a part stored
    first sits at offset 0 whatever the other parts' lengths."""
    p0 = parts[0]
    layout = list(range(len(parts))) if layout is None else list(layout)
    offs = np.zeros(len(parts), np.int64)
    offs[layout] = np.cumsum([0] + [len(parts[i].indices) for i in layout[:-1]])
    start = torch.cat([p.start + int(o) for p, o in zip(parts, offs)])
    return PageLists(start, torch.cat([p.count for p in parts]), torch.cat([p.last_len for p in parts]),
                     torch.cat([parts[i].indices for i in layout]), np.concatenate([p.count_np for p in parts]),
                     np.concatenate([p.last_len_np for p in parts]), p0.num_kv_heads, p0.page_size)


def selected_page_lists(page_table: torch.Tensor, selected: torch.Tensor, counts, kv_lens,
                        num_kv_heads: int, page_size: int) -> PageLists:
    """Rows from a selection of logical pages.

    `page_table`: `[requests, max_pages]` physical ids (device). `selected`: `[requests * heads, K]`
    logical page numbers, ascending in each row's first `counts[row]` entries (the rest ignored).
    The request's last page must be selected (recent pages are always kept), so each row's last page
    holds the request's last-page length.
    """
    rows, k = selected.shape
    req = torch.arange(rows, device=selected.device) // num_kv_heads
    sel = selected.clamp(0, page_table.shape[1] - 1).long()
    phys = torch.gather(page_table[req].long(), 1, sel).to(torch.int32)
    last = np.repeat(last_page_len(kv_lens, page_size), num_kv_heads)
    counts = np.asarray(counts, dtype=np.int64)
    return PageLists(torch.arange(rows, dtype=torch.int32, device=selected.device) * k,
                     torch.as_tensor(counts, dtype=torch.int32, device=selected.device),
                     torch.as_tensor(last, dtype=torch.int32, device=selected.device),
                     phys.reshape(-1).contiguous(), counts, last, num_kv_heads, page_size)
