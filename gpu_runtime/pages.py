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
        ts = upload([start, count, last_len, indices], [np.int32] * 4, device)
        return cls(*ts, count.copy(), last_len.copy(), num_kv_heads, page_size)

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
    return PageLists.from_host(*full_page_arrays(page_tables, kv_lens, num_kv_heads, page_size), num_kv_heads,
                               page_size, device)


def full_page_arrays(page_tables, kv_lens, num_kv_heads: int, page_size: int) -> tuple:
    """`full_page_lists` on the host: (start, count, last_len, indices) numpy arrays."""
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    n = pages_for(kv_lens, page_size)
    have = np.fromiter(map(len, page_tables), np.int64, len(page_tables))
    assert (have >= n).all(), "page table shorter than its context"
    offs = np.cumsum(n) - n
    indices = (np.concatenate([pt[:k] for pt, k in zip(page_tables, n.tolist())]).astype(np.int64, copy=False)
               if len(n) else np.zeros(0, np.int64))
    last = np.repeat(last_page_len(kv_lens, page_size), num_kv_heads)
    return np.repeat(offs, num_kv_heads), np.repeat(n, num_kv_heads), last, indices


def concat_page_arrays(parts: list[tuple], layout: list[int] | None = None) -> tuple:
    """`concat_page_lists` on the host, over `(start, count, last_len, indices)` tuples."""
    layout = list(range(len(parts))) if layout is None else list(layout)
    offs = np.zeros(len(parts), np.int64)
    offs[layout] = np.cumsum([0] + [len(parts[i][3]) for i in layout[:-1]])
    return (np.concatenate([np.asarray(p[0], np.int64) + o for p, o in zip(parts, offs)]),
            np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
            np.concatenate([parts[i][3] for i in layout]))


def token_slots(page_tables, start: np.ndarray, q_len: np.ndarray, page_size: int):
    """(position, physical page, offset in the page) of every query token of a pass, requests back
    to back (request r's tokens are positions `start[r] .. start[r] + q_len[r]`, whose KV lands in
    its page table's pages). Vectorised over the pass: per request only a slice of the pages its
    tokens touch (a loop of a few numpy calls per request took most of a small pass's host time)."""
    start = np.asarray(start, np.int64)
    q_len = np.asarray(q_len, np.int64)
    n = len(q_len)
    if n == 0 or not q_len.any():
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    lo = start // page_size
    hi = np.where(q_len > 0, (start + q_len - 1) // page_size + 1, lo)  # one past the last page touched
    touched = np.concatenate([np.asarray(t[a:b], np.int64) for t, a, b in zip(page_tables, lo.tolist(), hi.tolist())])
    req = np.repeat(np.arange(n), q_len)
    first = np.cumsum(q_len) - q_len  # each request's first token in the pass
    pos = np.arange(len(req)) - first[req] + start[req]
    base = np.cumsum(hi - lo) - (hi - lo)  # each request's first touched page in `touched`
    page = touched[base[req] + pos // page_size - lo[req]]
    return pos, page, pos % page_size


def to_device(a, dtype, device) -> torch.Tensor:
    """A host array as a tensor of numpy `dtype` (None: its own) on `device`. On a GPU through pinned memory and
    without waiting: `torch.as_tensor(..., device="cuda")` synchronises the stream after its copy,
    so every such upload would make the host wait for every pass already queued, and the runtime's
    overlapped loop (engine.py) prepares a pass while the previous one runs. Torch's pinned-memory
    cache keeps the staging block until the copy has run."""
    t = torch.from_numpy(np.ascontiguousarray(a, dtype=dtype))
    if not isinstance(device, torch.device):
        device = torch.device(device)
    if device.type != "cuda":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def upload(arrays, dtypes, device, pack: bool | None = None) -> list[torch.Tensor]:
    """Host arrays as device tensors of numpy `dtypes` (None: the array's own). On a GPU all of them
    travel in one copy: packed into one pinned buffer (each array at a 16-byte boundary, as Triton
    specialises pointers on) and split into views of one device buffer. Measured on the H200 host
    with the GPU busy (benchmarks/upload_cost.py, 25 arrays): 0.18 ms a pass packed, 0.67 ms one
    pinned copy per array, 3.1 ms with `torch.as_tensor(..., device="cuda")` (a stream sync each).
    `pack` (default: on a GPU) packs on the CPU too (tests)."""
    if not isinstance(device, torch.device):
        device = torch.device(device)
    cuda = device.type == "cuda"
    if not (cuda if pack is None else pack):
        return [to_device(a, dt, device) for a, dt in zip(arrays, dtypes)]
    host = [np.ascontiguousarray(a, dtype=dt) for a, dt in zip(arrays, dtypes)]
    offs, total = [], 0
    for h in host:
        offs.append(total)
        total += -(-h.nbytes // _ALIGN) * _ALIGN
    buf = torch.empty(max(total, _ALIGN), dtype=torch.uint8, pin_memory=cuda)
    flat = buf.numpy()
    for h, o in zip(host, offs):
        flat[o:o + h.nbytes] = h.reshape(-1).view(np.uint8)
    dev = buf.to(device, non_blocking=True) if cuda else buf  # the host allocator keeps `buf` until the copy has run
    return [dev[o:o + h.nbytes].view(_TORCH[h.dtype]).view(h.shape) for h, o in zip(host, offs)]


_ALIGN = 16
_TORCH = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32, np.dtype(np.float64): torch.float64,
          np.dtype(np.float32): torch.float32, np.dtype(np.bool_): torch.bool}


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
                     to_device(counts, np.int32, selected.device),
                     to_device(last, np.int32, selected.device),
                     phys.reshape(-1).contiguous(), counts, last, num_kv_heads, page_size)
