"""Attention for one mixed pass: prefill chunks and verifications attend to their whole KV,
drafting requests to the sparse pages their draft-KV method selects.

Rows are ordered as the plan's groups: prefill requests, then drafting, then verifying (each
request `kv_heads` rows). Full rows get one page list for the whole pass; draft rows get one per
layer where the method selects per layer. The selections, by method (`spsim.plan.DraftMethod`,
the budget in tokens, sink and recent pages included, the pages holding the run's drafts always
kept):

- STATIC: the first `sink` pages and the most recent ones (StreamingLLM / MagicDec), every layer.
- VERIFY_QUEST: at a run's first draft, each layer scores the pages by Quest bounds (per-page key
  min/max, kept current on every write) with that draft's query; later drafts reuse it.
- VERIFY_ATTN: at a run's first draft, each layer takes the top pages by the attention scores the
  request's last verification (or last prefill chunk) wrote in that layer (SparseSpec-L).
- STEP_LAYER: every draft step, layer 0 attends in full and writes page scores; layers 1.. take
  the top pages by them (ASPIRE's designated layer).
- STEP_QUEST: every draft step, each layer scores the pages by Quest bounds with its query.

What persists between passes (selections of a run, scores of the last verification) lives on the
GPU in the executor's `DraftStore`, by request slot. The pass's page lists are built once: draft
rows read a fixed-size slab of page ids (their counts are known on the host from lengths and the
budget) that each layer overwrites with its selection on the device, so every layer shares one
attention work plan, no layer syncs with the host, and the whole pass can be captured in a CUDA
graph (`graphs.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from spsim.plan import DraftMethod

from . import dispatch, selection
from spsim.buckets import bucket, pow2
from .draft_store import DraftStore
from .kv_cache import PagedAttention, PagedKVCache
from .pages import PageLists, concat_page_arrays, full_page_arrays, last_page_len, pages_for, to_device, upload
from .selection import PageMeta, select_static, top_pages

SINK, RECENT = 1, 1  # pages always kept at the start and at the end of the context
# Prefill chunks that fill 128-row attention tiles run in a launch of their own beside a pass's
# decode-like requests, each launch with its own tile: in one launch every decode row computed a
# 128-row tile of which 4 rows were real (H200, 8B: a 128-token chunk beside 16 decodes at 16K
# took 25.5 ms where the decodes alone took 10.7), as serving engines run prefill and decode
# attention as separate kernels. The cost models price the same split (spsim/cost/calibrated.py).
SPLIT_PREFILL = True
SPLIT_ROOM = 4  # prefill chunks a padded pass's prefill launch has room for (`_set_caps`)
TABLE_COLS = 128  # page-table and page-score widths: at least this, rounded up by `buckets.bucket` (fewer graph shapes)
COARSE_TABLE_COLS = 512  # coarse shapes: drafting rows' page-table width at least this (8K tokens of 16-token pages)


@dataclass
class DraftRows:
    """The pass's drafting requests (parallel lists)."""

    rids: list[int] = field(default_factory=list)
    kv_len: list[int] = field(default_factory=list)  # context + drafts held + this draft
    first: list[bool] = field(default_factory=list)  # the run's first draft (draft_pos == 0)
    run_start: list[int] = field(default_factory=list)  # context before the run (its last page is kept)
    # padded passes (CUDA graphs): a pass with any first drafts selects for this many entries, the
    # extra ones on one page into a scratch slot, so its shape does not depend on how many runs start
    pad_first: int = 0
    coarse: bool = False  # power-of-two page-table and selection widths (padding.PassPadding coarse)
    rule: object = None  # shapes.ShapeRule: widths from the settings' classes, not from contexts
    # the shape rule: selections for this many entries, the drafting requests first, then dummy
    # entries (no request, one scratch page: `scratch`), so a pass's shapes do not depend on how
    # many of its requests draft (0: as many as drafting requests)
    entries: int = 0
    scratch: object = None
    force_first: bool = False  # the rule's prefill passes: first-draft selections whether or not a run starts

    def padded(self) -> "DraftRows":
        """These rows with the dummy entries up to `entries` appended (what selections run over)."""
        extra = self.entries - len(self.rids)
        if extra <= 0:
            return self
        return DraftRows(self.rids + [SELECT_PAD_RID] * extra, self.kv_len + [1] * extra, self.first + [False] * extra,
                         self.run_start + [0] * extra, self.pad_first, self.coarse, self.rule, self.entries, self.scratch,
                         self.force_first)


# the draft store's slot for the padding entries of a first-draft selection (their pages are never read)
SELECT_PAD_RID = DraftStore.SCRATCH


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def tall_prefill(q_len, n_prefill: int, group: int) -> np.ndarray | None:
    """Indices of the prefill chunks (the first `n_prefill` requests) to plan apart: those whose
    rows need 128-row tiles (`attention.choose_block_m`), when the pass has other requests."""
    q = np.asarray(q_len, np.int64)
    tall = np.flatnonzero(q[:n_prefill] * group > 64)
    return tall if 0 < len(tall) < len(q) else None


def budget_pages(budget: int, page_size: int) -> int:
    return int(selection.budget_pages(budget, page_size, SINK, RECENT))


class PassAttention(PagedAttention):
    """`model.Attention` for one mixed pass (see the module docstring)."""

    def __init__(self, cache: PagedKVCache, rids: list[int], page_tables, start, q_len, n_prefill: int,
                 drafts: DraftRows, method: int, budget: int, states: DraftStore | None,
                 meta: list[PageMeta] | None, score_rows: list[int] | None = None, attention_fn=None):
        """Requests `rids` in pass order: `n_prefill` prefilling first, then `len(drafts.rids)`
        drafting ones, then verifying ones.
        `states`: the executor's `DraftStore` (a throwaway one when None: timing benchmarks).
        `meta`: per-layer Quest page summaries (updated on every write) or None. `score_rows`:
        request indices (in pass order) whose page scores to keep (verifications and last prefill
        chunks, for VERIFY_ATTN)."""
        cfg = cache.cfg
        hkv, ps, dev = cfg.kv_heads, cache.page_size, cache.device
        self.rids = list(rids)
        self.n_pre, self.drafts, self.method, self.budget = n_prefill, drafts, int(method), int(budget)
        self.n_dr = n_dr = len(drafts.rids)
        self._n_sel = 0  # selection entries (drafting requests, then dummy entries)
        self.meta, self.hkv, self.ps = meta, hkv, ps
        kv_len = np.asarray(start, np.int64) + np.asarray(q_len, np.int64)
        self._inputs: list[torch.Tensor] = []  # per-pass device tensors the forward reads (besides lists)
        longest = int(pages_for(kv_len, ps).max(initial=1))
        if n_dr:
            longest = max(longest, max(len(t) for t in page_tables[n_prefill:n_prefill + n_dr]))
        # the shape rule (shapes.py): every width is the class holding the pass's longest request
        self.rule = drafts.rule
        self.width_class = self.rule.width(longest) if self.rule is not None else None
        self.off_rule = None  # why this pass left the rule's shapes (None: it did not)
        if self.rule is not None and self.width_class is None:
            self.off_rule = "context beyond the settings"
        # page-score columns, rounded up (fewer CUDA graph shapes; columns past a row's pages are masked)
        self._score_width = self.width_class or bucket(longest, TABLE_COLS)
        self.kp = budget_pages(budget, ps)
        m = self.method
        # the shape rule keeps scores in every pass, one row per request (a pass of drafts alone
        # writes them all to the scratch slot): whether a pass verifies is data, not shape
        keep = m == DraftMethod.VERIFY_ATTN and (bool(score_rows) or self.rule is not None)
        if states is None or not isinstance(states, DraftStore):
            states = DraftStore(cfg.layers, hkv, self.kp, dev, slots=max(1, n_dr + len(score_rows or [])),
                                scores=m == DraftMethod.VERIFY_ATTN)
        self.store = states
        lists = lists0 = None
        if n_dr or drafts.entries:  # (a rule's prefill pass selects over dummy entries alone)
            a, b = n_prefill, n_prefill + n_dr
            pre = full_page_arrays(page_tables[:a], kv_len[:a], hkv, ps)
            ver = full_page_arrays(page_tables[b:], kv_len[b:], hkv, ps)
            sel_rows = drafts.padded()
            self._n_sel = len(sel_rows.rids)
            tables_d = list(page_tables[a:b]) + [drafts.scratch] * (self._n_sel - n_dr)
            slab = self._setup_drafts(tables_d, sel_rows, dev)
            if self._n_sel > n_dr:  # dummy entries: slab room and selections, but no attention rows
                r = n_dr * hkv
                slab = (slab[0][:r], slab[1][:r], slab[2][:r], slab[3])
            # each entry's query row (a dummy reads the first drafting request's)
            q0 = int(np.asarray(q_len[:n_prefill], np.int64).sum())
            dq = np.full(self._n_sel, q0, np.int64)
            dq[:n_dr] += np.arange(n_dr)
            # each entry's page-score rows (STEP_LAYER ranks by layer 0's)
            sc = np.repeat(np.minimum(np.arange(self._n_sel), max(n_dr - 1, 0)) + n_prefill, hkv) * hkv \
                + np.tile(np.arange(hkv), self._n_sel)
            self._dq, self._sc_rows = upload([dq, sc], [np.int64, np.int64], dev)
            self._inputs += [self._dq, self._sc_rows]
            # the slab's page ids stored first: at offset 0 whatever the prefill chunks' lists hold,
            # so a captured pass's slab view fits every later pass of its shape (graphs.py)
            lists = PageLists.from_host(*concat_page_arrays([pre, slab, ver], layout=[1, 0, 2]), hkv, ps, dev)
            off = 0
            self._slab = lists.indices[off:off + len(slab[3])].view(self._rows, self._K)
            if m == DraftMethod.STEP_LAYER:  # layer 0 attends in full and ranks the pages
                full = full_page_arrays(page_tables[a:b], kv_len[a:b], hkv, ps)
                lists0 = PageLists.from_host(*concat_page_arrays([pre, full, ver]), hkv, ps, dev)
        super().__init__(cache, page_tables, start, q_len, lists=lists, attention_fn=attention_fn)
        self.lists0 = lists0
        if SPLIT_PREFILL:
            self.split = tall_prefill(self.q_len, n_prefill, cfg.q_heads // hkv)
            if self.rule is not None and n_prefill and len(self.q_len) > n_prefill:
                # the shape rule: every prefill chunk in the prefill launch, whatever its length,
                # so short chunks do not set the other requests' tile (one shape fewer to vary)
                self.split = np.arange(n_prefill)
        self._run = None
        if meta is not None and self.fused_write():  # page runs for the bounds (kv_write.py)
            from .kv_write import run_lengths

            self._run = to_device(run_lengths(self._page_np), None, dev)
            self._inputs.append(self._run)
        # page scores the attention kernel writes: verify-attn keeps the verifications' (and last
        # prefill chunks'); step-layer ranks the draft rows' pages by layer 0's
        want = keep or (m == DraftMethod.STEP_LAYER and self._n_sel)
        maxp = self._score_width
        self._scores = torch.empty((len(kv_len) * hkv, maxp), dtype=torch.float32, device=dev) if want else None
        self._keep = None
        if keep:  # where each kept request's rows land in the store
            score_rows = list(score_rows)
            kept = [self.rids[i] for i in score_rows]
            if self.rule is not None:  # the rule: one kept row per request, the extra ones into the scratch slot
                extra = len(self.q_len) - len(score_rows)
                score_rows += [0] * extra
                kept += [SELECT_PAD_RID] * extra
            slots = states.slots_of(kept)
            states.ensure_score_width(maxp)
            states.scored_pages[slots] = pages_for(kv_len[score_rows], ps)
            src = (np.asarray(score_rows, np.int64)[:, None] * hkv + np.arange(hkv)).reshape(-1)
            self._keep = tuple(upload([src, states.score_rows(slots)], [None, None], dev))
            self._inputs += list(self._keep)
        self._q = None
        self._slab_at = 0 if not self._n_sel else off

    # -- setup (host, once per pass)
    def _setup_drafts(self, tables, d: DraftRows, dev) -> tuple:
        """Slot, counts and index tensors of the draft rows, uploaded in one copy; returns their page
        lists on the host, `(start, count, last_len, indices)`: a slab of `count` page ids per row at
        `row * K`, filled per layer on the device (STATIC: here, its selection depending on lengths
        only)."""
        hkv, ps, m, kp = self.hkv, self.ps, self.method, self.kp
        kv = np.asarray(d.kv_len, np.int64)
        n = len(kv)
        npg = pages_for(kv, ps)
        longest = int(max(len(t) for t in tables))
        width = (self.width_class if self.width_class is not None else
                 pow2(longest, COARSE_TABLE_COLS) if d.coarse else bucket(longest, TABLE_COLS))
        pt = np.zeros((n, width), np.int64)
        for i, t in enumerate(tables):
            pt[i, :len(t)] = t
        self._rows = rows = n * hkv
        up: list[tuple[str, np.ndarray, type]] = []  # (attribute, host array, dtype): one upload below

        def T(name, a, dt=np.int64):
            up.append((name, a, dt))

        static = None
        if m in (DraftMethod.VERIFY_QUEST, DraftMethod.VERIFY_ATTN):
            run_start = np.asarray(d.run_start, np.int64)
            top = run_start // ps  # the run's first draft kept its newest page; later pages are new
            c_sel = np.minimum(pages_for(run_start + 1, ps), kp)
            counts = c_sel + (npg - 1 - top)
            first = np.flatnonzero(np.asarray(d.first, bool))
            slots = self.store.slots_of(d.rids)
            T("_slots", slots)
            T("_c_sel", np.repeat(c_sel, hkv)[:, None])
            T("_top", np.repeat(top, hkv)[:, None])
            extra = max(0, d.pad_first - len(first)) if len(first) or d.force_first else 0
            if len(first) and not extra:
                # padded to a power of two by repeating the first one (the same pages written
                # twice): fewer distinct shapes for CUDA graphs, at most twice the scoring
                first = np.concatenate([first, np.full((1 << (len(first) - 1).bit_length()) - len(first), first[0])])
            f_slots, f_npg, f_table = slots[first], npg[first], pt[first]
            if extra:
                # padded passes: entries of row 0's query over one page into a scratch slot (a few
                # us of scoring), so the selection's shape is the drafting rows' padded count
                first = np.concatenate([first, np.zeros(extra, np.int64)])
                f_slots = np.concatenate([f_slots, np.repeat(self.store.slots_of([SELECT_PAD_RID]), extra)])
                f_npg = np.concatenate([f_npg, np.ones(extra, np.int64)])
                f_table = np.concatenate([f_table, np.zeros((extra, pt.shape[1]), np.int64)])
            self._nf = nf = len(first)
            if nf:
                cf = np.minimum(f_npg, kp)  # == c_sel for the real entries
                # a power of two (at least 8): the first selections' width is part of a graph's
                # shape, and short contexts (below the budget) gave one width per 8 pages
                self._kf = kp if d.coarse or self.width_class else min(kp, pow2(int(cf.max()), 8))
                T("_first", first)
                T("_first_slots", f_slots)
                T("_first_counts", np.repeat(cf, hkv), np.int32)
                T("_first_npg", f_npg, np.int32)
                T("_first_table", f_table)
                if m == DraftMethod.VERIFY_ATTN:
                    T("_first_score_rows", self.store.score_rows(f_slots))
                    scored = self.store.scored_pages[f_slots]
                    self._first_w = self.width_class or bucket(int(f_npg.max()), TABLE_COLS)
                    self.store.ensure_score_width(self._first_w)
                    T("_first_mask_n", np.repeat(f_npg, hkv)[:, None])
                    T("_first_mask_sc", np.repeat(np.asarray(scored, np.int64), hkv)[:, None])
        else:
            counts = np.minimum(npg, kp)
            if m == DraftMethod.STATIC:
                static, _ = select_static(kv, self.budget, ps, hkv, SINK, None)
            else:
                if m == DraftMethod.STEP_QUEST:
                    T("_npg", npg, np.int32)
                    T("_table", pt)
                elif m == DraftMethod.STEP_LAYER:
                    self._step_w = self._score_width
                    T("_step_pages", np.repeat(npg, hkv)[:, None])  # every page scored: pages and scored pages alike
                T("_counts_t", np.repeat(counts, hkv), np.int32)
        counts = np.repeat(counts, hkv)
        # slab width (rows read only `counts`): the budget's pages plus two for the pages a run's drafts
        # reach, so one width serves a run's every draft (fewer graph shapes)
        self._K = K = _round_up(max(int(counts.max()), kp + 2), 8)
        if self.width_class is not None:  # the rule's width, unless a row needs more (then off the rule)
            if K <= self.rule.slab_width:
                self._K = K = self.rule.slab_width
            else:
                self.off_rule = "drafting slab wider than the settings"
        row_req = np.arange(rows) // hkv  # a row's request (rows are request-major, then KV head)
        if static is None:
            # one table row per drafting request (int32), not one per (request, KV head) in int64:
            # 16x fewer bytes; 38 drafts of a Mooncake fixed-k pass at an 8,192-page width were
            # 20 MB a pass. `_write` gathers through each row's base offset into the flat table.
            T("_table_flat", pt.reshape(-1), np.int32)
            T("_row_base", (row_req * width)[:, None])
            self._width = width
            T("_col", np.arange(K)[None, :])
            indices = np.zeros(rows * K, np.int64)
        else:  # the window's physical pages, here (`_write`'s gather on the host)
            sel = np.full((rows, K), -1, np.int64)
            sel[:, :static.shape[1]] = static[:, :K]
            indices = pt[row_req[:, None], np.clip(sel, 0, width - 1)].reshape(-1)
        ts = upload([a for _, a, _ in up], [dt for _, _, dt in up], dev)
        for (name, _, _), t in zip(up, ts):
            setattr(self, name, t)
        self._inputs += ts  # graphs.py copies these into a captured pass
        # the page masks are built inside the forward (lists_for), from these inputs: a captured
        # pass replays them, where built here they were ~8 launches of every pass's preparation
        last = np.repeat(last_page_len(kv, ps), hkv)
        return np.arange(rows) * K, counts, last, indices

    @staticmethod
    def _masks(n: torch.Tensor, sc: torch.Tensor, width: int):
        """Per row (`n` its pages, `sc` the pages its scores cover, `[rows, 1]` on the device):
        columns with a usable score, and columns always kept (sink, recent, and pages the scores
        never covered: they hold drafts since)."""
        col = torch.arange(width, device=n.device)[None, :]
        valid = col < torch.minimum(n, sc)
        keep = ((col < SINK) | (col >= torch.minimum(n - RECENT, sc))) & (col < n)
        return ~valid, keep

    # -- CUDA graphs (graphs.py): what a captured pass reads, and what fixes its shapes
    def graph_lists(self) -> list[PageLists]:
        return [self.lists] if self.lists0 is None else [self.lists, self.lists0]

    def graph_inputs(self) -> list[torch.Tensor]:
        """Every per-pass device tensor the forward reads, in a fixed order: a replay copies a
        new pass's into the captured pass's."""
        t = [self.positions, self._page, self._off]
        for L in self.graph_lists():
            t += [L.start, L.count, L.last_len, L.indices]
        return t + self._inputs

    def graph_key(self) -> tuple:
        """Equal keys: the same kernels on tensors of the same shapes (page ids aside, whose
        capacity the graph buckets)."""
        shapes = tuple(tuple(x.shape) for x in self._inputs)
        sc = None if self._scores is None else tuple(self._scores.shape)
        widths = (getattr(self, "_K", 0), getattr(self, "_kf", 0), getattr(self, "_nf", 0))  # Python-side sizes
        pre = self.n_pre if self.rule is None else self.split is not None  # the rule: prefill is data
        return (self.method, pre, self._n_sel, len(self.q_len), int(self.positions.shape[0]), shapes, sc,
                widths, self.store.version, self.lists0 is not None)

    def _plan(self, lists, num_q_heads: int):
        if self.max_items is None and self.width_class is not None and not self.off_rule:
            self._set_caps(num_q_heads)
        return super()._plan(lists, num_q_heads)

    def _set_caps(self, num_q_heads: int) -> None:
        """The shape rule's room for this pass's attention work lists (`spsim.worklist.work_cap`): fixed
        by its request and token counts and its width class, not by its contexts, so passes of
        one composition share one graph whatever their lengths (and their tile, short or long)."""
        from spsim.worklist import work_cap

        from .attention import PREFILL_TILE, SHORT_TILE, TALL_TILE, choose_block_m

        g = num_q_heads // self.hkv
        kv_max = self.width_class * self.ps
        n = len(self.q_len) - (0 if self.skip is None else len(self.skip))
        q = self.q_len if self.tile_q is None else np.minimum(self.q_len, max(1, self.tile_q))
        if self.split is not None:
            q = np.delete(q, self.split)
        bm = choose_block_m(q, g)
        bn = SHORT_TILE[0] if bm <= 32 else TALL_TILE[0] if bm < 128 else PREFILL_TILE[0]
        self.max_items = work_cap(n * self.hkv, kv_max, max(self.ps, bn))
        self._merge_caps = [n * self.hkv]
        if self.split is not None:
            self.block_m_split = bm_t = 128  # the prefill tile, whatever the chunks' lengths
            # each chunk adds at most one part-filled query block: room for SPLIT_ROOM chunks, else
            # for every row (a burst of short prompts puts several into one pass; 12 did on an H100
            # at 4x Azure). Two rooms fixed by the request count: the start-up set keys both
            room = SPLIT_ROOM if len(self.split) <= SPLIT_ROOM else n
            units = self.hkv * (-(-int(self.positions.shape[0]) // (bm_t // g)) + room)
            self.max_items_split = work_cap(units, kv_max, max(self.ps, PREFILL_TILE[0]))
            self._merge_caps.append(units)

    def plan_caps(self) -> list | None:
        """`attention.pad_plan`'s room for each launch of this pass's plan (None: off the rule)."""
        if self.max_items is None:
            return None
        caps = [(self.max_items, self._merge_caps[0])]
        if self.max_items_split is not None:
            caps.append((self.max_items_split, self._merge_caps[1]))
        return caps

    def id_capacities(self) -> list[int]:
        """Page-id room for each of `graph_lists()`: the rule's (fixed by the request count and the
        slab), else a power of two over this pass's own lists."""
        if self.width_class is None or self.off_rule:
            return [1 << max(10, (int(L.indices.shape[0]) - 1).bit_length()) for L in self.graph_lists()]
        n = len(self.q_len)
        slab = self._rows * self._K if self._n_sel else 0
        caps = [self.rule.ids_capacity(n, slab)]
        if self.lists0 is not None:
            caps.append(self.rule.ids_capacity(n))
        return caps

    def pad_page_ids(self, caps: list[int], buffer=None) -> None:
        """Give the page lists' id arrays room for `caps` ids (a captured pass is reloaded with
        passes of other contexts). `buffer(key, shape, dtype)`: a tensor shared by every captured
        pass that asks for the same key (graphs.py: passes replay one at a time, each reloading it)."""
        for i, (L, cap) in enumerate(zip(self.graph_lists(), caps)):
            n = int(L.indices.shape[0])
            if n < cap or buffer is not None:
                idx = (torch.zeros(cap, dtype=L.indices.dtype, device=L.indices.device) if buffer is None
                       else buffer(("ids", i), (max(cap, n),), L.indices.dtype))
                idx[:n] = L.indices
                L.indices = idx
        if self._n_sel:
            self._slab = self.lists.indices[self._slab_at:self._slab_at + self._rows * self._K].view(self._rows, self._K)

    def share_buffers(self, buffer) -> None:
        """Use `buffer(key, shape, dtype)`'s shared tensors for the pass's large per-pass tensors
        (page scores, written and read within a pass; drafting rows' page tables, reloaded before
        every replay), so a few hundred captured passes do not each hold their own."""
        if self._scores is not None:
            self._scores = buffer(("scores",), tuple(self._scores.shape), self._scores.dtype)
        for name in ("_table_flat", "_first_table", "_table"):
            t = getattr(self, name, None)
            if t is None or t.numel() < 4096:
                continue
            buf = buffer((name,), tuple(t.shape), t.dtype)
            buf.copy_(t)
            self._inputs[next(i for i, x in enumerate(self._inputs) if x is t)] = buf
            setattr(self, name, buf)

    # -- per layer (device only)
    def lists_for(self, layer: int):
        if not self._n_sel:
            return self.lists
        if self.method == DraftMethod.STEP_LAYER:
            if layer == 0:
                return self.lists0
            if layer == 1:  # layer 0 has run: its scores rank the pages for every later layer
                s = self._scores.index_select(0, self._sc_rows)
                masks = self._masks(self._step_pages, self._step_pages, self._step_w)
                self._write(self._top_k(s, masks, self._counts_t, self._K))
            return self.lists
        if self.method == DraftMethod.STEP_QUEST:
            s = dispatch.quest_scores(self._draft_q(), self.meta[layer], self._table, self._npg, SINK, RECENT)
            self._write(self._top_k(s, None, self._counts_t, self._K))
        elif self.method in (DraftMethod.VERIFY_QUEST, DraftMethod.VERIFY_ATTN):
            self._verify_selection(layer)
        return self.lists

    def _verify_selection(self, layer: int) -> None:
        """A run's first drafts select and store their pages; every draft reads its run's stored
        pages plus the pages its drafts have reached since (page ids top + 1 ..)."""
        st = self.store
        if self._nf and layer == 0 and self.method == DraftMethod.VERIFY_ATTN:  # once a forward (captured with it)
            self._first_masks = self._masks(self._first_mask_n, self._first_mask_sc, self._first_w)
        if self._nf:
            if self.method == DraftMethod.VERIFY_QUEST:
                q = self._draft_q().index_select(0, self._first)
                s = dispatch.quest_scores(q, self.meta[layer], self._first_table, self._first_npg, SINK, RECENT)
                masks = None
            else:
                s = st.scores[layer].index_select(0, self._first_score_rows)[:, :self._first_w]
                masks = self._first_masks
            sel = self._top_k(s, masks, self._first_counts, self._kf)
            st.sel[layer, :, :, :self._kf].index_copy_(0, self._first_slots, sel.view(self._nf, self.hkv, self._kf))
        g = st.sel[layer].index_select(0, self._slots).view(self._rows, st.kp)
        K = self._K
        g = torch.nn.functional.pad(g, (0, K - st.kp), value=-1) if K > st.kp else g[:, :K]
        self._write(torch.where(self._col < self._c_sel, g, self._top + 1 + (self._col - self._c_sel)))

    @staticmethod
    def _top_k(s, masks, counts_t, k: int):
        if masks is not None:
            s = s.masked_fill(masks[0], float("-inf")).masked_fill(masks[1], float("inf"))
        if dispatch.use_triton(s.device):
            from .quest import topk_pages

            return topk_pages(s, counts_t, k)
        out = top_pages(s, counts_t.cpu().numpy())
        return torch.nn.functional.pad(out, (0, k - out.shape[1]), value=-1) if out.shape[1] < k else out

    def _write(self, sel: torch.Tensor) -> None:
        """Logical pages `[rows, <= K]` -> physical page ids in the slab."""
        if sel.shape[1] < self._K:
            sel = torch.nn.functional.pad(sel, (0, self._K - sel.shape[1]), value=-1)
        phys = self._table_flat[self._row_base + sel.clamp(0, self._width - 1)]
        self._slab.copy_(phys)

    def _draft_q(self) -> torch.Tensor:
        return self._q.index_select(0, self._dq)

    def page_scores_for(self, layer: int):
        if self._scores is None:
            return None
        if self.method == DraftMethod.STEP_LAYER and layer != 0 and self._keep is None:
            return None
        return self._scores

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """The new K/V, and with Quest bounds kept, the pages' bounds (one kernel: `kv_write.py`)."""
        if self.meta is None:
            return super().write(layer, k, v)
        if self.fused_write():
            from .kv_write import write_kv

            kc, vc = self.cache.k[layer], self.cache.v[layer]
            write_kv(kc, vc, k, v, self._page, self._off, self._run, self.meta[layer])
            return
        self.meta[layer].append(k, self._page, self._off)
        super().write(layer, k, v)

    def bounds(self, layer: int):
        return (self._run, self.meta[layer]) if self.meta is not None else (None, None)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None) -> torch.Tensor:
        self._q = q
        out = super().__call__(layer, q, k, v)
        if self._keep is not None:
            src, dst = self._keep
            w = self._scores.shape[1]
            self.store.scores[layer, :, :w].index_copy_(0, dst, self._scores.index_select(0, src))
        return out
