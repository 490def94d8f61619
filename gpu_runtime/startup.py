"""The start-up set: made-up passes of every shape a server under these settings can meet
(`ShapeSet`), captured as CUDA graphs once per process before the first request (`capture`), as
vLLM and SGLang capture their batch sizes at start-up. The shapes themselves follow the shape rule
(shapes.py); this module decides only which made-up passes to run and captures them, so it takes
start-up time, never a served pass's time (a pass outside the set runs eager and is counted by
reason: graphs.py).
"""

from __future__ import annotations

import time
from functools import lru_cache

import numpy as np
import torch

from .shapes import ShapeRule

@lru_cache(maxsize=None)
def _tile_rows(q: int, group: int) -> int:
    from .attention import choose_block_m

    return choose_block_m([q], group)


class ShapeSet:
    """Made-up passes, one of every shape a server under these settings can meet, to capture
    before the first request (`capture`).

    A padded pass's graph key (graphs.py) is fixed by: its padded request count R (prefill chunks,
    drafting and verifying requests together, a power of two up to `max_batch`'s), its padded
    token count (buckets.rule_size; the logits count follows R and it), whether it drafts and
    whether a run's first draft selects pages (drafting is data: selections run over R
    entries), the attention tile of its
    tallest short query, whether a prefill chunk runs in a launch of its own, the width class of
    its longest request, and its attention work lists' padded sizes and tile, which follow
    contexts within a class. So the set walks R x drafting state x the (tokens, tile)
    combinations the counts allow x prefill chunks x classes x a ladder of contexts per class,
    and keeps one pass per distinct key. Contexts a class cannot hold for R requests at once
    (the KV pool) are left out.
    """

    # contexts within a class: where its work sizes change. 0.75 added no key to 0.5 and 1.0 for any
    # policy at an H100's and an H200's 8B pool (max batch 256, counted on the CPU); dropping 0.5
    # too lost aspire 2-3 keys
    LADDER = (0.0, 0.5, 1.0)

    def __init__(self, rule: ShapeRule, *, max_batch: int, token_limit: int, group: int, pool_pages: int,
                 drafts: bool, first_drafts: bool, token_budget: int, kv_heads: int = 8):
        self.rule, self.max_batch, self.token_limit = rule, int(max_batch), int(token_limit)
        self.kv_heads = int(kv_heads)
        self.group, self.pool_pages = int(group), int(pool_pages)
        self.drafts, self.first = bool(drafts), bool(first_drafts)
        self.token_budget = int(token_budget)
        self.chunk_max = min(self.token_budget, self.token_limit - 1)

    def max_logit_rows(self) -> int:
        """An upper bound of any pass's logits rows: its padded token count less one (padding.py
        `rule_logits`), at most the largest token class."""
        from spsim.buckets import rule_size

        return rule_size(self.token_limit + 1)

    def contexts(self, rows: int) -> list[int]:
        """Context lengths (tokens) to try for `rows` requests: a ladder inside each width class
        whose contexts the pool holds for that many requests."""
        r, ps, out, lo = self.rule, self.rule.page_size, [], 1
        for c in r.classes:
            hi = c * ps - r.max_draft - 2 * ps  # room for a run of drafts in the class
            if hi < lo or rows * lo > self.pool_pages * ps:
                break
            hi = min(hi, self.pool_pages * ps // rows)
            out += sorted({int(lo + (hi - lo) * f) for f in self.LADDER})
            lo = c * ps + 1
        return out

    def pages(self, ctx: int) -> int:
        """Pages of a request of `ctx` tokens with a run of drafts."""
        return -(-(ctx + self.rule.max_draft + 1) // self.rule.page_size)

    def rest(self, rows: int, top: int) -> int:
        """The context each of `rows - 1` requests has where one has `top` and the pool is full
        (at most `top`, at least one token)."""
        pages = (self.pool_pages - self.pages(top)) // max(1, rows - 1) - 1
        return int(max(1, min(top, pages * self.rule.page_size - self.rule.max_draft - 1)))

    def lone_tops(self, rows: int, ladder: list[int]) -> list[int]:
        """The longest context of each class past `ladder` (whose contexts the pool cannot hold for
        `rows` requests at once) that one request reaches beside `rows - 1` short ones: the pool
        bounds the contexts' sum, not the longest (an offline run of 50 Mooncake requests on an
        H100 decoded 33 rows, one of 88K tokens, in 355 passes outside a set without it)."""
        r, ps, out = self.rule, self.rule.page_size, []
        room = (self.pool_pages - 2 * (rows - 1)) * ps  # each short request: at most two pages
        lo = max(ladder, default=0) + 1
        for c in r.classes:
            hi = min(c * ps - r.max_draft - 2 * ps, r.max_context, room)
            if hi >= lo and r.width(self.pages(hi)) == c:
                out.append(hi)
        return out

    def compositions(self):
        """(R, drafting state, verifies as query lengths, prefill chunks) of every distinct
        (tokens, tile) combination: the part of a key that does not follow contexts.
        Passes carrying a prefill chunk take a fixed tile under the rule
        (executor.py), so for them only the token class varies."""
        from spsim.buckets import pow2, rule_size

        qmax = self.rule.max_draft + 1 if self.drafts else 1
        states = [0] + ([1] + ([2] if self.first else []) if self.drafts else [])
        R = 1
        while R <= pow2(self.max_batch):
            for state in states:
                D = 1 if state else 0
                seen: dict = {}
                # decode-like passes: more than R / 2 real requests (the executor pads to the next
                # power of two); per key the one with the most requests (its long-drafting variant
                # then has the most drafting runs: `passes`)
                for V in range(max(0, R // 2 + 1 - D), R - D + 1):
                    if D + V == 0:
                        continue
                    for qm in range(1, (qmax if V else 1) + 1):
                        lo, hi = (V - 1 + qm, V * qm) if V else (0, 0)
                        for S in self._sums(lo, hi, R - V):
                            tokens = D + S + (R - D - V)
                            if tokens >= self.token_limit:  # a filler token too: buckets.rule_graphed
                                continue
                            key = (rule_size(tokens + 1), _tile_rows(qm if V else 1, self.group))
                            seen[key] = (V, qm, S)
                for V, qm, S in seen.values():
                    yield R, state, self._verifies(V, qm, S), ()
                # prefill chunks, the rest 1-token verifications: the rule gives a prefill pass
                # of a drafting policy every selection (executor.py), so one drafting state for all.
                # The chunks' count enters the key only through the prefill launch's room
                # (pass_attention.py `_set_caps`): one count per room
                if state == states[-1]:
                    for n_pre in self._chunk_counts(R):
                        base = R - n_pre  # every other row one token
                        chunk = n_pre  # the chunks' tokens together, one at least each
                        while base + chunk <= self.token_limit - 1 and chunk <= self.chunk_max:
                            T = rule_size(base + chunk + 1)
                            top = min(T - 1 - base, self.chunk_max)  # the most tokens of this token class
                            for c in sorted({chunk, top}):
                                if ("p", n_pre, T, c == top) not in seen:
                                    seen[("p", n_pre, T, c == top)] = True
                                    # nothing drafts: the rule selects anyway
                                    yield R, 0, [1] * base, self._split(c, n_pre)
                            chunk = top + 1
            R *= 2

    @staticmethod
    def _chunk_counts(R: int) -> list[int]:
        """Prefill chunk counts of an R-request pass, one per room of its prefill launch
        (pass_attention.py `_set_caps`: SPLIT_ROOM chunks, else every row)."""
        from .pass_attention import SPLIT_ROOM

        return [1] + ([SPLIT_ROOM + 1] if R > SPLIT_ROOM else [])

    @staticmethod
    def _split(tokens: int, n: int) -> tuple:
        """`tokens` over `n` chunks, as even as can be (the first the longest)."""
        q, r = divmod(tokens, n)
        return tuple(q + (i < r) for i in range(n))

    @staticmethod
    def _sums(lo: int, hi: int, base: int):
        """Verify-token totals S in [lo, hi] that reach every token class: the token count is
        `base + S`, padded (n + 1) by buckets.rule_size (the logits count follows the padded
        counts: padding.py `rule_logits`)."""
        from spsim.buckets import rule_size

        if hi <= 0:
            return [0]
        out, s = {lo, hi}, lo
        while s < hi:
            nxt = rule_size(base + s + 1, 8) - base  # the first total of the next class
            if nxt <= s:
                nxt = s + 1
            if lo <= nxt <= hi:
                out.add(nxt)
                out.add(nxt - 1)
            s = nxt
        return sorted(x for x in out if lo <= x <= hi)

    def _most_drafting(self, d: int, verifies: list[int]) -> list[int]:
        """The same requests, tokens and tallest query with as many of them drafting (one token
        each) as the verifications' tokens allow: the verifications left."""
        if not verifies:
            return []
        n, total, qm = d + len(verifies), d + sum(verifies), max(verifies)
        v = 1 if qm == 1 else max(1, -(-(total - n) // (qm - 1)))
        v = min(v, len(verifies))
        return self._verifies(v, qm, total - (n - v))

    @staticmethod
    def _verifies(V: int, qm: int, S: int) -> list[int]:
        """V query lengths, the first `qm`, each 1..qm, summing to S."""
        if not V:
            return []
        q = [qm] + [1] * (V - 1)
        extra = S - qm - (V - 1)
        for i in range(1, V):
            add = min(extra, qm - 1)
            q[i] += add
            extra -= add
        assert extra == 0 and sum(q) == S, (V, qm, S)
        return q

    def eager_passes(self):
        """Made-up passes past the graph's token limit, run eagerly once at start-up so their kernels
        compile before the first request (a first large prefill chunk once stalled a measured run
        by 0.5 s on an H100): chunks just past the limit, each from an empty context and behind
        one, alone and beside a decoding request of each drafting state. Triton specialises an
        integer argument only by whether it is 1 and whether 16 divides it (the tiles are fixed by
        the rule for prefill), so an odd chunk and the next multiple of 16 compile what every
        chunk up to the token budget runs: the budget's largest chunk adds compute, not kernels.
        Then decode-like rows in the numbers and contexts that take the attention's other tiles."""
        if self.token_budget <= self.token_limit:
            return
        states = [0] + ([1] + ([2] if self.first else []) if self.drafts else [])
        ctx = min(4 * self.rule.page_size, self.rule.max_context // 2)
        n = self.token_limit + 1
        chunks = {n + (n % 16 == 0), -(-n // 16) * 16}  # 16 does not divide one, divides the other
        for chunk in sorted(c for c in chunks if c <= self.token_budget):
            for before in (0, ctx):
                yield dict(prefill=[(chunk, before)])
                for state in states:
                    drafts = [(ctx, 0 if state == 2 else 1)] if state else []
                    yield dict(prefill=[(chunk, before)], drafts=drafts, verifies=[] if state else [(1, ctx)])
        if self.token_budget not in chunks:  # once at the budget: the allocator holds its activations
            yield dict(prefill=[(self.token_budget, 0)])
        # Outside the graphs the drafting rows' widths follow their contexts (no width classes), and
        # the page selection's top-k kernel takes powers of two of them as block sizes: one pass per
        # power of two of pages, so each block size compiles now (a fixed-k run on an H100 once
        # stalled 0.6 s, then 0.1-0.2 s three times, as its drafting contexts grew beside long chunks)
        ps, p = self.rule.page_size, 8
        while len(states) > 1 and p <= 2 * self.rule.max_pages:
            c = min((p - 1) * ps - 2, self.rule.max_context)  # `p` pages with its draft, at most the longest
            for state in states[1:]:
                yield dict(prefill=[(self.token_limit + 1, 0)], drafts=[(c, 0 if state == 2 else 1)], verifies=[])
            p *= 2
        # Beside a chunk past the limit the decode-like rows are planned by their own contexts, not
        # in a padded room: a lone row of a few thousand tokens splits into a merge launch, many
        # rows (or a few long ones) take the long tile (LONG_TILE_WAVES waves of work items), each
        # in the variants the graphs capture, compiled here before the first request all the same
        from spsim.worklist import NUM_SMS

        from .attention import LONG_TILE_WAVES

        many = -(-LONG_TILE_WAVES * NUM_SMS // self.kv_heads)  # rows of one item per head each
        room = self.token_budget - n  # (n: the chunk just past the limit, above)
        verify_q = (1, self.rule.max_draft + 1) if self.drafts else (1,)
        for rows, c in ((1, 2048), (many, 4 * self.rule.page_size), (16, 20480)):
            rows, c = min(rows, self.max_batch - 1), min(c, self.rule.max_context // 2)
            for q in verify_q:
                if rows * q <= room:
                    yield dict(prefill=[(n, 0)], verifies=[(q, c)] * rows)
            for state in states[1:]:
                if rows * 2 <= room:
                    yield dict(prefill=[(n, 0)], drafts=[(c, 0 if state == 2 else 1)] * rows, verifies=[])

    def passes(self):
        """Every made-up pass, as `RuntimeExecutor.synthetic`'s arguments: each composition over
        the context ladder, all requests alike, and once more per class with one request at the
        class's longest and the others short (fewer work items: the short tile where uniform
        contexts would take the long one)."""
        for R, state, verifies, chunks in self.compositions():
            ladder = self.contexts(R)
            top_of: dict = {}  # width class -> the longest context of the ladder in it
            for c in ladder:
                w = self.rule.width(self.pages(c))
                top_of[w] = max(top_of.get(w, 0), c)
            lone = self.lone_tops(R, ladder)
            tops = set(top_of.values()) | set(lone)
            variants = [(c, 0) for c in ladder] + [(c, 1) for c in sorted(tops)]
            if state:  # every 1-token verification a long drafting run instead (tokens alike):
                variants += [(c, 2) for c in sorted(tops)]  # sparse lists short, layer 0's full ones long
            # past the ladder, the others as long as the pool holds too: the most work items, which
            # take the other tile (attention.py LONG_TILE) where one long request beside short ones does not
            variants += [(c, 3) for c in lone if R > 1]
            for ctx, mixed in variants:
                short = self.rest(R, ctx) if mixed == 3 else 16 if mixed else ctx
                drafts = [(ctx, 0 if state == 2 else 1)] if state else []
                ver = list(verifies)
                if mixed == 2:
                    ver = self._most_drafting(len(drafts), ver)
                    drafts += [(ctx, 1)] * (len(verifies) - len(ver))
                # the first chunk ends at the context; the others are whole short prompts
                pre = [(c, max(0, (short if drafts else ctx) - c) if i == 0 else 0) for i, c in enumerate(chunks)]
                first = not drafts and not pre
                yield dict(prefill=pre, drafts=drafts,
                           verifies=[(q, ctx if first and i == 0 else short) for i, q in enumerate(ver)])


def shape_set_for(rule: ShapeRule, batcher_config, model_cfg, method: int, pool_pages: int,
                  token_limit: int | None = None) -> ShapeSet:
    """The start-up set of a run's settings: its batcher's limits, the model's head group, the
    draft-KV method (whether a run's first draft selects pages)."""
    from spsim.plan import DraftMethod

    from .graphs import PREFILL_GRAPH_TOKENS

    bc = batcher_config
    return ShapeSet(rule, max_batch=bc.max_batch, token_limit=token_limit or PREFILL_GRAPH_TOKENS,
                    group=model_cfg.q_heads // model_cfg.kv_heads, pool_pages=pool_pages,
                    drafts=rule.max_draft > 0,
                    first_drafts=method in (DraftMethod.VERIFY_QUEST, DraftMethod.VERIFY_ATTN),
                    token_budget=bc.token_budget, kv_heads=model_cfg.kv_heads)


class PreKey:
    """What fixes a made-up pass's graph key, from its spec alone, on host numbers: no pass is
    built, nothing uploaded (building one, `RuntimeExecutor.synthetic`, then keying it,
    `GraphedPasses.shape_key`, took ~25 s of an H100's start-up for ~7,000 passes of ~1,200 keys).

    Under the shape rule a key reads a pass's composition only through its counts (padded requests,
    requests and tokens with the filler, logits rows, selection entries, whether it carries prefill,
    drafts, starts a run), the attention launches' tiles and rooms (`PassAttention._set_caps`), and
    its contexts only through the width class of its longest request, whether it stays on the rule
    (context, drafting slab, work within the room) and the tile: a short-tile launch of many work
    items takes the long tile (`attention.plan_attention`). The pre-key is those, and the draft
    store's version; a launch whose work could pass its room (then padded by its own sizes) gets a
    pre-key of its own. Passes off the rule give None: `capture` skips them, as it skips their
    built passes. What follows contexts is computed per pass, the rest once per composition (and
    class). `DEDUPE = "check"` builds every pass and asserts equal pre-keys gave equal keys
    (tests/test_startup.py: the key sets with and without the pre-key equal, five policies)."""

    def __init__(self, ex, q_heads: int):
        from .pass_attention import budget_pages

        self.ex, self.pad, self.rule = ex, ex.padding, ex.padding.rule
        self.ps, self.hkv = self.rule.page_size, ex.cache.cfg.kv_heads
        self.q_heads, self.g = int(q_heads), int(q_heads) // self.hkv
        self.kp = budget_pages(ex.budget, self.ps)
        self._comp: dict = {}  # composition -> its context-free part (`_composition`)
        self._launches: dict = {}  # (composition, class) -> its launches (`_plan_launches`)
        self._own = 0  # passes given a pre-key of their own

    def __call__(self, prefill=(), drafts=(), verifies=()):
        """The pre-key of `RuntimeExecutor.synthetic(prefill, drafts, verifies)`'s pass (None: no
        graph), mirroring executor.py `_prepare` (ruled) and pass_attention.py `PassAttention`."""
        from spsim.plan import DraftMethod

        comp = (tuple(n for n, _ in prefill), tuple(p for _, p in drafts), tuple(q for q, _ in verifies))
        c = self._comp.get(comp)
        if c is None:
            c = self._comp[comp] = self._composition(*comp)
        if not c:
            return None
        q_len, n_rows, n_pre, n_dr, entries, shape = c
        rule, ps = self.rule, self.ps
        kv = q_len.copy()  # tokens each request attends to: start + query (dummies and filler start at 0)
        kv[:n_pre + n_dr + len(verifies)] += ([s for _, s in prefill] + [s + p for s, p in drafts]
                                              + [s for _, s in verifies])
        longest = -(-int(kv.max()) // ps)
        if n_dr:  # a drafting request's page table holds its next token's page too
            longest = max(longest, max(-(-(s + p + 2) // ps) for s, p in drafts))
        width = rule.width(longest)
        if width is None:
            return None  # off the rule: not captured
        rows = kv  # what each request's rows attend to in the pass's main page lists
        if n_dr or entries:  # the drafting slab's page counts (pass_attention.py `_setup_drafts`)
            d_kv = np.ones(entries, np.int64)
            run = np.zeros(entries, np.int64)
            d_kv[:n_dr] = kv[n_pre:n_pre + n_dr]
            run[:n_dr] = [s for s, _ in drafts]
            npg = -(-d_kv // ps)
            if self.ex.method in (DraftMethod.VERIFY_QUEST, DraftMethod.VERIFY_ATTN):
                counts = np.minimum(-(-(run + 1) // ps), self.kp) + (npg - 1 - run // ps)
            else:
                counts = np.minimum(npg, self.kp)
            if -(-max(int(counts.max()), self.kp + 2) // 8) * 8 > rule.slab_width:
                return None  # off the rule
            if n_dr:
                rows = kv.copy()
                rows[n_pre:n_pre + n_dr] = (counts[:n_dr] - 1) * ps + (d_kv[:n_dr] - 1) % ps + 1
        lc = self._launches.get((comp, width))
        if lc is None:
            lc = self._launches[(comp, width)] = self._plan_launches(q_len, n_rows, n_pre, n_dr, entries, width)
        if lc == "own":
            self._own += 1
            return ("own", self._own)
        lists, split = lc
        tiles = [split]
        for i, launches in enumerate(lists):
            for sub, bm, bn, tile, room, cap, follows in launches:
                if follows:  # this launch's tile or room may follow contexts
                    t = self._launch(q_len, kv if i else rows, sub, bm, room, cap)
                    if t is None:
                        self._own += 1
                        return ("own", self._own)
                    bn, tile = t
                tiles.append((bm, bn, tile, room, cap))
        return shape, width, self.ex.store.version, tuple(tiles)

    def _composition(self, pre_q, draft_pos, ver_q):
        """The context-free part of a pass: (query lengths of its requests, dummies and filler
        included; padded request count; prefill chunks; drafting requests; selection entries), or
        None for a pass past the graph token limit."""
        from .graphs import PREFILL_GRAPH_TOKENS

        pad = self.pad
        n_pre, n_dr = len(pre_q), len(draft_pos)
        q = list(pre_q) + [1] * n_dr + list(ver_q)
        tokens = sum(q)
        if not q or tokens > PREFILL_GRAPH_TOKENS:
            return None
        n_rows = pad.rows(len(q))
        q += [1] * (n_rows - len(q))  # dummy verifiers, one token each
        fill = pad.filler_tokens(tokens + n_rows - (n_pre + n_dr + len(ver_q)))
        if fill:
            q.append(fill)
        entries = n_rows if n_dr or (n_pre and self.rule.max_draft > 0) else 0
        # the logits rows (executor.py `_prepare`: real rows, padded with spare dummy rows)
        real = n_pre + n_dr + sum(ver_q)
        logits = len(pad.logit_rows(list(range(real)), [0] if len(q) > real else [], (n_rows, sum(q))))
        # what of the composition the key reads besides its launches (the query lengths only
        # through counts, the tokens, the tiles and the rooms): equal for compositions that move
        # tokens between requests within one token class, or that draft instead of verifying
        shape = (n_pre, n_dr > 0, 0 in draft_pos, n_rows, len(q), sum(q), logits, entries)
        return np.asarray(q, np.int64), n_rows, n_pre, n_dr, entries, shape

    def _plan_launches(self, q_len, n_rows, n_pre, n_dr, entries, width):
        """Per page list of the pass (the main one; layer 0's full one under step-layer), its
        launches as `(requests, block_m, block_n, (warps, stages), room, merge room, follows)`,
        `follows` True where the tile or the work's fit in the room may follow contexts (computed
        per pass: `_launch`); "own" when the work is past the room whatever the contexts."""
        from types import SimpleNamespace

        from spsim.plan import DraftMethod

        from .attention import PREFILL_TILE, SHORT_TILE, TALL_TILE, choose_block_m
        from .pass_attention import SPLIT_PREFILL, PassAttention, tall_prefill

        g, hkv, n = self.g, self.hkv, len(q_len)
        split = tall_prefill(q_len, n_pre, g) if SPLIT_PREFILL else None
        if SPLIT_PREFILL and n_pre and n > n_pre:
            split = np.arange(n_pre)
        tile_q, skip = None, None
        if n > n_rows and n > 1:  # the filler (executor.py `_prepare`): its query sets no tile, it gets no work
            short = np.ones(n - 1, bool)
            if split is not None:
                short[split] = False
            tile_q = int(max(q_len[:-1][short], default=1))
            if n_pre:
                tile_q = self.rule.max_draft + 1
            skip = np.asarray([n - 1])
        # the rule's room for the work lists, by the runtime's own code on a stand-in pass
        ns = SimpleNamespace(hkv=hkv, width_class=width, ps=self.ps, q_len=q_len, skip=skip, tile_q=tile_q,
                             split=split, positions=SimpleNamespace(shape=(int(q_len.sum()),)),
                             max_items=None, max_items_split=None, block_m_split=None)
        PassAttention._set_caps(ns, self.q_heads)
        caps = PassAttention.plan_caps(ns)
        # `plan_attention`'s launches (`PagedAttention._plan`'s arguments)
        keep = np.ones(n, bool)
        if skip is not None:
            keep[skip] = False
        bm0 = None if tile_q is None else choose_block_m(np.minimum(q_len, max(1, tile_q)), g)
        if split is not None and 0 < len(split) < n:
            keep[split] = False
            launches = [(np.flatnonzero(keep), bm0, ns.max_items),
                        (np.asarray(split), ns.block_m_split, ns.max_items_split)]
        else:
            launches = [(np.flatnonzero(keep), bm0, ns.max_items)]
        out = []
        for (sub, bm, room), cap in zip(launches, caps):
            bm = bm or choose_block_m(q_len[sub], g)
            cfg = SHORT_TILE if bm <= 32 else TALL_TILE if bm < 128 else PREFILL_TILE
            nqb = np.maximum(1, -(-q_len[sub] // (bm // g)))
            units = hkv * int(nqb.sum())
            if units > room:  # past the room at any split (one item a unit at least)
                return "own"
            # items fit the room (splits lengthen until they do), merges fit where units do; only
            # the short tile's switch to the long one follows contexts
            follows = units > cap[1] or bm <= 32
            out.append((sub, bm, max(self.ps, cfg[0]), cfg[1:], room, tuple(cap), follows))
        lists0 = self.ex.method == DraftMethod.STEP_LAYER and bool(n_dr or entries)
        return ([out, out] if lists0 else [out]), None if split is None else len(split)

    def _launch(self, q_len, kv, sub, bm, room, cap):
        """`plan_attention`'s (block_n, (warps, stages)) for the requests `sub` of `kv` tokens each,
        on host numbers; None when its work or merges pass the room `cap`."""
        from spsim.worklist import MIN_SPLIT_TOKENS, NUM_SMS, WAVES, split_blocks_for

        from .attention import LONG_TILE, LONG_TILE_WAVES, PREFILL_TILE, SHORT_TILE, TALL_TILE

        g, ps, hkv = self.g, self.ps, self.hkv
        cfg = SHORT_TILE if bm <= 32 else TALL_TILE if bm < 128 else PREFILL_TILE
        bn, tile, qb = max(ps, cfg[0]), cfg[1:], bm // g
        # units (request, query block), each once per KV head (a request's heads attend alike)
        nqb = np.maximum(1, -(-q_len[sub] // qb))
        if nqb.max(initial=1) == 1:  # one query block a request (short tiles): its causal bound is its length
            u_end = kv[sub]
        else:
            u_req = np.repeat(sub, nqb)
            u_qb = (np.arange(len(u_req)) - np.repeat(np.cumsum(nqb) - nqb, nqb)) * qb
            u_kv, u_q = kv[u_req], q_len[u_req]
            u_end = np.clip(u_kv - u_q + np.minimum(u_qb + qb, u_q), 0, u_kv)
        blocks = -(-u_end // bn)

        def items(blocks, split):  # work items over every head
            return hkv * int(np.maximum(1, -(-blocks // split)).sum())

        tps = split_blocks_for(np.repeat(blocks, hkv), NUM_SMS, WAVES, MIN_SPLIT_TOKENS, bn) * bn
        longest = max(1, int(blocks.max(initial=1))) * bn
        while items(blocks, tps // bn) > room and tps < longest:
            tps *= 2
        splits = np.maximum(1, -(-blocks // (tps // bn)))
        if bm <= 32 and hkv * int(splits.sum()) >= LONG_TILE_WAVES * NUM_SMS and tps % LONG_TILE[0] == 0:
            bn, tile = max(ps, LONG_TILE[0]), LONG_TILE[1:]
            splits = np.maximum(1, -(-(-(-u_end // bn)) // (tps // bn)))
        if hkv * int(splits.sum()) > cap[0] or hkv * int((splits > 1).sum()) > cap[1]:
            return None
        return bn, tile


# skip building passes whose pre-key was seen (`PreKey`); "check": build every one and assert
# that equal pre-keys gave equal graph keys (tests)
DEDUPE: bool | str = True


def capture(graphs, ex, shape_set: ShapeSet, progress=None, warm: str = "first") -> dict:
    """Capture into `graphs` (graphs.GraphedPasses) a graph for every shape of `shape_set` through
    the executor's made-up passes (`RuntimeExecutor.synthetic`), then freeze: serving captures
    nothing more.
    A made-up pass is built and keyed only when its pre-key (`PreKey`) is new: one pass per key.
    Returns `{graphs, passes, built, seconds, bytes}` (passes: the set's made-up passes, built: those
    built; bytes: the device memory the graphs' pool and inputs took, as the allocator counts it)
    and where the seconds went (`phases`: preparing the made-up passes, pre-keys included, keying
    them, warm-up forwards, capturing, and running once each made-up pass past the graph limit,
    `ShapeSet.eager_passes`).
    `warm`: "always" runs each pass eagerly before its capture (what `forward` does); "first"
    only before the first capture of each kernel set (`_kernels`) and captures the rest in
    relaxed mode, so a kernel compiled late loads inside the capture: a warm-up forward costs
    about what a capture does."""
    dev = graphs.cache.device
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize(dev)
    mem0 = torch.cuda.memory_allocated(dev) if cuda else 0
    res0 = torch.cuda.memory_reserved(dev) if cuda else 0
    t0 = time.perf_counter()
    specs = list(shape_set.passes())
    graphs.max_graphs = max(graphs.max_graphs, len(specs))
    graphs.out_rows_hint = max(graphs.out_rows_hint, shape_set.max_logit_rows())
    phases = dict.fromkeys(("prepare", "key", "warm", "capture", "eager"), 0.0)
    t = time.perf_counter()
    eager = 0
    # the passes past the graph limit run once: their kernels compile now, not mid-serving. First:
    # their drafts at the longest contexts widen the draft store's score rows (verify-attn),
    # which the graphs then capture as they will stay
    from .compiles import COMPILES

    if cuda:  # (the interpreter compiles nothing)
        COMPILES.install()
    compiles0 = COMPILES.count
    detail = []  # per eager pass: its chunk, context behind it, drafting context, ms preparing and running
    with torch.no_grad():
        for spec in shape_set.eager_passes():
            t1 = time.perf_counter()
            attn, tok, rows, _, _ = ex.synthetic(**spec)
            t2 = time.perf_counter()
            if attn is not None:
                if graphs.capture:  # (without a GPU only prepared: nothing compiles)
                    graphs.model(tok, attn.positions, attn, logit_rows=rows)
                    if cuda:
                        torch.cuda.synchronize(dev)
                eager += 1
            (n, before), = spec["prefill"]
            dr = spec.get("drafts") or [(0, -1)]
            detail.append([n, before, dr[0][0], dr[0][1], round((t2 - t1) * 1e3, 1),
                           round((time.perf_counter() - t2) * 1e3, 1)])
    phases["eager"] = time.perf_counter() - t
    eager_compiles = COMPILES.count - compiles0
    made, warmed, built = 0, set(), 0
    # passes whose pre-key an earlier pass had key alike (`PreKey`): not built. Only where the
    # pre-key mirrors the path (the rule's padding, padded plans, prefill computed)
    pre = PreKey(ex, graphs.model.cfg.q_heads) if DEDUPE and graphs.pad and ex.padding is not None \
        and ex.padding.rule is not None and not ex.synthetic_prefill else None
    pre_seen: dict = {}  # pre-key -> the key its first pass had (None: no graph)
    for i, spec in enumerate(specs):
        t = time.perf_counter()
        if pre is not None:
            pk = pre(**spec)
            if DEDUPE != "check" and (pk is None or pk in pre_seen):
                phases["prepare"] += time.perf_counter() - t
                continue
        built += 1
        attn, tok, rows, graphable, _ = ex.synthetic(**spec)
        t1 = time.perf_counter()
        phases["prepare"] += t1 - t
        shaped = None
        if attn is not None and graphable and graphs.eligible(attn) and not attn.off_rule:
            shaped = graphs.shape_key(attn, tok, rows)
            phases["key"] += time.perf_counter() - t1
        if pre is not None:
            got = None if shaped is None else shaped[0]
            assert pk is not None or got is None, ("a pass the pre-key leaves out has a graph", spec)
            assert pre_seen.setdefault(pk, got) == got, ("one pre-key, two graph keys", spec)
        if shaped is None:
            continue
        key, plans, caps = shaped
        if key in graphs.graphs:
            continue
        graphs._note_shape(key)
        kernels = _kernels(key)
        graphs._capture(key, attn, plans, tok, rows, caps, warm=warm == "always" or kernels not in warmed,
                        phases=phases)
        warmed.add(kernels)
        made += 1
        if progress is not None:
            progress(i + 1, len(specs), made)
    if cuda:
        torch.cuda.synchronize(dev)
    if ex.padding is not None:
        ex.padding.reset_stats()
    graphs.startup_stats = {"graphs": len(graphs.graphs), "passes": len(specs), "built": built,
                            "seconds": round(time.perf_counter() - t0, 3),
                            "bytes": int(torch.cuda.memory_reserved(dev) - res0) if cuda else 0,
                            "allocated_bytes": int(torch.cuda.memory_allocated(dev) - mem0) if cuda else 0,
                            "warm": warm, "warm_ups": len(warmed) if warm == "first" else made,
                            "eager_warm_ups": eager,
                            # [chunk, context, drafting context, draft position (-1: none), prepare ms, run ms]
                            "eager_detail": detail,
                            "kernel_compiles": {"eager": eager_compiles, "all": COMPILES.count - compiles0},
                            "store_version": ex.store.version,
                            "phases": {k: round(v, 3) for k, v in phases.items()}}
    graphs.captures = 0
    graphs._parts.clear()
    graphs.frozen = True
    return graphs.startup_stats


def _kernels(key) -> tuple:
    """The kernels a key's pass launches, sizes aside: its method, prefill, whether it drafts
    and its attention tiles (what a first launch compiles)."""
    g, _tokens, _rows, _caps, plans = key
    return (g[0], g[1], bool(g[2]), g[-1], tuple(p[3:] for p in plans))
