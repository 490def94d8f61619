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

What persists between passes (selections of a run, scores of the last verification) lives in
`DraftState`, owned by the executor, one per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from spsim.plan import DraftMethod

from .kv_cache import PagedAttention, PagedKVCache
from .pages import concat_page_lists, full_page_lists, pages_for, selected_page_lists
from .selection import PageMeta, select_from_scores, select_quest, select_static

SINK, RECENT = 1, 1  # pages always kept at the start and at the end of the context


@dataclass
class DraftState:
    """Per request: the run's selection per layer (logical pages, `[kv_heads, K]`, ascending),
    and the last verification's page scores per layer with the pages they covered."""

    selection: list | None = None
    scores: list | None = None
    scored_pages: int = 0


@dataclass
class DraftRows:
    """The pass's drafting requests (parallel lists)."""

    rids: list[int] = field(default_factory=list)
    kv_len: list[int] = field(default_factory=list)  # context + drafts held + this draft
    first: list[bool] = field(default_factory=list)  # the run's first draft (draft_pos == 0)
    run_start: list[int] = field(default_factory=list)  # context before the run (its last page is kept)


class PassAttention(PagedAttention):
    """`model.Attention` for one mixed pass (see the module docstring)."""

    def __init__(self, cache: PagedKVCache, rids: list[int], page_tables, start, q_len, n_prefill: int,
                 drafts: DraftRows, method: int, budget: int, states: dict[int, DraftState],
                 meta: list[PageMeta] | None, score_rows: list[int] | None = None, attention_fn=None):
        """Requests `rids` in pass order: `n_prefill` prefilling first, then `len(drafts.rids)`
        drafting ones, then verifying ones.
        `meta`: per-layer Quest page summaries (updated on every write) or None. `score_rows`:
        request indices (in pass order) whose page scores to keep in `states` (verifications and
        last prefill chunks, for VERIFY_ATTN)."""
        self.rids = rids
        self.n_pre, self.drafts, self.method, self.budget = n_prefill, drafts, int(method), int(budget)
        self.states, self.meta = states, meta
        self.score_rows = score_rows or []
        n_dr = len(drafts.rids)
        n_req = len(q_len)
        cfg = cache.cfg
        hkv, ps, dev = cfg.kv_heads, cache.page_size, cache.device
        # full lists for everyone; draft rows are replaced per layer below
        super().__init__(cache, page_tables, start, q_len, attention_fn=attention_fn)
        kv_len = np.asarray(start) + np.asarray(q_len)
        self.hkv, self.ps = hkv, ps
        self.n_dr = n_dr
        if n_dr:  # draft rows get their own lists: the full rows around them as separate parts
            self._pre = full_page_lists(page_tables[:self.n_pre], kv_len[:self.n_pre], hkv, ps, dev)
            self._ver = full_page_lists(page_tables[self.n_pre + n_dr:], kv_len[self.n_pre + n_dr:], hkv, ps, dev)
            self._dr_full = full_page_lists(page_tables[self.n_pre:self.n_pre + n_dr],
                                            kv_len[self.n_pre:self.n_pre + n_dr], hkv, ps, dev)
        self._dr_rows = slice(self.n_pre * hkv, (self.n_pre + n_dr) * hkv)
        # draft requests' page tables as a padded device matrix (for gathers by logical page)
        if n_dr:
            tabs = [np.asarray(t, np.int64) for t in page_tables[self.n_pre:self.n_pre + n_dr]]
            width = max(len(t) for t in tabs)
            pt = np.zeros((n_dr, width), np.int64)
            for i, t in enumerate(tabs):
                pt[i, :len(t)] = t
            self._dr_table = torch.as_tensor(pt, device=dev)
        self._dr_kv = np.asarray(drafts.kv_len, np.int64)
        self._static = None
        self._concat: dict = {}
        self._step_sel = None  # STEP_LAYER: selection from layer 0's scores, for layers 1..
        # page scores: verify-attn keeps the verifications' (and last prefill chunks'); step-layer
        # needs layer 0's for the draft rows
        want = (method == DraftMethod.VERIFY_ATTN and self.score_rows) or (method == DraftMethod.STEP_LAYER and n_dr)
        maxp = int(pages_for(kv_len, ps).max(initial=1))
        self._scores = torch.empty((n_req * hkv, maxp), dtype=torch.float32, device=dev) if want else None
        self._q = None

    # -- which pages each row reads in `layer`
    def lists_for(self, layer: int):
        if not self.n_dr:
            return self.lists
        dl = self._draft_lists(layer)
        hit = self._concat.get(id(dl))
        if hit is None or hit[0] is not dl:  # layers sharing a draft selection share the whole list
            hit = self._concat[id(dl)] = (dl, concat_page_lists([self._pre, dl, self._ver]))
        return hit[1]

    def page_scores_for(self, layer: int):
        if self._scores is None:
            return None
        if self.method == DraftMethod.STEP_LAYER and layer != 0 and not self.score_rows:
            return None
        return self._scores

    def _draft_lists(self, layer: int):
        m, d = self.method, self.drafts
        if m == DraftMethod.STATIC:
            if self._static is None:
                sel, counts = select_static(self._dr_kv, self.budget, self.ps, self.hkv, SINK, self.cache.device)
                self._static = selected_page_lists(self._dr_table, sel, counts, self._dr_kv, self.hkv, self.ps)
            return self._static
        if m == DraftMethod.STEP_LAYER:
            if layer == 0:
                return self._dr_full
            if self._step_sel is None:  # layer 0 has run: its scores rank the pages
                s = self._scores[self._dr_rows]
                sel, counts = select_from_scores(s, pages_for(self._dr_kv, self.ps), self._dr_kv, self.budget,
                                                 self.ps, self.hkv, SINK, RECENT)
                self._step_sel = selected_page_lists(self._dr_table, sel, counts, self._dr_kv, self.hkv, self.ps)
            return self._step_sel
        q = self._q[self._draft_q_rows()]
        if m == DraftMethod.STEP_QUEST:
            sel, counts = select_quest(q, self.meta[layer], self._dr_table, self._dr_kv, self.budget, self.ps,
                                       SINK, RECENT)
            return selected_page_lists(self._dr_table, sel, counts, self._dr_kv, self.hkv, self.ps)
        # VERIFY_QUEST / VERIFY_ATTN: selected at the run's first draft, reused (plus the pages
        # its drafts have reached) by the later ones
        first = np.asarray(d.first, bool)
        if first.any():
            idx = np.flatnonzero(first)
            ti = torch.as_tensor(idx, device=q.device)
            kv = self._dr_kv[idx]
            if m == DraftMethod.VERIFY_QUEST:
                sel, counts = select_quest(q[ti], self.meta[layer], self._dr_table[ti].contiguous(), kv, self.budget,
                                           self.ps, SINK, RECENT)
            else:
                s, scored = self._stored_scores(idx, layer, kv)
                sel, counts = select_from_scores(s, scored, kv, self.budget, self.ps, self.hkv, SINK, RECENT)
            for j, i in enumerate(idx.tolist()):
                rows = sel[j * self.hkv:(j + 1) * self.hkv]
                c = counts[j * self.hkv:(j + 1) * self.hkv]
                st = self.states.setdefault(d.rids[i], DraftState())
                if st.selection is None:
                    st.selection = [None] * self.cache.cfg.layers
                st.selection[layer] = [rows[h, :c[h]].clone() for h in range(self.hkv)]
        return self._from_states(layer)

    def _stored_scores(self, idx, layer, kv):
        """Each request's scores from its last verification, `[len(idx) * hkv, maxp]` (-inf past)."""
        maxp = int(pages_for(kv, self.ps).max(initial=1))
        out = torch.full((len(idx) * self.hkv, maxp), float("-inf"), device=self.cache.device)
        scored = np.zeros(len(idx), np.int64)
        for j, i in enumerate(idx.tolist()):
            st = self.states.get(self.drafts.rids[i])
            if st is None or st.scores is None:
                continue  # no verification seen (cannot happen after a prefill): sink + recent only
            s = st.scores[layer]
            w = min(s.shape[1], maxp)
            out[j * self.hkv:(j + 1) * self.hkv, :w] = s[:, :w]
            scored[j] = st.scored_pages
        return out, scored

    def _from_states(self, layer: int):
        """Draft rows from each request's stored selection plus the pages its run has reached
        since (known on the host: no device read)."""
        rows, counts = [], []
        dev = self.cache.device
        for i, rid in enumerate(self.drafts.rids):
            sel = self.states[rid].selection[layer]
            top = int(self.drafts.run_start[i]) // self.ps  # the run's first draft kept its newest page
            last = int(pages_for(self._dr_kv[i], self.ps)) - 1
            extra = torch.arange(top + 1, last + 1, device=dev) if last > top else None
            for h in range(self.hkv):
                rows.append(sel[h] if extra is None else torch.cat([sel[h], extra]))
                counts.append(len(sel[h]) + max(0, last - top))
        mat = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=-1)
        return selected_page_lists(self._dr_table, mat, np.asarray(counts), self._dr_kv, self.hkv, self.ps)

    def _plan(self, lists, num_q_heads: int):
        # The work list depends only on the rows' lengths (page counts, last-page lengths), which a
        # draft selection keeps from layer to layer: one plan per pass (per shape), and a layer
        # with another selection swaps only the page lists it reads.
        key = (lists.count_np.tobytes(), lists.last_len_np.tobytes())
        plan = self._plans.get(key)
        if plan is None:
            from . import dispatch

            if not dispatch.use_triton(self.cache.device):
                return None
            from .attention import plan_attention

            plan = self._plans[key] = plan_attention(self.q_len, lists, num_q_heads)
        if plan.lists is not lists:
            plan = replace(plan, lists=lists)
        return plan

    def _draft_q_rows(self) -> torch.Tensor:
        """Flat-batch rows of the draft tokens (one each)."""
        off = int(self.q_len[:self.n_pre].sum())
        return torch.arange(off, off + self.n_dr, device=self.cache.device)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.meta is not None:
            self.meta[layer].append(k, self._page, self._off)
        self._q = q
        out = super().__call__(layer, q, k, v)
        if self.score_rows and self.method == DraftMethod.VERIFY_ATTN:
            self._keep_scores(layer)
        return out

    def _keep_scores(self, layer: int) -> None:
        kv_len = self.start + self.q_len
        for i in self.score_rows:
            rid = self.rids[i]
            st = self.states.setdefault(rid, DraftState())
            if st.scores is None or len(st.scores) != self.cache.cfg.layers:
                st.scores = [None] * self.cache.cfg.layers
            n = int(pages_for(kv_len[i], self.ps))
            st.scores[layer] = self._scores[i * self.hkv:(i + 1) * self.hkv, :n].clone()
            st.scored_pages = n
