"""Paged KV cache and the attention backend `model.Transformer` calls in each layer.

The cache holds every layer's K and V as `[layers, pages, kv_heads, page_size, head_dim]`; one
layer's slice is the layout the kernels read (`pages.PageLists`). Physical pages are handed out by
the batcher's pool (`spsim.policies.kv.PagedKVPool`); a request's *page table* lists its pages in
token order.

One `PagedAttention` serves one forward pass: each request `r` has `start[r]` tokens in the cache
already (positions `0 .. start[r] - 1`) and brings `q_len[r]` new ones (positions `start[r] ..`):
a prefill chunk, a decode step, a verification (drafted + 1 tokens) or a draft step. Per layer it
writes the new K/V into the request's pages, then runs `dispatch.attention` over full page lists
(causal: query i sees positions up to its own). For sparse drafts or per-layer selections an
engine overrides `lists_for(layer)` (or passes `lists`); `page_scores_for(layer)` can return a
buffer for the kernel's per-page scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from .model_config import LlamaConfig
from .pages import PageLists, full_page_lists, to_device, token_slots, upload


class PagedKVCache:
    def __init__(self, cfg: LlamaConfig, num_pages: int, page_size: int = 16, device="cpu",
                 dtype: torch.dtype | None = None):
        self.cfg, self.num_pages, self.page_size = cfg, num_pages, page_size
        shape = (cfg.layers, num_pages, cfg.kv_heads, page_size, cfg.head_dim)
        dtype = dtype or cfg.torch_dtype
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    @property
    def device(self) -> torch.device:
        return self.k.device

    def pages_for(self, tokens: int) -> int:
        return -(-int(tokens) // self.page_size)

    @staticmethod
    def bytes_per_page(cfg: LlamaConfig, page_size: int, dtype: torch.dtype) -> int:
        return 2 * cfg.layers * cfg.kv_heads * page_size * cfg.head_dim * torch.empty(0, dtype=dtype).element_size()


AttentionFn = Callable[..., torch.Tensor]  # dispatch.attention's signature


class PagedAttention:
    """The `model.Attention` callback for one pass (see the module docstring).

    page_tables[r]: request r's physical pages in token order, covering `start[r] + q_len[r]` tokens.
    attention_fn: `dispatch.attention` by default; `reference.mixed_attention_ref` (same signature
    minus `plan`/`out`) forces the PyTorch path. `positions` (device, int64) is what the model's
    forward wants beside the tokens.
    """

    def __init__(self, cache: PagedKVCache, page_tables: Sequence[Sequence[int]], start: Sequence[int],
                 q_len: Sequence[int], *, lists: PageLists | None = None, attention_fn: AttentionFn | None = None):
        self.cache = cache
        dev, ps = cache.device, cache.page_size
        self.start = np.asarray(start, dtype=np.int64)
        self.q_len = np.asarray(q_len, dtype=np.int64)
        kv_len = self.start + self.q_len
        if len(page_tables) != len(self.q_len) or len(self.start) != len(self.q_len):
            raise ValueError("page_tables, start and q_len must have one entry per request")
        have = np.fromiter(map(len, page_tables), np.int64, len(page_tables))
        for r in np.flatnonzero(have * ps < kv_len):
            raise ValueError(f"request {r}: {have[r]} pages of {ps} tokens hold fewer than {kv_len[r]} tokens")
        # vectorised over the pass: a per-request loop here took most of a small pass's host time
        pos, page, off = token_slots(page_tables, self.start, self.q_len, ps)
        self.positions, self._page, self._off = upload([pos, page, off], [np.int64] * 3, dev)
        self._page_np = page  # host copy (run lengths)
        self.lists = lists if lists is not None else full_page_lists(page_tables, kv_len, cache.cfg.kv_heads, ps, dev)
        self.attention_fn = attention_fn
        self._plans: dict[int, object] = {}
        # the query length the attention tile is fitted to (None: the longest query): padding's
        # filler request brings many tokens but must not make the whole pass's tile taller
        self.tile_q: int | None = None
        # requests planned apart in an attention launch of their own (`attention.plan_attention`'s
        # `split`): PassAttention's prefill chunks
        self.split: np.ndarray | None = None
        # requests given no attention work (the padding's filler: nothing reads its output)
        self.skip: np.ndarray | None = None
        # a padded plan's room (the shape rule): at most this many work items (`max_items_split`
        # for the split requests' launch, whose tile is `block_m_split`, None: its own)
        self.max_items: int | None = None
        self.max_items_split: int | None = None
        self.block_m_split: int | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.q_len.sum())

    def last_token_rows(self) -> torch.Tensor:
        """Index of each request's last token in the flat batch (its next-token logits)."""
        return to_device(np.cumsum(self.q_len) - 1, None, self.cache.device)

    def lists_for(self, layer: int) -> PageLists:
        return self.lists

    def page_scores_for(self, layer: int) -> torch.Tensor | None:
        return None

    def _plan(self, lists: PageLists, num_q_heads: int):
        # One plan per distinct page lists, shared by every layer that uses them.
        plan = self._plans.get(id(lists))
        if plan is None:
            from . import dispatch

            if not dispatch.use_triton(self.cache.device):
                return None
            from .attention import plan_attention

            block_m = None
            if self.tile_q is not None:
                from .attention import choose_block_m

                block_m = choose_block_m(np.minimum(self.q_len, max(1, self.tile_q)),
                                         num_q_heads // self.cache.cfg.kv_heads)
            plan = self._plans[id(lists)] = plan_attention(self.q_len, lists, num_q_heads, block_m=block_m,
                                                           split=self.split, skip=self.skip, max_items=self.max_items,
                                                           max_items_split=self.max_items_split,
                                                           block_m_split=self.block_m_split)
        return plan

    def fused_write(self) -> bool:
        """Whether this pass writes K/V with the Triton kernel (`kv_write.py`)."""
        f = getattr(self, "_fused", None)
        if f is None:
            from . import dispatch

            c, ps = self.cache.cfg, self.cache.page_size
            pow2 = lambda x: x & (x - 1) == 0  # noqa: E731  (tl.arange sizes)
            f = self._fused = dispatch.use_triton(self.cache.device) and pow2(c.head_dim) and pow2(ps)
        return f

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the pass's new K/V of `layer` in the cache."""
        kc, vc = self.cache.k[layer], self.cache.v[layer]
        if self.fused_write():
            from .kv_write import write_kv

            write_kv(kc, vc, k, v, self._page, self._off)
            return
        kc[self._page, :, self._off] = k.to(kc.dtype)
        vc[self._page, :, self._off] = v.to(vc.dtype)

    def bounds(self, layer: int):
        """`(run, meta)`: what a K/V write needs to keep Quest's page bounds current (none here)."""
        return None, None

    def rope_write(self, layer: int, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """RoPE and the K/V write in one kernel (`kv_write.rope_write_kv`, where the Triton write runs;
        `SPSIM_ROPE_WRITE=0` turns it off): the rotated q, with k and v (and the page bounds) stored; then
        call with k and v None. None: rotate and call with them as usual."""
        from . import kv_write

        if not (kv_write.ROPE_WRITE and self.fused_write() and cos.dtype == torch.float32):
            return None
        run, meta = self.bounds(layer)
        return kv_write.rope_write_kv(qkv, cos, sin, self.cache.cfg.q_heads, self.cache.k[layer],
                                      self.cache.v[layer], self._page, self._off, run, meta)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None) -> torch.Tensor:
        """k and v None: `rope_write` stored them already."""
        kc, vc = self.cache.k[layer], self.cache.v[layer]
        if k is not None:
            self.write(layer, k, v)
        lists = self.lists_for(layer)
        scores = self.page_scores_for(layer)
        if self.attention_fn is not None:
            return self.attention_fn(q, kc, vc, self.q_len, lists, page_scores=scores)
        from .dispatch import attention

        return attention(q, kc, vc, self.q_len, lists, page_scores=scores, plan=self._plan(lists, q.shape[1]))
