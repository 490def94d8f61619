"""Which pages a drafting request attends to: Quest bounds, last-verify scores, static window.

Plain PyTorch (importable without triton); the Quest scoring kernel is in `quest.py`.

Every selector returns a padded `[requests * kv_heads, K]` int64 matrix of *logical* page numbers
(ascending in each row's first `counts[row]` entries, -1 after) plus the host `counts`; `pages.selected_page_lists`
maps them through the page table for the attention kernel. A row keeps `min(pages, budget pages)`
pages, budget pages = `max(budget // page_size, sink + recent)`: the budget counts sink and recent
pages, which are always kept (the recent page holds the draft's own token, and must be kept).
"""

from __future__ import annotations

import numpy as np
import torch

from . import dispatch
from .pages import pages_for, to_device


def budget_pages(budget_tokens, page_size: int, sink: int = 1, recent: int = 1):
    """Pages a draft keeps at most: the budget in whole pages, never fewer than sink + recent
    (scalars or arrays)."""
    return np.maximum(np.asarray(budget_tokens, dtype=np.int64) // page_size, sink + recent)


def selection_counts(kv_lens, budget_tokens, page_size: int, sink: int, recent: int, num_kv_heads: int):
    """Pages each row keeps (host, per row)."""
    assert recent >= 1, "the newest page (the draft's own token) must be kept"
    n = pages_for(kv_lens, page_size)
    return np.repeat(np.minimum(n, budget_pages(budget_tokens, page_size, sink, recent)), num_kv_heads)


class PageMeta:
    """Per (physical page, KV head) elementwise min and max of its keys (Quest's page summary).

    Costs 2 / page_size of the key memory, in the KV dtype. Kept current by `append`, which the
    runtime calls with the same keys it writes to the cache (prefill and each decode token).
    """

    def __init__(self, num_pages: int, num_kv_heads: int, head_dim: int, dtype, device):
        # one spare row past the last page: resets of pages not starting here go there (no mask
        # compaction, so no device-to-host sync: appends can run inside a CUDA graph)
        self._kmin = torch.full((num_pages + 1, num_kv_heads, head_dim), float("inf"), dtype=dtype, device=device)
        self._kmax = torch.full_like(self._kmin, float("-inf"))
        self.kmin, self.kmax = self._kmin[:num_pages], self._kmax[:num_pages]
        self.num_pages = num_pages

    def append(self, k_new: torch.Tensor, page_ids: torch.Tensor, offsets: torch.Tensor) -> None:
        """k_new `[n, kv_heads, d]` written at (page_ids, offsets); a page's first token resets it."""
        fresh = torch.where(offsets == 0, page_ids.long(), self.num_pages)
        self._kmin.index_fill_(0, fresh, float("inf"))
        self._kmax.index_fill_(0, fresh, float("-inf"))
        src = k_new.to(self.kmin.dtype).reshape(len(page_ids), -1)
        idx = page_ids.long()[:, None].expand_as(src)
        self.kmin.view(self.kmin.shape[0], -1).scatter_reduce_(0, idx, src, "amin")
        self.kmax.view(self.kmax.shape[0], -1).scatter_reduce_(0, idx, src, "amax")


def top_pages(scores: torch.Tensor, counts) -> torch.Tensor:
    """Each row's `counts[row]` best pages, ascending, in a padded `[rows, K]` int64 matrix
    (-1 past the count). The Triton select kernel where it runs, else torch.topk + sort."""
    counts = np.asarray(counts, dtype=np.int64)
    k = int(counts.max(initial=1))
    if dispatch.use_triton(scores.device):
        from .quest import topk_pages

        return topk_pages(scores, to_device(counts, np.int32, scores.device), k)
    return top_pages_torch(scores, counts)


def top_pages_torch(scores: torch.Tensor, counts) -> torch.Tensor:
    counts = np.asarray(counts, dtype=np.int64)
    k = int(counts.max(initial=1))
    _, idx = torch.topk(scores, min(k, scores.shape[1]), dim=1, sorted=True)
    rank = torch.arange(idx.shape[1], device=idx.device)
    cnt = to_device(counts, None, idx.device)
    big = torch.iinfo(torch.int64).max
    idx = torch.sort(torch.where(rank[None, :] < cnt[:, None], idx, big), dim=1).values
    return torch.where(idx == big, -1, idx)


def select_quest(q, meta: PageMeta, page_table, kv_lens, budget_tokens, page_size: int,
                 sink: int = 1, recent: int = 1):
    """Quest / SparseSpec-style selection for drafting requests: `(selected, counts)`."""
    hkv = meta.kmin.shape[1]
    counts = selection_counts(kv_lens, budget_tokens, page_size, sink, recent, hkv)
    npg = to_device(pages_for(kv_lens, page_size), np.int32, q.device)
    scores = dispatch.quest_scores(q, meta, page_table, npg, sink, recent)
    return top_pages(scores, counts), counts


def select_from_scores(page_scores: torch.Tensor, scored_pages, kv_lens, budget_tokens, page_size: int,
                       num_kv_heads: int, sink: int = 1, recent: int = 1):
    """SparseSpec-L: rank pages by the scores the last verification wrote (`mixed_attention(...,
    page_scores=)`, one row per (request, KV head), logical page columns). `scored_pages[r]`: pages
    that verification covered; later pages (holding tokens drafted since) are always kept."""
    counts = selection_counts(kv_lens, budget_tokens, page_size, sink, recent, num_kv_heads)
    dev = page_scores.device
    n = to_device(np.repeat(pages_for(kv_lens, page_size), num_kv_heads), None, dev)[:, None]
    scored = to_device(np.repeat(np.asarray(scored_pages, dtype=np.int64), num_kv_heads), None, dev)[:, None]
    col = torch.arange(page_scores.shape[1], device=dev)[None, :]
    s = torch.where(col < torch.minimum(n, scored), page_scores, float("-inf"))
    keep_from = torch.minimum(n - recent, scored)  # pages the verification never saw hold drafts: keep
    s = torch.where(((col < sink) | (col >= keep_from)) & (col < n), float("inf"), s)
    return top_pages(s, counts), counts


def select_static(kv_lens, budget_tokens, page_size: int, num_kv_heads: int, sink: int = 1,
                  device="cpu"):
    """StreamingLLM / MagicDec window: the first `sink` pages and the most recent ones filling the
    budget. Depends only on lengths, so it is built on the host (`device` None: a numpy array)."""
    counts = selection_counts(kv_lens, budget_tokens, page_size, sink, 1, num_kv_heads)
    n = np.repeat(pages_for(kv_lens, page_size), num_kv_heads)
    k = int(counts.max(initial=1))
    j = np.arange(k)[None, :]
    c, n2 = counts[:, None], n[:, None]
    head = np.minimum(sink, c)  # sink pages, unless the row keeps fewer
    sel = np.where(j < head, j, n2 - c + j)  # then the last c - head pages
    sel = np.where(j < c, sel, -1)
    return (sel if device is None else to_device(sel, None, device)), counts
