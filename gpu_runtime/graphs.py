"""CUDA graphs for decode-like passes: the whole forward replayed from a graph, so launch
overhead does not dominate small batches (a plain decode step of an 8B model is ~800 kernels).

A pass is graphable when every row attends to whole page lists (decode steps and verifications,
no prefill chunk, no draft whose selection is built per layer on the host). Its attention plan
(`attention.AttentionPlan`) is built on the host as usual; what a captured graph fixes is only the
*shape* of the work: token count, logits rows, page-list rows, work items, merges, partial slots,
tile sizes. Passes of the same shape replay one graph after their inputs are copied into its
static buffers (tokens, positions, KV write slots, page lists, the plan's work list); a new shape
captures a new graph (contexts cross a split boundary every few thousand tokens, a batch changes
when a request arrives or finishes). Graphs share one memory pool and the oldest is dropped past
`max_graphs`.

`capture=False` runs the same static-buffer path eagerly (no graph): the CPU tests check the
buffer handling against the plain path that way.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from .attention import AttentionPlan, mixed_attention
from .pages import PageLists


def _copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst[: src.shape[0]].copy_(src, non_blocking=True)


class _Static:
    """Static buffers of one captured shape, and the attention callback that reads them."""

    def __init__(self, cache, attn, plan: AttentionPlan, tokens, logit_rows, idx_cap: int, meta=None):
        self.cache, self.meta = cache, meta
        dev = cache.device
        c = lambda t: t.clone()  # noqa: E731
        self.tokens, self.logit_rows = c(tokens), c(logit_rows)
        self.positions, self.page, self.off = c(attn.positions), c(attn._page), c(attn._off)
        L = plan.lists
        idx = torch.zeros(idx_cap, dtype=L.indices.dtype, device=dev)
        idx[: L.indices.shape[0]] = L.indices
        self.lists = PageLists(c(L.start), c(L.count), c(L.last_len), idx, L.count_np.copy(), L.last_len_np.copy(),
                               L.num_kv_heads, L.page_size)
        self.plan = AttentionPlan(c(plan.work), c(plan.merge), c(plan.q_start), c(plan.q_len), self.lists,
                                  plan.num_q_heads, plan.num_slots, plan.block_m, plan.block_n, plan.tokens_per_split,
                                  plan.num_warps, plan.num_stages, plan.merge_rows, plan.merge_dims, plan.merge_slots,
                                  plan.fused_merge, torch.zeros_like(plan.arrived))
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None

    def load(self, attn, plan: AttentionPlan, tokens, logit_rows) -> None:
        for dst, src in ((self.tokens, tokens), (self.logit_rows, logit_rows), (self.positions, attn.positions),
                         (self.page, attn._page), (self.off, attn._off), (self.lists.start, plan.lists.start),
                         (self.lists.count, plan.lists.count), (self.lists.last_len, plan.lists.last_len),
                         (self.lists.indices, plan.lists.indices), (self.plan.work, plan.work),
                         (self.plan.merge, plan.merge), (self.plan.q_start, plan.q_start), (self.plan.q_len, plan.q_len)):
            _copy_into(dst, src)

    def __call__(self, layer: int, q, k, v):
        if self.meta is not None:  # Quest page bounds stay current (the append has no host sync)
            self.meta[layer].append(k, self.page, self.off)
        kc, vc = self.cache.k[layer], self.cache.v[layer]
        kc[self.page, :, self.off] = k.to(kc.dtype)
        vc[self.page, :, self.off] = v.to(vc.dtype)
        return mixed_attention(q, kc, vc, self.plan)


class GraphedPasses:
    def __init__(self, model, cache, max_graphs: int = 16, capture: bool = True, meta=None):
        self.model, self.cache, self.meta = model, cache, meta
        self.max_graphs, self.capture = max_graphs, capture
        self.graphs: OrderedDict[tuple, _Static] = OrderedDict()
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.captures = 0
        self.replays = 0

    @staticmethod
    def eligible(attn) -> bool:
        """Whole page lists for every row: no prefill chunk (its shape changes every pass and it is
        long enough to hide launches) and no drafting request."""
        return attn.n_pre == 0 and attn.n_dr == 0

    def forward(self, attn, tokens: torch.Tensor, logit_rows: torch.Tensor) -> torch.Tensor:
        plan = attn._plan(attn.lists, self.model.cfg.q_heads)
        if plan is None:  # no Triton here: nothing to capture
            return self.model(tokens, attn.positions, attn, logit_rows=logit_rows)
        n_idx = int(plan.lists.indices.shape[0])
        cap = 1 << max(10, (n_idx - 1).bit_length())  # capacity buckets: a few graphs as contexts grow
        key = (int(tokens.shape[0]), int(logit_rows.shape[0]), plan.lists.num_rows, int(plan.work.shape[0]),
               int(plan.merge.shape[0]), plan.num_slots, plan.block_m, plan.block_n, plan.num_warps,
               plan.num_stages, plan.fused_merge, cap)
        st = self.graphs.get(key)
        if st is None:
            st = self._capture(key, attn, plan, tokens, logit_rows, cap)
        else:
            self.graphs.move_to_end(key)
            st.load(attn, plan, tokens, logit_rows)
        if st.graph is not None:
            st.graph.replay()
            self.replays += 1
            return st.logits.clone()
        return self.model(st.tokens, st.positions, st, logit_rows=st.logit_rows)

    def _capture(self, key, attn, plan, tokens, logit_rows, cap) -> _Static:
        st = _Static(self.cache, attn, plan, tokens, logit_rows, cap, self.meta)
        if self.capture:
            m, dev = self.model, self.cache.device
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):  # warm-up outside the graph (allocator, autotune caches)
                m(st.tokens, st.positions, st, logit_rows=st.logit_rows)
            torch.cuda.current_stream(dev).wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool):
                st.logits = m(st.tokens, st.positions, st, logit_rows=st.logit_rows)
            st.graph = g
            self.captures += 1
        self.graphs[key] = st
        while len(self.graphs) > self.max_graphs:
            self.graphs.popitem(last=False)
        return st
