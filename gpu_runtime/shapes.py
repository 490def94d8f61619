"""The shape rule: what fixes a padded pass's tensor shapes, derived once from the serving settings.

A CUDA graph replays one set of tensor shapes (graphs.py). Before this rule, several of a pass's
shapes followed its requests' contexts (page-table and page-score widths, first-draft selection
widths, page-id capacities), so a server meeting new contexts met new shapes. Here every width a
pass's tensors take is one of a few *width classes* fixed at start-up from the settings: the
smallest class that holds the pass's longest request. The classes are a short ladder of page
counts up to the longest context the settings admit (`max_context` plus a run of drafts), so
the set of shapes a server can meet is known before the first request (`ShapeSet`, start-up
capture). Why classes and not one width: the page-selection kernels (Quest scores, top-k over
page scores) do work in proportion to the width they are given, so a short-context pass padded
to 128K's width would pay for it on every layer.

What the rule fixes, per class `w` (pages):
- drafting rows' page tables, page-score rows, first-draft score masks: `w` columns;
- the drafting slab's width `K` and the first-draft selection width: from the draft budget and
  the longest draft run (`max_draft`), not from contexts;
- page-id capacities of a pass's page lists: `requests * w` plus the slab.

The rest of the rule lives where it acts: request, token and logits counts and drafting as data
(padding.py, executor.py `_prepare`'s `ruled` branch, pass_attention.py `DraftRows.entries`),
attention work lists padded to a room fixed by the composition and class (attention.py
`spsim.worklist.work_cap`, pass_attention.py `_set_caps`), the in-place merge chosen per unit (attention.py).
Opt-in: `RuntimeOptions.shape_rule` and `startup_shapes` (`--startup-shapes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from spsim.buckets import pow2

# Width classes in pages below the settings' longest context: 4K and 32K tokens of 16-token
# pages. A pass takes the smallest that holds its longest request.
CLASS_PAGES = (256, 2048)


def _round_up(x: int, m: int) -> int:
    return -(-int(x) // m) * m


@dataclass(frozen=True)
class ShapeRule:
    page_size: int
    max_context: int  # the longest context a request reaches (prompt + output), in tokens
    max_draft: int  # the longest draft run before a verification
    budget_pages: int  # the draft budget's pages (sink and recent included)

    @property
    def max_pages(self) -> int:
        """Pages of the longest request: its context, a run of drafts, and one page of slack."""
        return -(-(self.max_context + self.max_draft + 1) // self.page_size) + 1

    @property
    def classes(self) -> tuple[int, ...]:
        top = _round_up(self.max_pages, 64)
        return tuple(c for c in CLASS_PAGES if c < top) + (top,)

    def width(self, pages: int) -> int | None:
        """The class holding `pages` pages (None: longer than the settings admit)."""
        for c in self.classes:
            if pages <= c:
                return c
        return None

    @property
    def slab_width(self) -> int:
        """Page ids a drafting row reads: the budget's pages plus the pages its run's drafts reach."""
        return _round_up(self.budget_pages + 2 + -(-self.max_draft // self.page_size), 8)

    def ids_capacity(self, requests: int, width: int, slab_ids: int = 0) -> int:
        """Page ids a pass's lists hold at most: each request's pages (shared by its KV heads),
        plus the drafting slab. A power of two, so few sizes recur."""
        return pow2(max(1, requests * width + slab_ids), 1024)


def rule_for(batcher_config, draft_budget: int, longest_run: int | None = None) -> ShapeRule:
    """The rule of a run's settings (`spsim.build`'s batcher config and the draft budget);
    `longest_run`: the policy's most drafts a run (`Policy.longest_run`; default the batcher's)."""
    from .pass_attention import budget_pages

    bc = batcher_config
    run = int(bc.max_draft) if longest_run is None else min(int(longest_run), int(bc.max_draft))
    return ShapeRule(page_size=int(bc.page_size), max_context=int(bc.max_context), max_draft=run,
                     budget_pages=budget_pages(draft_budget, bc.page_size))


# ----------------------------------------------------------------------------- the start-up set

@lru_cache(maxsize=None)
def _tile_rows(q: int, group: int) -> int:
    from .attention import choose_block_m

    return choose_block_m([q], group)


class ShapeSet:
    """Made-up passes, one of every shape a server under these settings can meet, to capture
    before the first request (graphs.py `GraphedPasses.startup`).

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

    LADDER = (0.0, 0.5, 0.75, 1.0)  # contexts within a class: where its work sizes change

    def __init__(self, rule: ShapeRule, *, max_batch: int, token_limit: int, group: int, pool_pages: int,
                 drafts: bool, first_drafts: bool, token_budget: int):
        self.rule, self.max_batch, self.token_limit = rule, int(max_batch), int(token_limit)
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

    def compositions(self):
        """(R, drafting state, verifies as query lengths, prefill chunk or 0) of every distinct
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
                            if tokens > self.token_limit:
                                continue
                            key = (rule_size(tokens + 1), _tile_rows(qm if V else 1, self.group))
                            seen[key] = (V, qm, S)
                for V, qm, S in seen.values():
                    yield R, state, self._verifies(V, qm, S), 0
                # one prefill chunk, the rest 1-token verifications: the rule gives a prefill pass
                # of a drafting policy every selection (executor.py), so one drafting state for all
                if state == states[-1]:
                    base = R - 1  # every other row one token
                    chunk = 1
                    while base + chunk <= self.token_limit - 1 and chunk <= self.chunk_max:
                        T = rule_size(base + chunk + 1)
                        top = min(T - 1 - base, self.chunk_max)  # the largest chunk of this token class
                        for c in sorted({chunk, top}):
                            if ("p", T, c == top) not in seen:
                                seen[("p", T, c == top)] = True
                                yield R, 0, [1] * (R - 1), c  # nothing drafts: the rule selects anyway
                        chunk = top + 1
            R *= 2

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
        by 0.5 s on an H100): a chunk just past the limit and the budget's largest, each from an
        empty context and behind one, alone and beside a decoding request of each drafting state.
        Triton specialises integer arguments by divisibility by 16, hence an odd and an even size."""
        top = self.token_budget
        if top <= self.token_limit:
            return
        states = [0] + ([1] + ([2] if self.first else []) if self.drafts else [])
        ctx = min(4 * self.rule.page_size, self.rule.max_context // 2)
        for chunk in sorted({self.token_limit + 1, top}):
            for before in (0, ctx):
                yield dict(prefill=[(chunk, before)])
                for state in states:
                    drafts = [(ctx, 0 if state == 2 else 1)] if state else []
                    yield dict(prefill=[(chunk, before)], drafts=drafts, verifies=[] if state else [(1, ctx)])

    def passes(self):
        """Every made-up pass, as `RuntimeExecutor.synthetic`'s arguments: each composition over
        the context ladder, all requests alike, and once more per class with one request at the
        class's longest and the others short (fewer work items: the short tile where uniform
        contexts would take the long one)."""
        for R, state, verifies, chunk in self.compositions():
            ladder = self.contexts(R)
            top_of: dict = {}  # width class -> the longest context of the ladder in it
            for c in ladder:
                w = self.rule.width(-(-(c + self.rule.max_draft + 1) // self.rule.page_size))
                top_of[w] = max(top_of.get(w, 0), c)
            tops = set(top_of.values())
            variants = [(c, 0) for c in ladder] + [(c, 1) for c in sorted(tops)]
            if state:  # every 1-token verification a long drafting run instead (tokens alike):
                variants += [(c, 2) for c in sorted(tops)]  # sparse lists short, layer 0's full ones long
            for ctx, mixed in variants:
                short = 16 if mixed else ctx
                drafts = [(ctx, 0 if state == 2 else 1)] if state else []
                ver = list(verifies)
                if mixed == 2:
                    ver = self._most_drafting(len(drafts), ver)
                    drafts += [(ctx, 1)] * (len(verifies) - len(ver))
                pre = [(chunk, max(0, (short if drafts else ctx) - chunk))] if chunk else []
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
                    token_budget=bc.token_budget)
