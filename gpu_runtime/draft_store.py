"""What drafting runs keep on the GPU between passes, by request slot.

- `sel[layer, slot, kv_head, :]`: the logical pages a run's first draft selected in each layer
  (VERIFY_QUEST, VERIFY_ATTN); later drafts of the run reuse them.
- `scores[layer, slot * kv_heads + head, page]`: the page scores a request's last verification
  (or last prefill chunk) wrote in each layer (VERIFY_ATTN), with `scored_pages[slot]` on the host.

Everything is indexed by slot on the device, so a pass selects, stores and reuses pages with a few
tensor ops per layer and no host loop over requests or heads, and the same ops can be captured in
a CUDA graph. A store that must grow (more requests at once, longer contexts) reallocates and bumps
`version`: graphs captured against the old tensors are then never replayed.
"""

from __future__ import annotations

import numpy as np
import torch


class DraftStore:
    SCRATCH = -(1 << 40)  # the slot's key shared by dummy requests (negative request ids)

    def __init__(self, layers: int, kv_heads: int, budget_pages: int, device, slots: int = 16,
                 scores: bool = False):
        self.layers, self.hkv, self.kp, self.device = layers, kv_heads, max(1, budget_pages), device
        self.slot: dict[int, int] = {}
        self._free = list(range(slots - 1, -1, -1))  # popped from the end: lowest slot first
        self.sel = torch.full((layers, slots, kv_heads, self.kp), -1, dtype=torch.int64, device=device)
        self.keep_scores = scores
        self.scores: torch.Tensor | None = None  # [layers, slots * kv_heads, width], grown on demand
        self.scored_pages = np.zeros(slots, np.int64)
        self.version = 0
        # why the store grew (old slots or width, live requests, the caller): after a start-up
        # capture a growth strands every graph, so runs report it (graphs.py `stats`)
        self.growths: list[dict] = []

    def _grew(self, what: str, old: int) -> None:
        import traceback

        where = [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in traceback.extract_stack(limit=7)[:-2]]
        if len(self.growths) < 8:
            self.growths.append({"what": what, "from": int(old), "live": len(self.slot), "where": where})

    @property
    def num_slots(self) -> int:
        return self.sel.shape[1]

    def slots_of(self, rids) -> np.ndarray:
        """Each request's slot, assigned on first sight (the store grows by doubling when full)."""
        out = np.empty(len(rids), np.int64)
        for i, rid in enumerate(rids):
            if rid < 0:  # every dummy (padding.py) shares one scratch slot: nothing reads what it stores
                rid = self.SCRATCH
            s = self.slot.get(rid)
            if s is None:
                if not self._free:
                    self._grow_slots()
                s = self.slot[rid] = self._free.pop()
            out[i] = s
        return out

    def release(self, rid: int) -> None:
        s = self.slot.pop(rid, None)
        if s is not None:
            self._free.append(s)
            self.scored_pages[s] = 0

    def _grow_slots(self) -> None:
        old = self.num_slots
        n = 2 * old
        sel = torch.full((self.layers, n, self.hkv, self.kp), -1, dtype=torch.int64, device=self.device)
        sel[:, :old] = self.sel
        self.sel = sel
        sp = np.zeros(n, np.int64)
        sp[:old] = self.scored_pages
        self.scored_pages = sp
        if self.scores is not None:
            sc = torch.full((self.layers, n * self.hkv, self.scores.shape[2]), float("-inf"), device=self.device)
            sc[:, :old * self.hkv] = self.scores
            self.scores = sc
        self._free = list(range(n - 1, old - 1, -1))
        self._grew("slots", old)
        self.version += 1

    def score_rows(self, slots: np.ndarray) -> np.ndarray:
        """Rows of `scores` for the slots' KV heads, slot-major."""
        return (np.asarray(slots, np.int64)[:, None] * self.hkv + np.arange(self.hkv)).reshape(-1)

    def ensure_score_width(self, pages: int) -> None:
        """Make `scores` hold at least `pages` columns (doubling)."""
        w = 0 if self.scores is None else self.scores.shape[2]
        if pages <= w:
            return
        n = max(pages, 2 * w, 256)
        sc = torch.full((self.layers, self.num_slots * self.hkv, n), float("-inf"), device=self.device)
        if self.scores is not None:
            sc[:, :, :w] = self.scores
        self.scores = sc
        self._grew("score width", w)
        self.version += 1
