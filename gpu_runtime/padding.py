"""A pass's composition padded to a few shapes, so CUDA graphs are replayed rather than captured.

A graph fixes the shapes of a pass (graphs.py): the number of requests, of drafting rows and of
tokens. Under speculative policies these change nearly every pass (how many requests draft and
how many verify, how many tokens each verification brings): in a 128-token run of `fixed-k:k=4` at
16 x 32K on the H200, 98 of 127 decode passes had a shape never seen before and ran eagerly, at
about twice a replay's time. Serving engines pad batch sizes to a few sizes; here a pass gets
*dummy requests* that read and write only scratch pages outside the batcher's pool:

- dummy drafting rows, up to `pad_count(drafting)` (a dummy drafts at position 0 of a run that
  starts at token 0: one token, one page, not a first draft, so it scores no pages);
- dummy verifying rows of one token, up to `pad_count(verifying)`;
- one filler request whose query brings the token count to `buckets.bucket(tokens + 1)`;
- logits rows rounded up to `buckets.bucket(rows)` with the dummies' rows;
- a pass holding any run's first draft (the verify-refreshed methods select pages then) selects for
  as many entries as it has drafting rows (`DraftRows.pad_first`), the extra entries over one page
  into a scratch slot of the draft store: 0 or the drafting rows' count, not 1, 2, 4, 8, ... by how
  many runs happen to start (the largest source of distinct shapes left in a 16 x 32K fixed-k run).

`coarse=True` (`spsim run/validate --coarse-shapes`; off by default until measured on the GPU) pads
every count and size to a power of two instead (drafting and verifying rows, tokens, logits rows)
and has the drafting rows' page tables and first-draft selections take power-of-two widths
(`DraftRows.coarse`): fewer shapes for the policies whose passes mix drafting and verifying
requests in every proportion, at up to twice the dummies. Counted on the CPU for the first 45 s of
the Azure conversation trace (`benchmarks/graph_shapes.py --coarse`): `fixed-k:k=4` 404 -> 180
distinct shapes, `sync:k=4` 170 -> 68.

Dummies come after the real requests of their kind and their logits rows after every real row, so
what the executor reads back is untouched. Their KV writes and Quest bounds land on the scratch
pages; their outputs are never read.
"""

from __future__ import annotations

import numpy as np

from spsim.buckets import SCRATCH_PAGES, bucket, pad_count, pow2, rule_size

DUMMY_RID = -1  # dummy request ids count down from here (real ids are >= 0)


class PassPadding:
    """Dummy requests for one executor: their ids, page tables and the padded sizes."""

    def __init__(self, scratch_first_page: int, page_size: int, scratch_pages: int = SCRATCH_PAGES,
                 coarse: bool = False, rule=None):
        self.first, self.ps, self.n_pages = int(scratch_first_page), int(page_size), int(scratch_pages)
        self.coarse = bool(coarse) or rule is not None  # the rule pads counts to powers of two
        self.rule = rule  # shapes.ShapeRule: widths by class, fixed by the settings (None: by context)
        self._count = pow2 if self.coarse else pad_count  # request rows
        self._size = rule_size if rule is not None else pow2 if self.coarse else bucket  # tokens, logits rows (>= 8)
        self.table = np.arange(self.first, self.first + self.n_pages, dtype=np.int64)
        self.reset_stats()  # padded passes, dummy requests, filler tokens

    def note(self, dummies: int, filler: int) -> None:
        self.passes += 1
        self.dummies += dummies
        self.filler += filler

    def reset_stats(self) -> None:
        self.passes = self.dummies = self.filler = 0

    def stats(self) -> dict:
        return {"padded_passes": self.passes, "dummy_requests": self.dummies, "filler_tokens": self.filler}

    def drafters(self, n: int) -> list[int]:
        """Ids of the dummy drafting rows for `n` real ones (none when nothing drafts)."""
        return [DUMMY_RID - i for i in range(self._count(n) - n)] if n else []

    def rule_logits(self, requests: int, tokens: int) -> int:
        """Logits rows of a pass under the shape rule (before rounding): what `requests` requests
        can ask for, at most the pass's padded `tokens` less one. A function of the pass's padded
        counts alone, so the logits count is no part of the graph key (one key in three fewer
        at max batch 256); the extra rows are dummies' (an LM-head row costs ~1 GFLOP)."""
        return min(requests * (self.rule.max_draft + 1), tokens - 1)

    DUMMY_VERIFIER = DUMMY_RID - 1000

    def rows(self, n: int) -> int:
        """The shape rule's request count for `n` real requests (prefill chunks, drafting and
        verifying requests together; the filler comes on top)."""
        return self._count(n)

    def verifiers(self, n: int) -> list[int]:
        return [DUMMY_RID - 1000 - i for i in range(self._count(n) - n)] if n else []

    def filler_tokens(self, tokens: int) -> int:
        """The filler's query length (>= 1), or 0 when it would not fit the scratch pages."""
        q = self._size(tokens + 1, 8) - tokens
        # under the shape rule the filler's pages cycle over the scratch pages (filler_table): any
        # length fits, so prefill-carrying passes pad too
        return q if q <= self.n_pages * self.ps or self.rule is not None else 0

    def filler_table(self, q: int) -> np.ndarray:
        """The filler's page table for a query of `q` tokens: the scratch pages, cycled (what its
        tokens write there is never read but by itself)."""
        need = -(-int(q) // self.ps)
        return self.table if need <= self.n_pages else np.resize(self.table, need)

    FILLER_RID = DUMMY_RID - 2000

    def logit_rows(self, rows: list[int], spare: list[int], ruled: tuple[int, int] | None = None) -> list[int]:
        """`rows` + rows of dummies up to its padded size (repeating the last spare one). Under the
        shape rule (`ruled`: the pass's padded request and token counts) a pass takes the most
        logits rows those requests can have (each a verification of `max_draft + 1`), so its
        logits count follows neither its verifications nor its prefill."""
        n = len(rows)
        if ruled is not None and self.rule is not None:
            n = max(n, self.rule_logits(*ruled))
        extra = self._size(n, 8) - len(rows)
        if extra <= 0 or not spare:
            return rows
        return rows + (spare + [spare[-1]] * extra)[:extra]
