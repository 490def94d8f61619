"""CUDA graphs for a pass's whole forward, replayed, so launch overhead does not dominate small
batches (a plain decode step of an 8B model is ~800 kernels, a drafting pass adds page selection
to every layer).

A pass is graphable when it has no prefill chunk, or at most PREFILL_GRAPH_TOKENS tokens with its
chunks (past that the kernels hide the launches). Decode steps, verifications and drafting passes
of every draft-KV method qualify: their page selections run on the device (`pass_attention.py`). Each pass's attention
plan is built on the host as usual; what a captured graph fixes is only the *shape* of the work
(`PassAttention.graph_key`: token count, logits rows, page-list rows, selection widths, work
items, merges, tile sizes). The first pass of a shape is captured and kept: a later pass of the
same shape copies its inputs (`PassAttention.graph_inputs`: tokens, positions, KV write slots,
page lists, selection indices, the plan's work list) into the captured pass's tensors and replays.
Page-id arrays get a power-of-two capacity, so contexts can grow under one graph. Graphs share one
memory pool and the least recently used is dropped past `max_graphs`. A shape is captured only
when it comes back (`capture_after` sightings, default 2): many shapes of drafting passes never
recur (Mooncake's first 50 requests under fixed-k: 293 of 999 passes captured a graph when every
shape was captured). Measured on the H200 (16 x 32K, 128 tokens): a capturing pass ~70 ms, an eager
drafting pass ~37 ms, a replay 12-24 ms; fixed-k:k=4 went 318 -> 380 tok/s as run (46 -> 13
captures), aspire 255 -> 237 (76 -> 15). Attention work plans are padded to a few sizes
(`attention.pad_plan`: work and merge lists, partial slots; the split size is no part of the key),
so contexts that grow past a split boundary keep their graph, and a pass's composition is padded
with dummy requests to a few sizes (`padding.py`: drafting and verifying rows, tokens, logits rows),
as serving engines pad batch sizes. `stats()` counts how many distinct values each part of the key
takes in a run: where the shapes that still differ come from (16 x 32K, 128 tokens, fixed-k:k=4 on
the H200: the drafting rows' input shapes, 70 values over 127 passes).

`capture=False` runs the same static-buffer path eagerly (no graph): the CPU tests check the
buffer handling against the plain path that way.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from .attention import pad_plan

# Passes with prefill chunks are graphed too up to this many tokens: run eagerly, the host's
# launches took 2-4x the kernels' time (H200, 8B, prefill_passes_h200.json: 128 prefill tokens
# beside 16 decodes at 16K, 17.4 ms of kernels, 36-43 ms eager, 17.0 ms replayed); past it the
# kernels hide the launches (2048 tokens alone: 46.4 ms eager, 44.9 replayed).
PREFILL_GRAPH_TOKENS = 2048


def _copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst[: src.shape[0]].copy_(src, non_blocking=True)


def _copy_all(dsts: list[torch.Tensor], srcs: list[torch.Tensor]) -> None:
    """`_copy_into` for every pair, grouped by dtype into one `torch._foreach_copy_` each: on a GPU
    a few multi-tensor launches instead of one copy launch per input (a pass stages ~20)."""
    groups: dict[torch.dtype, tuple[list, list]] = {}
    for d, s in zip(dsts, srcs):
        g = groups.setdefault(d.dtype, ([], []))
        g[0].append(d[: s.shape[0]])
        g[1].append(s)
    for d, s in groups.values():
        if _FOREACH_COPY is not None and all(a.dtype == b.dtype and a.shape == b.shape for a, b in zip(d, s)):
            _FOREACH_COPY(d, s, non_blocking=True)
        else:
            for a, b in zip(d, s):
                a.copy_(b, non_blocking=True)


_FOREACH_COPY = getattr(torch, "_foreach_copy_", None)


def _plan_tensors(plan) -> list[torch.Tensor]:
    return [t for p in plan.parts() for t in (p.work, p.merge, p.q_start, p.q_len)]


class _Captured:
    """The first pass of a shape, kept with its graph: later passes load their inputs into it."""

    def __init__(self, attn, plans, tokens, logit_rows):
        self.attn, self.plans = attn, plans
        self.tokens, self.logit_rows = tokens.clone(), logit_rows.clone()
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None

    def load(self, attn, plans, tokens, logit_rows) -> None:
        dst = [self.tokens, self.logit_rows] + self.attn.graph_inputs()
        src = [tokens, logit_rows] + attn.graph_inputs()
        for pd, ps in zip(self.plans, plans):
            dst += _plan_tensors(pd)
            src += _plan_tensors(ps)
        _copy_all(dst, src)


class GraphedPasses:
    def __init__(self, model, cache, max_graphs: int = 48, capture: bool = True, capture_after: int = 2,
                 pad: bool = True):
        self.model, self.cache, self.pad = model, cache, pad
        self.max_graphs, self.capture, self.capture_after = max_graphs, capture, capture_after
        self._capture_after0 = capture_after
        self.seen: dict[tuple, int] = {}  # shape key -> sightings before its capture
        self.graphs: OrderedDict[tuple, _Captured] = OrderedDict()
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.captures = 0
        self.replays = 0
        self.eager = 0  # decode-like passes run eagerly (shape not seen often enough yet, off the set)
        self.eager_prefill = 0  # passes with more prefill than PREFILL_GRAPH_TOKENS: eager by design
        self.eager_by_reason: dict[str, int] = {}
        self._shared: dict[tuple, torch.Tensor] = {}  # large per-pass tensors shared by captured passes (_buffer)
        # a start-up set captured (startup.py `capture`): no capture while serving, a pass of another shape
        # runs eagerly and is counted by reason
        self.frozen = False
        self.startup_stats: dict | None = None
        self._outs: dict[torch.dtype, torch.Tensor] = {}  # one flat logits buffer per dtype (_out)
        self.out_rows_hint = 0  # the most logits rows a graph may ask for (set by startup.py `capture`)
        self.missed: dict = {}  # keys of passes run eagerly off the start-up set (first few: what it lacks)
        # what tells shapes apart: distinct values of each part of the key over the run (stats())
        self._parts: dict[str, set] = {}

    _PART_NAMES = ("method", "prefill", "drafting", "requests", "tokens", "input shapes", "score shape",
                   "selection widths", "store version", "layer-0 lists")

    def _note_shape(self, key) -> None:
        g, tokens, rows, caps, plans = key
        parts = dict(zip(self._PART_NAMES, g))
        parts.update({"logit rows": rows, "page-id capacity": caps, "work plans": plans})
        for name, v in parts.items():
            seen = self._parts.setdefault(name, set())
            if len(seen) < 4096:
                seen.add(v)

    def reset_counts(self) -> None:
        """Forget sightings and counts (not the graphs) and restore `capture_after`: a measured run
        after a rehearsal."""
        self.seen.clear()
        self._parts.clear()
        self.captures = self.replays = self.eager = self.eager_prefill = 0
        self.eager_by_reason = {}
        self.missed = {}
        self.capture_after = self._capture_after0

    def stats(self) -> dict:
        """Counts, and how many distinct values each part of the shape key took: where a run's
        shapes come from (what padding would have to cover)."""
        return {"captures": self.captures, "replays": self.replays, "eager": self.eager,
                "eager_prefill": self.eager_prefill,
                "eager_by_reason": dict(self.eager_by_reason), "startup": self.startup_stats,
                "distinct_by_part": {k: len(v) for k, v in self._parts.items()},
                "missed_keys": [[str(k), n] for k, n in self.missed.items()]}

    def note_eager(self, reason: str, decode_like: bool = True) -> None:
        """A pass ran eagerly for `reason` (counted by reason in `stats()`). Only decode-like ones
        count in `eager`: a pass whose prefill is past the graph limit is eager by design (its
        kernels hide the launches) and counts in `eager_prefill`."""
        if decode_like:
            self.eager += 1
        else:
            self.eager_prefill += 1
        self.eager_by_reason[reason] = self.eager_by_reason.get(reason, 0) + 1

    def _out(self, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """The logits buffer of a graph: a view of one flat buffer shared by every graph (replays
        run one at a time and clone it), not one per logits shape: at max batch 256 with drafts
        the shapes reach ~2,048 rows of a 128K vocabulary, 1 GB each. A graph needing more than the
        flat buffer holds gets a larger one (earlier graphs keep theirs)."""
        need = int(np.prod(shape))
        buf = self._outs.get(dtype)
        if buf is None or buf.numel() < need:
            rows_hint = self.out_rows_hint * int(shape[-1]) if len(shape) == 2 else 0
            buf = self._outs[dtype] = torch.empty(max(need, rows_hint), dtype=dtype, device=self.cache.device)
        return buf[:need].view(shape)

    @staticmethod
    def eligible(attn) -> bool:
        """Passes without prefill, and passes with prefill of at most PREFILL_GRAPH_TOKENS tokens
        (the executor marks them `graphable` and pads them)."""
        return bool(getattr(attn, "graphable", attn.n_pre == 0))

    def shape_key(self, attn, tokens: torch.Tensor, logit_rows: torch.Tensor):
        """(key, plans, page-id capacities) of a pass: equal keys replay one graph. None when there
        is no Triton plan to capture (reference paths)."""
        qh = self.model.cfg.q_heads
        plans = [attn._plan(L, qh) for L in attn.graph_lists()]
        if any(p is None for p in plans):
            return None
        if self.pad:
            caps = attn.plan_caps() if hasattr(attn, "plan_caps") else None
            if caps is not None and any(p.work.shape[0] > c[0] or p.merge.shape[0] > c[1]
                                        for plan in plans for p, c in zip(plan.parts(), caps)):
                attn.off_rule, caps = "attention work past the rule's room", None  # padded the old way
            plans = [pad_plan(p, caps) for p in plans]  # the plans the forward uses (cached in attn)
        caps = attn.id_capacities()
        # the kernels read token ranges from the work list: the split size itself is not a shape
        plan_key = tuple((int(p.work.shape[0]), int(p.merge.shape[0]), p.num_slots, p.block_m, p.block_n,
                          p.num_warps, p.num_stages, p.fused_merge, p.merge_launch, p.merge_rows, p.merge_dims, p.merge_slots,
                          p.num_q_heads) for plan in plans for p in plan.parts())
        return (attn.graph_key(), int(tokens.shape[0]), int(logit_rows.shape[0]), tuple(caps), plan_key), plans, caps

    def forward(self, attn, tokens: torch.Tensor, logit_rows: torch.Tensor) -> torch.Tensor:
        shaped = self.shape_key(attn, tokens, logit_rows)
        if shaped is None:  # no Triton here: nothing to capture
            return self.model(tokens, attn.positions, attn, logit_rows=logit_rows)
        key, plans, caps = shaped
        st = self.graphs.get(key)
        if st is None and self.frozen:  # a start-up set: no capture while serving
            self._note_shape(key)
            grown = self.startup_stats is not None and key[0][8] != self.startup_stats.get("store_version", key[0][8])
            self.note_eager(f"off the rule: {attn.off_rule}" if getattr(attn, "off_rule", None)
                            else "draft store grew after start-up" if grown else "shape not in the start-up set")
            if len(self.missed) < 16:
                self.missed[key] = self.missed.get(key, 0) + 1
            return self.model(tokens, attn.positions, attn, logit_rows=logit_rows)
        if st is None:
            self._note_shape(key)
            n = self.seen[key] = self.seen.get(key, 0) + 1
            if n < self.capture_after:  # not (yet) worth a capture: run this one eagerly
                if len(self.seen) > 64 * self.max_graphs:  # bounded memory over very long runs
                    self.seen.clear()
                self.note_eager("first sighting")
                return self.model(tokens, attn.positions, attn, logit_rows=logit_rows)
            self.seen.pop(key, None)
            st = self._capture(key, attn, plans, tokens, logit_rows, caps)
        else:
            self.graphs.move_to_end(key)
            st.load(attn, plans, tokens, logit_rows)
        if st.graph is not None:
            st.graph.replay()
            self.replays += 1
            return st.logits.clone()
        a = st.attn
        return self.model(st.tokens, a.positions, a, logit_rows=st.logit_rows)

    def _buffer(self, key, shape, dtype) -> torch.Tensor:
        """A tensor shared by every captured pass asking for (key, shape, dtype): the passes replay
        one at a time and each reloads (or rewrites) it first (`PassAttention.share_buffers`)."""
        k = (key, tuple(shape), dtype)
        t = self._shared.get(k)
        if t is None:
            t = self._shared[k] = torch.zeros(shape, dtype=dtype, device=self.cache.device)
        return t

    def _capture(self, key, attn, plans, tokens, logit_rows, caps, warm: bool = True, phases=None) -> _Captured:
        import time

        attn.pad_page_ids(caps, self._buffer)
        if hasattr(attn, "share_buffers"):
            attn.share_buffers(self._buffer)
        st = _Captured(attn, plans, tokens, logit_rows)
        if self.capture:
            m, dev = self.model, self.cache.device
            t = time.perf_counter()
            if warm:
                side = torch.cuda.Stream(dev)
                side.wait_stream(torch.cuda.current_stream(dev))
                # warm-up outside the graph (allocator, autotune caches, kernels' first compile);
                # the pass runs again on replay: everything it writes (KV, page bounds, stored
                # selections and scores) it writes alike
                with torch.cuda.stream(side):
                    warm_out = m(st.tokens, attn.positions, attn, logit_rows=st.logit_rows)
                torch.cuda.current_stream(dev).wait_stream(side)
                out = self._out(warm_out.shape, warm_out.dtype)
                del warm_out
            else:
                from .model import _compute_dtype

                vocab = int(m.embed.weight.shape[0] if m.lm_head is None else m.lm_head.weight.shape[0])
                out = self._out((int(st.logit_rows.shape[0]), vocab), _compute_dtype(m.dtype))
            t1 = time.perf_counter()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool, capture_error_mode="global" if warm else "relaxed"):
                # the logits land in a buffer shared by every graph of this shape of logits: a graph
                # then keeps no memory of its own past its replay (100s of graphs stay affordable)
                out.copy_(m(st.tokens, attn.positions, attn, logit_rows=st.logit_rows))
            st.logits = out
            st.graph = g
            self.captures += 1
            if phases is not None:
                phases["warm"] += t1 - t
                phases["capture"] += time.perf_counter() - t1
        self.graphs[key] = st
        while len(self.graphs) > self.max_graphs:
            self.graphs.popitem(last=False)
        return st
