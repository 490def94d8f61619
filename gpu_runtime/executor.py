"""The runtime executor: one pass plan = one forward pass of a real model.

`execute(plan) -> Outcome` is the contract the simulated executor fulfils with a cost model and an
acceptance model; here time is measured and outcomes come from the model's own tokens
(`acceptance=None`, "real") or, with all compute still real, from a preset acceptance model with
the simulator's keyed draws (so a run and a replay of the same trace and seed decide alike).

Token bookkeeping per request (positions as the batcher counts them): `tokens` = prompt + committed
output tokens; the KV cache holds the first `context` of them (context = prompt + committed - 1
in decode: the newest token is the next pass's input). A draft at position `context + j` takes
the previous draft (or the newest token) as input and writes provisional KV there; a verification
re-runs `[newest, drafts...]` at `context ..` with full attention, overwriting that KV, and commits
the accepted drafts plus one token sampled from the target. Sampling draws are keyed by (seed,
request, output position, stream), so outputs do not depend on batch composition.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from spsim.buckets import rule_graphed
from spsim.plan import DraftMethod, Outcome, PassPlan

from . import sampling as S
from .kv_cache import PagedKVCache
from .draft_store import DraftStore
from .graphs import PREFILL_GRAPH_TOKENS
from .padding import PassPadding
from .pages import to_device, upload
from .pass_attention import DraftRows, PassAttention, budget_pages
from .selection import PageMeta


@dataclass
class RequestTokens:
    tokens: list[int]  # prompt + committed output
    prompt_len: int
    drafts: list[int] = field(default_factory=list)
    draft_probs: list[torch.Tensor] = field(default_factory=list)  # q_j (temperature > 0 only)
    draft_entropy: list[float] = field(default_factory=list)
    clean: int = 0  # tokens[:clean] hold no placeholder (overlapped loop: see `Slab`)


class _Zeros:
    """A made-up request's token ids (`synthetic`): n zeros, read only, without a list of n
    (start-up makes ~600K such requests of contexts up to the longest the settings admit)."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [0] * len(range(*i.indices(self.n)))
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return 0


@dataclass
class Ticket:
    """A launched pass (`RuntimeExecutor.launch`): its outcome as the host knows it at launch
    (preset acceptance decides on the host) and what `finish` needs to time and settle it."""
    plan: PassPlan
    entropy: np.ndarray
    accepted: np.ndarray
    t_start: float  # host clock when its preparation began
    done: object = None  # CUDA event after its last work (None: finished at launch, CPU or empty)
    start: object = None  # CUDA event recorded as its preparation began (timing: see finish)
    gpu: tuple | None = None  # CUDA events around the forward (time_gpu)
    tokens: tuple | None = None  # (first slab position, count, pinned host copy) of its sampled tokens
    rids: tuple = ()  # requests whose lists may hold its placeholders


class RuntimeExecutor:
    def __init__(self, model, cache: PagedKVCache, pool, table, prompt_fn, *, method: int, budget: int,
                 temperature: float = 0.0, seed: int = 0, acceptance=None, record_events: bool = True,
                 attention_fn=None, graphs=None, drafts_possible: bool = True, synthetic_prefill: bool = False,
                 padding: PassPadding | None = None, store_slots: int = 16):
        """`pool`: the batcher's `PagedKVPool` (page tables); `table`: its request table;
        `prompt_fn(rid) -> token ids`; `acceptance`: None for real acceptance, else a preset model.
        `synthetic_prefill` (timing benchmarks): prefill chunks are not computed (the KV pages keep
        whatever values they hold) and a prompt's first output token is a keyed random one, so
        decode at long context is timed without paying for its prefill. `padding`: dummy requests on
        scratch pages bring passes to a few shapes (padding.py; with CUDA graphs). `store_slots`: the
        draft store's request slots to start with (the most requests live at once: a store that
        grows mid-run leaves every graph captured before unusable, a rehearsal's too)."""
        self.model, self.cache, self.pool, self.t = model, cache, pool, table
        self.prompt_fn = prompt_fn
        self.method, self.budget = int(method), int(budget)
        self.temperature, self.seed = float(temperature), int(seed)
        self.temperatures: dict[int, float] = {}  # a request's own temperature (a server's client asked)
        self.acc = acceptance
        self.attention_fn = attention_fn
        self.graphs = graphs  # graphs.GraphedPasses: decode-like passes replayed from CUDA graphs
        self.req: dict[int, RequestTokens] = {}
        self.done: dict[int, RequestTokens] = {}  # finished requests' token state
        cfg = model.cfg
        # Quest page bounds, kept current on every KV write, only where drafts will read them
        quest = drafts_possible and self.method in (DraftMethod.VERIFY_QUEST, DraftMethod.STEP_QUEST)
        self.meta = ([PageMeta(cache.num_pages, cfg.kv_heads, cfg.head_dim, cache.k.dtype, cache.device)
                      for _ in range(cfg.layers)] if quest else None)
        self.events: list[dict] = [] if record_events else None
        self.dev = cache.device
        # selections of drafting runs and verification page scores, on the GPU by request slot
        self.store = DraftStore(cfg.layers, cfg.kv_heads, budget_pages(self.budget, cache.page_size), self.dev,
                                slots=max(1, int(store_slots)), scores=self.method == DraftMethod.VERIFY_ATTN)
        self._tables: dict[int, tuple] = {}  # rid -> (pool stamp, page table as an array): see _table
        self._synth: dict[int, np.ndarray] = {}  # made-up requests' page tables (`synthetic`)
        self._synth_tables: dict[int, np.ndarray] = {}  # the scratch table resized, by page count
        self.synthetic_prefill = synthetic_prefill
        self.last_prep_s = 0.0  # host time of the last pass's input preparation (part of its elapsed time)
        # CUDA events around the forward (calibration's split of a pass into device and host time);
        # off in runs: an event pair costs a few us and nothing reads it there
        self.time_gpu = False
        self.last_gpu_s = float("nan")  # the last pass's forward, first launch to logits, on the device
        self.padding = padding
        rule = getattr(padding, "rule", None)
        if rule is not None and self.method == DraftMethod.VERIFY_ATTN:
            # kept page scores as wide as the widest class at once: a store that grows mid-run
            # leaves every graph captured before unusable (draft_store.py)
            self.store.ensure_score_width(rule.classes[-1])
        # overlapped loop (engine.py): `launch` returns before the GPU is done and the host plans
        # and prepares the next pass meanwhile; needs preset acceptance (the outcome known on the
        # host). Sampled tokens stay on the GPU (`Slab`) until the pass is finished.
        self.overlap = False
        self.slab = Slab(self.dev)
        self._last_done = 0.0  # host clock when the last finished pass was seen done

    def reset(self, pool, table, acceptance) -> None:
        """Serve a new run over the same cache, stores and graphs (a rehearsed run: engine.py):
        every request's state forgotten, its store slots freed in place (captured graphs keep
        reading the same tensors)."""
        self.pool, self.t, self.acc = pool, table, acceptance
        self.req.clear()
        self.done.clear()
        self._tables.clear()
        for rid in list(self.store.slot):
            self.store.release(rid)
        if self.events is not None:
            self.events = []
        if self.padding is not None:
            self.padding.reset_stats()

    # ---------------------------------------------------------------- bookkeeping
    def _state(self, rid: int) -> RequestTokens:
        st = self.req.get(rid)
        if st is None:
            prompt = [int(x) for x in self.prompt_fn(rid)]
            st = self.req[rid] = RequestTokens(prompt, len(prompt))
        return st

    def _forget(self, plan: PassPlan) -> None:
        for rid in plan.preempted.tolist():  # recomputed later from its committed tokens
            st = self.req.get(rid)
            if st is not None:
                st.drafts.clear()
                st.draft_probs.clear()
                st.draft_entropy.clear()
            self.store.release(rid)
            self._tables.pop(rid, None)
        for rid in plan.released.tolist():
            self.temperatures.pop(rid, None)
            st = self.req.pop(rid, None)
            if st is not None:
                self.done[rid] = st
            self.store.release(rid)
            self._tables.pop(rid, None)

    def generated(self) -> dict[int, list[int]]:
        """Output tokens of every request seen, finished or not (call with no pass in flight)."""
        return {rid: st.tokens[st.prompt_len:] for d in (self.done, self.req) for rid, st in d.items()}

    # ---------------------------------------------------------------- one pass
    def execute(self, plan: PassPlan) -> Outcome:
        """Run one pass to its end: `finish(launch(plan))`."""
        return self.finish(self.launch(plan))

    @torch.no_grad()
    def launch(self, plan: PassPlan) -> Ticket:
        """Prepare and enqueue one pass. Without `overlap` the GPU is synchronised first (no
        earlier work counts) and the sampled tokens are read back here; with it nothing waits."""
        # timed from here: preparing a pass's inputs on the host is part of every pass of a real
        # engine (and calibration models it)
        cuda = self.dev.type == "cuda"
        assert not (self.overlap and self.acc is None), "an overlapped loop needs preset acceptance"
        if cuda and not self.overlap:
            torch.cuda.synchronize(self.dev)
        t0 = time.perf_counter()
        began = None
        if cuda:  # on the GPU's clock: when the GPU reached this pass's preparation (see finish)
            began = torch.cuda.Event(enable_timing=True)
            began.record()
        self.slab.begin()
        self._forget(plan)
        attn, tok_t, rows_t, graphable, rids = self._prepare(plan)
        if attn is None:
            self.last_prep_s = time.perf_counter() - t0
            entropy, accepted = self._outcomes(plan, None)
            return Ticket(plan, entropy, accepted, t0)
        self.last_prep_s = time.perf_counter() - t0
        ev = None
        if self.time_gpu and cuda:
            ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[0].record()
        if self.graphs is not None and graphable and self.graphs.eligible(attn):
            logits = self.graphs.forward(attn, tok_t, rows_t)
        else:
            if self.graphs is not None and self.graphs.frozen:  # what a start-up set leaves eager
                over = attn.n_pre == 0 or graphable
                self.graphs.note_eager("over the graph token limit" if over else "prefill over the graph token limit",
                                       decode_like=over)
            logits = self.model(tok_t, attn.positions, attn, logit_rows=rows_t)
        if ev is not None:
            ev[1].record()
        entropy, accepted = self._outcomes(plan, logits)
        tk = Ticket(plan, entropy, accepted, t0, gpu=ev, tokens=self.slab.end(),
                    rids=tuple(r for r in rids if r >= 0))
        if cuda:
            tk.done = torch.cuda.Event(enable_timing=True)
            tk.done.record()
            tk.start = began
        return tk

    def _prepare(self, plan: PassPlan):
        """A pass's inputs on the device: `(attention, tokens, logits rows, graphable, request ids)`
        (attention None when nothing runs: a synthetic prefill alone)."""
        if len(plan.draft_ids) and (plan.draft_method, plan.draft_budget) != (self.method, self.budget):
            # the selectors, draft store and captured graphs are built for the run's one setting
            raise ValueError(f"a plan drafting with method {plan.draft_method}, budget {plan.draft_budget} on a "
                             f"runtime built for method {self.method}, budget {self.budget}")
        rids, tables, start, qlen, toks = [], [], [], [], []
        score_rows, logit_rows = [], []
        row = 0
        for rid, n, ctx, last in zip(plan.prefill_ids.tolist(), plan.prefill_tokens.tolist(),
                                     plan.prefill_context.tolist(), plan.prefill_last.tolist()):
            st = self._state(rid)
            if self.synthetic_prefill:  # its first token comes from the keyed draw in _outcomes
                continue
            toks += st.tokens[ctx:ctx + n]
            self._add(rids, tables, start, qlen, rid, ctx, n)
            if last:
                logit_rows.append(row + n - 1)
                score_rows.append(len(rids) - 1)
            row += n
        drafts = DraftRows()
        for rid, ctx, pos in zip(plan.draft_ids.tolist(), plan.draft_context.tolist(), plan.draft_pos.tolist()):
            st = self.req[rid]
            assert len(st.drafts) == pos, (rid, len(st.drafts), pos)
            toks.append(st.tokens[ctx] if pos == 0 else st.drafts[-1])
            self._add(rids, tables, start, qlen, rid, ctx + pos, 1)
            drafts.rids.append(rid)
            drafts.kv_len.append(ctx + pos + 1)
            drafts.first.append(pos == 0)
            drafts.run_start.append(ctx)
            logit_rows.append(row)
            row += 1
        n_pre = 0 if self.synthetic_prefill else len(plan.prefill_ids)
        # graphable passes (graphs.py: no prefill, or few tokens) are padded to a few shapes
        tokens = row + int(plan.verify_query.sum())
        graphable = n_pre == 0 or tokens <= PREFILL_GRAPH_TOKENS
        if self.padding is not None and self.padding.rule is not None:
            # the shape rule bounds every graphed pass's padded tokens (its shape set is finite:
            # startup.py): past the limit the kernels hide their launches (graphs.py), prefill or not
            n_req = len(rids) + len(plan.verify_ids)
            graphable = rule_graphed(tokens, n_req, PREFILL_GRAPH_TOKENS)
        pad = self.padding if graphable else None
        spare: list[int] = []  # dummies' token rows (their logits, if any, are never read)
        ruled = pad is not None and pad.rule is not None
        if ruled:
            # the shape rule: drafting and verifying are data, not shape. The pass's requests are
            # padded to one count (dummy verifiers, below) and the drafting selections to the same
            # count (dummy entries that are no requests: pass_attention.DraftRows.entries)
            n_rows = pad.rows(len(rids) + len(plan.verify_ids))
            # a pass carrying prefill selects for every entry and as for a run's first draft
            # whether or not anything drafts (its shape then follows only its token count; such
            # passes are few and long, and a dummy entry's selection reads one scratch page)
            with_prefill = n_pre > 0 and pad.rule.max_draft > 0
            drafts.entries = n_rows if drafts.rids or with_prefill else 0
            drafts.force_first = with_prefill
            drafts.pad_first = drafts.entries
            drafts.coarse, drafts.rule = True, pad.rule
            drafts.scratch = pad.table[:1]
        elif pad is not None:
            for rid in pad.drafters(len(plan.draft_ids)):
                toks.append(0)
                self._add(rids, tables, start, qlen, rid, 0, 1, pad.table[:1])
                drafts.rids.append(rid)
                drafts.kv_len.append(1)
                drafts.first.append(False)
                drafts.run_start.append(0)
                spare.append(row)
                row += 1
            drafts.pad_first = len(drafts.rids)  # a first-draft selection as long as the drafting rows
            drafts.coarse = pad.coarse
            drafts.rule = pad.rule
        for rid, q, ctx in zip(plan.verify_ids.tolist(), plan.verify_query.tolist(), plan.verify_context.tolist()):
            st = self.req[rid]
            assert len(st.drafts) == q - 1, (rid, len(st.drafts), q)
            toks += [st.tokens[ctx]] + st.drafts
            self._add(rids, tables, start, qlen, rid, ctx, q)
            logit_rows += range(row, row + q)
            score_rows.append(len(rids) - 1)
            row += q
        if pad is not None and rids:
            dummies = pad.verifiers(len(plan.verify_ids)) if not ruled else \
                [pad.DUMMY_VERIFIER - i for i in range(n_rows - len(rids))]
            for rid in dummies:
                toks.append(0)
                self._add(rids, tables, start, qlen, rid, 0, 1, pad.table[:1])
                if self.method == DraftMethod.VERIFY_ATTN:  # kept page scores: one row per verifier, padded too
                    score_rows.append(len(rids) - 1)
                spare.append(row)
                row += 1
            q = pad.filler_tokens(row)
            if q:
                toks += [0] * q
                self._add(rids, tables, start, qlen, pad.FILLER_RID, 0, q, pad.filler_table(q))
                spare += range(row, row + q)
                row += q
            logit_rows = pad.logit_rows(logit_rows, spare, (n_rows, row) if ruled else None)
            pad.note(len(rids) - len(plan.draft_ids) - len(plan.verify_ids), q)
        if not rids:  # a synthetic prefill pass with nothing else in it
            return None, None, None, graphable, rids
        attn = PassAttention(self.cache, rids, tables, start, qlen, n_pre, drafts, self.method, self.budget,
                             self.store, self.meta, score_rows, self.attention_fn)
        attn.graphable = graphable
        if rids[-1] == PassPadding.FILLER_RID and len(qlen) > 1:
            # the filler's query (up to a quarter of the pass's tokens) runs in several query blocks
            # of the real requests' tile: letting it set the tile made 16 verifications of 16 tokens
            # at 32K run 128-row tiles (40.5 ms on the H200 where 9 tokens, a 64-row tile, took 25.6).
            # Prefill chunks planned apart keep their own tile.
            short = np.ones(len(qlen) - 1, bool)
            if attn.split is not None:
                short[attn.split] = False
            attn.tile_q = int(max(np.asarray(qlen[:-1])[short], default=1))
            if ruled and n_pre:
                # the shape rule: a pass carrying prefill takes the tallest tile a verification can
                # need, so its shape does not follow its verifications (prefill passes are few)
                attn.tile_q = pad.rule.max_draft + 1
            # nor does its attention run: its output is never read (its K/V land on scratch pages)
            attn.skip = np.asarray([len(qlen) - 1])
        tok_t, rows_t = upload([toks, logit_rows], [np.int64, np.int64], self.dev)
        if min(toks) < 0:  # placeholders: tokens earlier passes sampled, still on the GPU
            tok_t = self.slab.fill(tok_t)
        return attn, tok_t, rows_t, graphable, rids

    def finish(self, tk: Ticket) -> Outcome:
        """Wait for a launched pass; its outcome, timed from its preparation's start or, when it
        was prepared while an earlier pass ran, from that pass's end (the interval between passes
        ending is what a loop that overlaps them delivers). Passes finish in launch order."""
        if tk.done is not None:
            tk.done.synchronize()
        t = time.perf_counter()
        elapsed = t - max(tk.t_start, self._last_done)
        self._last_done = t
        if tk.start is not None:
            # the GPU's clock: its start event ran when the stream reached it (at once on an idle
            # GPU, else as the previous pass ended), so this is the same interval, without the
            # host's delay in noticing the end (an overlapped loop finishes a pass after launching
            # the next one: a launch that waits, a capture, moved time between neighbours)
            elapsed = tk.start.elapsed_time(tk.done) / 1e3
        if tk.gpu is not None:
            self.last_gpu_s = tk.gpu[0].elapsed_time(tk.gpu[1]) / 1e3
        if tk.tokens is not None:
            self.slab.settle(tk.tokens)
            for rid in tk.rids:
                st = self.req.get(rid) or self.done.get(rid)
                if st is not None:
                    self.slab.resolve(st)
        return Outcome(elapsed, tk.entropy, tk.accepted)

    def _add(self, rids, tables, start, qlen, rid, s, n, table=None) -> None:
        rids.append(rid)
        tables.append(self._table(rid) if table is None else table)
        start.append(s)
        qlen.append(n)

    SYNTH_RID = -(1 << 20)  # made-up requests of start-up passes (startup.py) count down from here

    @torch.no_grad()
    def synthetic(self, prefill=(), drafts=(), verifies=()):
        """The inputs of a made-up pass on the padding's scratch pages, assembled as a real pass's
        are (`_prepare`): `prefill` as `(tokens, context)` chunks, `drafts` as `(context, draft
        position)`, `verifies` as `(query tokens, context)`. For capturing a pass of every shape at
        start-up (startup.py); what it writes lands on scratch pages and in the draft
        store's scratch slot. Returns `_prepare`'s tuple."""
        assert self.padding is not None, "synthetic passes need padding's scratch pages"
        ps, table = self.padding.ps, self.padding.table
        fake = {}

        def add(ctx: int, tokens: int, n_drafts: int) -> int:
            rid = self.SYNTH_RID - len(fake)
            n = ctx + tokens + 1
            st = RequestTokens(_Zeros(n), n - n_drafts)
            st.drafts = [0] * n_drafts
            fake[rid] = st
            pages = -(-n // ps)
            t = self._synth_tables.get(pages)  # read-only: shared by every made-up request of that length
            if t is None:
                t = self._synth_tables[pages] = np.resize(table, pages)
            self._synth[rid] = t
            return rid

        pre = [(add(c, n, 0), n, c) for n, c in prefill]
        dr = [(add(c, p + 1, p), c, p) for c, p in drafts]
        ver = [(add(c, q, q - 1), q, c) for q, c in verifies]
        i64 = lambda xs: np.asarray(xs, np.int64)  # noqa: E731
        plan = PassPlan(prefill_ids=i64([r for r, _, _ in pre]), prefill_tokens=i64([n for _, n, _ in pre]),
                        prefill_context=i64([c for _, _, c in pre]), prefill_last=np.ones(len(pre), bool),
                        draft_ids=i64([r for r, _, _ in dr]), draft_context=i64([c for _, c, _ in dr]),
                        draft_budget=self.budget, draft_method=self.method, draft_pos=i64([p for _, _, p in dr]),
                        verify_ids=i64([r for r, _, _ in ver]), verify_query=i64([q for _, q, _ in ver]),
                        verify_context=i64([c for _, _, c in ver]))
        self.req.update(fake)
        try:
            return self._prepare(plan)
        finally:
            for rid in fake:
                self.req.pop(rid, None)
                self._synth.pop(rid, None)

    def _table(self, rid: int) -> np.ndarray:
        """The request's page table as an int64 array, converted again only when the pool's table
        changed (its stamp moves: a page added or freed, every page_size tokens), not every pass (a
        32K context's list of 2,048 ids took ~50 us to convert, per request per pass)."""
        if rid in self._synth:
            return self._synth[rid]
        stamps = getattr(self.pool, "table_stamp", None)
        if stamps is None:  # a pool without stamps (calibration's fixed tables): convert each time
            return np.asarray(self.pool.table(rid), np.int64)
        stamp = stamps.get(rid, 0)
        hit = self._tables.get(rid)
        if hit is None or hit[0] != stamp:
            hit = self._tables[rid] = (stamp, np.asarray(self.pool.tables.get(rid, ()), np.int64))
        return hit[1]

    # ---------------------------------------------------------------- sampling and acceptance
    def _emit(self, tokens: torch.Tensor) -> list[int]:
        """Sampled tokens as the host keeps them: their ids (read back now), or, overlapped,
        placeholders for them in the slab (nothing waits for the GPU)."""
        if not self.overlap:
            return tokens.tolist()
        return self.slab.put(tokens)

    def _temps(self, ids) -> float | torch.Tensor:
        """The temperature of these requests: one float when they share it (always, unless a
        server's client asked for its own), else a tensor of one per row."""
        if not self.temperatures:
            return self.temperature
        ts = [self.temperatures.get(r, self.temperature) for r in np.asarray(ids).tolist()]
        if len(set(ts)) <= 1:
            return ts[0] if ts else self.temperature
        return torch.tensor(ts, dtype=torch.float32)  # moved beside the logits where used

    def _outcomes(self, plan: PassPlan, logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        t = self.t
        r = 0
        # prefill's last chunks: the first output token (or the next one after a recompute)
        last = [rid for rid, lst in zip(plan.prefill_ids.tolist(), plan.prefill_last.tolist()) if lst]
        if last and self.synthetic_prefill:
            for rid in last:
                st = self.req[rid]
                u = S.keyed_uniform(self.seed, rid, len(st.tokens) - st.prompt_len, S.TARGET)
                st.tokens.append(int(u * self.model.cfg.vocab))
            last = []
        if last:
            sts = [self.req[rid] for rid in last]
            pos = np.asarray([len(st.tokens) - st.prompt_len for st in sts], np.int64)  # output position
            new = self._emit(_pick(logits[r:r + len(last)], self._temps(last),
                                   S.keyed_uniform(self.seed, np.asarray(last, np.int64), pos, S.TARGET)))
            for st, x in zip(sts, new):
                st.tokens.append(int(x))
            r += len(last)
        # drafts: one token each from the draft distribution
        nd = len(plan.draft_ids)
        entropy = np.full(nd, np.nan)
        if nd:
            ids = plan.draft_ids
            committed = np.asarray([len(self.req[x].tokens) - self.req[x].prompt_len for x in ids.tolist()], np.int64)
            lg = logits[r:r + nd]
            T = self._temps(ids)
            q = S.probs_from_logits(lg, T) if S.any_positive(T) else None
            # draft j of a run proposes output position committed + j
            u = S.keyed_uniform(self.seed, ids.astype(np.int64), committed + plan.draft_pos, S.DRAFT)
            new = self._emit(_pick(lg, T, u, q))
            if self.acc is None:
                ent = S.draft_entropy(lg, T).cpu().numpy()
            else:  # preset acceptance: the acceptance model's keyed entropy signal, as in a replay
                n = len(ids)
                ent = self.acc.draft_entropy(ids, committed, plan.draft_pos, plan.draft_context,
                                             np.full(n, self.budget), np.full(n, self.method))
            entropy = np.asarray(ent, np.float64)
            for i, rid in enumerate(ids.tolist()):
                st = self.req[rid]
                st.drafts.append(int(new[i]))
                st.draft_entropy.append(float(ent[i]))
                if q is not None:
                    st.draft_probs.append(q[i])
            r += nd
        # verifications: accept a prefix of the drafts, add one token from the target
        nv = len(plan.verify_ids)
        accepted = np.zeros(nv, np.int64)
        if nv and self.acc is not None:
            k = plan.verify_query - 1
            spec = k > 0
            if spec.any():
                v = plan.verify_ids[spec]
                committed = (t.committed[v] if t is not None else  # calibration runs without a request table
                             np.asarray([len(self.req[x].tokens) - self.req[x].prompt_len for x in v.tolist()], np.int64))
                accepted[spec] = self.acc.verify(v, committed, k[spec], plan.verify_context[spec],
                                                 np.full(len(v), self.budget), np.full(len(v), self.method))
        if not nv:
            return entropy, accepted
        # all verifications at once: [nv, K + 1] logits rows (rows past a request's query repeat its last)
        qn = plan.verify_query.astype(np.int64)
        K = int(qn.max()) - 1
        ids = plan.verify_ids.astype(np.int64)
        sts = [self.req[rid] for rid in ids.tolist()]
        base = np.asarray([len(st.tokens) - st.prompt_len for st in sts], np.int64)  # first draft's output position
        j = np.arange(K + 1)
        first_row = r + np.concatenate([[0], np.cumsum(qn)[:-1]])
        idx = first_row[:, None] + np.minimum(j[None, :], qn[:, None] - 1)
        p = logits[to_device(idx.reshape(-1), np.int64, logits.device)]
        T = self._temps(ids)
        if S.any_positive(T):  # greedy needs no distribution: argmax of the logits is the one-hot's
            p = S.probs_from_logits(p, T.repeat_interleave(K + 1) if isinstance(T, torch.Tensor) else T)
        p = p.view(nv, K + 1, -1)
        u_t = S.keyed_uniform(self.seed, ids[:, None], base[:, None] + j[None, :], S.TARGET)
        rows = np.arange(nv)
        if self.acc is None:
            x = np.zeros((nv, K), np.int64)
            for i, st in enumerate(sts):
                x[i, :len(st.drafts)] = st.drafts
            dq = None
            if S.any_positive(T) and K:
                dq = torch.zeros((nv, K, p.shape[-1]), dtype=p.dtype, device=p.device)
                for i, st in enumerate(sts):
                    if st.draft_probs:
                        dq[i, :len(st.draft_probs)] = torch.stack(st.draft_probs)
            u_a = S.keyed_uniform(self.seed, ids[:, None], base[:, None] + j[None, :K], S.ACCEPT)
            accepted, nxt = S.verify_batch(torch.as_tensor(x, device=p.device), dq, p, T, u_a, u_t, k=qn - 1)
        else:
            a = to_device(accepted, np.int64, p.device)
            pa = p[torch.arange(nv, device=p.device), a]  # logits at T == 0, else probabilities
            nxt = self._emit(_pick(pa, T, u_t[rows, accepted], probs=pa))
        for i, (st, rid, q, ctx) in enumerate(zip(sts, ids.tolist(), qn.tolist(), plan.verify_context.tolist())):
            k, a = q - 1, int(accepted[i])
            if self.events is not None and k:
                for jj in range(k):
                    self.events.append({"request": rid, "out_pos": int(base[i]) + jj, "draft_pos": jj,
                                        "accepted": jj < a, "entropy": st.draft_entropy[jj], "method": self.method,
                                        "budget": self.budget, "context": ctx})
            st.tokens += st.drafts[:a] + [int(nxt[i])]
            st.drafts.clear()
            st.draft_probs.clear()
            st.draft_entropy.clear()
        return entropy, np.asarray(accepted, np.int64)


def _pick(x: torch.Tensor, T, u, probs=None) -> torch.Tensor:
    """One token per row: argmax at T == 0 (`x` logits; what sampling the one-hot gives), else an
    inverse-CDF sample with `u` from `probs` (given, else softmax(x / T); per-row T: see sampling)."""
    if not S.any_positive(T):
        return x.argmax(-1)
    return S.sample(probs if probs is not None else S.probs_from_logits(x, T), u)


class Slab:
    """Sampled tokens on the GPU, for a loop that does not wait for them (`RuntimeExecutor.overlap`).

    A pass writes its sampled tokens (first tokens, drafts, verifications' next tokens) to a ring
    on the device and the host keeps a placeholder for each, `-(position + 1)`, in the requests'
    token lists; the next pass's input ids gather from the ring (`fill`), so no read-back stands
    between two passes (SGLang's overlap scheduler does the same with its future token ids). Each
    pass also queues a copy of its tokens to pinned host memory; once it is finished (`settle`)
    the placeholders of its requests are replaced by the ids (`resolve`), so a placeholder lives
    about two passes, far less than the ring's length."""

    SIZE = 1 << 20

    def __init__(self, device):
        self.dev = device
        self.ring = None  # allocated at first use
        self.host = np.zeros(self.SIZE, np.int64)  # settled values by ring index
        self.head = 0  # next position (absolute: ring index = head % SIZE)
        self.settled = 0  # positions below this are in `host`
        self._lo = 0

    def begin(self) -> None:
        """A pass starts: its tokens (at most a quarter of the ring) will sit contiguous."""
        if self.head % self.SIZE > self.SIZE - self.SIZE // 4:
            self.head += self.SIZE - self.head % self.SIZE
        self._lo = self.head

    def put(self, tokens: torch.Tensor) -> list[int]:
        n = int(tokens.shape[0])
        if not n:
            return []
        assert self.head + n - self._lo <= self.SIZE // 4, "a pass samples more tokens than the slab holds"
        if self.ring is None:
            self.ring = torch.zeros(self.SIZE, dtype=torch.int64, device=self.dev)
        i = self.head % self.SIZE
        self.ring[i:i + n] = tokens.to(torch.int64)
        ph = list(range(-self.head - 1, -self.head - n - 1, -1))
        self.head += n
        return ph

    def end(self):
        """(first position, count, host copy in flight) of this pass's tokens, or None."""
        n = self.head - self._lo
        if not n:
            return None
        i = self._lo % self.SIZE
        src = self.ring[i:i + n]
        if src.device.type == "cuda":
            dst = torch.empty(n, dtype=torch.int64, pin_memory=True)
            dst.copy_(src, non_blocking=True)
        else:
            dst = src.clone()
        return self._lo, n, dst

    def fill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Input ids with every placeholder replaced by its token from the ring."""
        ph = tokens < 0
        return torch.where(ph, self.ring[(-1 - tokens).clamp_(min=0) % self.SIZE], tokens)

    def settle(self, tokens) -> bool:
        """A finished pass's tokens reach the host (its copy has run)."""
        lo, n, dst = tokens
        i = lo % self.SIZE
        self.host[i:i + n] = dst.numpy()
        self.settled = max(self.settled, lo + n)
        return True

    def _value(self, x: int) -> int:
        return int(self.host[(-1 - x) % self.SIZE])

    def resolve(self, st: RequestTokens) -> None:
        """Settled placeholders in a request's lists replaced by their ids."""
        toks, lim = st.tokens, -1 - self.settled  # placeholders > lim are settled
        i = min(st.clean, len(toks))
        while i < len(toks):
            x = toks[i]
            if x < 0:
                if x <= lim:
                    break
                toks[i] = self._value(x)
            i += 1
        st.clean = i
        st.drafts[:] = [self._value(x) if lim < x < 0 else x for x in st.drafts]
