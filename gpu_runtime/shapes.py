"""The shape rule: what fixes a padded pass's tensor shapes, derived once from the serving settings.

A CUDA graph replays one set of tensor shapes (graphs.py). Before this rule, several of a pass's
shapes followed its requests' contexts (page-table and page-score widths, first-draft selection
widths, page-id capacities), so a server meeting new contexts met new shapes. Here every width a
pass's tensors take is one of a few *width classes* fixed at start-up from the settings: the
smallest class that holds the pass's longest request. The classes are a short ladder of page
counts up to the longest context the settings admit (`max_context` plus a run of drafts), so
the set of shapes a server can meet is known before the first request (startup.py: the
start-up set and its capture). Why classes and not one width: the page-selection kernels (Quest scores, top-k over
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

    def ids_capacity(self, requests: int, slab_ids: int = 0) -> int:
        """Page ids a pass's lists hold at most: each request's pages (shared by its KV heads),
        plus the drafting slab. A power of two, so few sizes recur. Sized for every request in
        the widest class whatever the pass's class: the capacity then keys no graph by class (a pass
        reads only the ids its lists count, and one buffer per size is shared), so a long request
        among many short ones, which the pool admits where as many long ones it would not, replays
        the graph of its composition (an offline Mooncake run on an H100 met 355 such passes)."""
        return pow2(max(1, requests * self.classes[-1] + slab_ids), 1024)


def rule_for(batcher_config, draft_budget: int, longest_run: int | None = None) -> ShapeRule:
    """The rule of a run's settings (`spsim.build`'s batcher config and the draft budget);
    `longest_run`: the policy's most drafts a run (`Policy.longest_run`; default the batcher's)."""
    from .pass_attention import budget_pages

    bc = batcher_config
    run = int(bc.max_draft) if longest_run is None else min(int(longest_run), int(bc.max_draft))
    return ShapeRule(page_size=int(bc.page_size), max_context=int(bc.max_context), max_draft=run,
                     budget_pages=budget_pages(draft_budget, bc.page_size))
