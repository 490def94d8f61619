"""The calibration sweep: which pass compositions to time on one GPU for one model shape.

A `Point` is one pass: prefill chunks `(context, tokens)`, drafting requests `(context,
draft_pos)`, verifying requests `(context, query tokens)`, the draft-KV method and budget. Its
`key` (a hash of the composition) identifies it in the measurements file, so an interrupted sweep
resumes by skipping keys already there, and a fixed fifth of the keys (by hash) is held out of
the fit to measure its error on compositions it never saw.

`default_design(window, kv_tokens)` spends points where cost changes fastest and where the
simulator asks (see docs/calibration.md):
- ar: plain decode, batch 1..128 x context 1K..window within KV memory, the memory-limited edge
  (fewest requests at each context that fill the KV), mixed lengths in one pass;
- verify: query 2..33 tokens (k = 1..32 drafts) x batch x context: GEMM growth with tokens;
- draft: every draft-KV method x batch x context x first/later draft (selection runs on a run's
  first draft for the verify-refreshed methods), and the budget at two points per method: a
  draft's cost is not a function of its budget alone (page scoring, page tables, splits);
- mixed: fixed-k / ASPIRE passes (a k+1-th of the requests verifying k+1 tokens, the others
  drafting at positions 0..k-1), uniform and mixed lengths, for every method;
- prefill: chunks 256..8192 tokens after 0..120K tokens of context, two chunks in one pass, and
  chunks beside decoding or drafting requests (chunked prefill).
Every request gets KV pages of its own, drafting ones too (`kv_tokens` bounds the pass): drafts that
shared pages selected the same ones and read them from L2, 9-29 % faster than any server runs them,
and a pass whose KV the GPU cannot hold is not one the simulator asks about. Sweeps before
2026-12-02 let drafts share; the fit leaves such points out (`shared_pages`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

import numpy as np

from spsim.plan import DRAFT_BUDGET, DraftMethod, PassPlan

GROUPS = ("ar", "verify", "draft", "mixed", "prefill")
HELDOUT_EVERY = 5  # one key in five (by hash) is never fitted on


@dataclass(frozen=True)
class Point:
    group: str
    method: int = int(DraftMethod.VERIFY_QUEST)  # the run's draft-KV method (the runtime keeps Quest bounds for quest methods)
    budget: int = DRAFT_BUDGET
    prefill: tuple = ()  # ((context, tokens), ...)
    drafts: tuple = ()  # ((context, draft_pos), ...)
    verifies: tuple = ()  # ((context, query), ...)
    note: str = field(default="", compare=False)  # what the point is for (not part of its key)

    def to_dict(self) -> dict:
        return {"group": self.group, "method": int(self.method), "budget": int(self.budget),
                "prefill": [list(x) for x in self.prefill], "drafts": [list(x) for x in self.drafts],
                "verifies": [list(x) for x in self.verifies]}

    @classmethod
    def from_dict(cls, d: dict) -> "Point":
        """Raises KeyError/TypeError/ValueError on a malformed dict (the reader names the field)."""
        pairs = lambda k: tuple((int(a), int(b)) for a, b in d[k])  # noqa: E731
        p = cls(str(d["group"]), int(d["method"]), int(d["budget"]), pairs("prefill"), pairs("drafts"),
                pairs("verifies"))
        if p.group not in GROUPS:
            raise ValueError(f"group {p.group!r} (known: {', '.join(GROUPS)})")
        DraftMethod(p.method)
        if not (p.prefill or p.drafts or p.verifies):
            raise ValueError("an empty pass")
        return p

    @property
    def key(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    @property
    def heldout(self) -> bool:
        return int(self.key, 16) % HELDOUT_EVERY == 0

    @property
    def tier(self) -> int:
        """0 for a hash-chosen half of the points, measured first: a sweep cut short by its time
        budget still covers every group and method coarsely."""
        return (int(self.key, 16) // HELDOUT_EVERY) % 2

    @property
    def label(self) -> str:
        """Error-report group: ar, verify, prefill, draft:<method>, mixed:<method>."""
        return f"{self.group}:{DraftMethod(self.method).label}" if self.group in ("draft", "mixed") else self.group

    @property
    def needs_meta(self) -> bool:
        """Whether the runtime would keep Quest page bounds in this pass (a speculative run with a
        Quest method; plain ar runs keep none)."""
        return self.group != "ar" and self.method in (DraftMethod.VERIFY_QUEST, DraftMethod.STEP_QUEST)

    def plan(self) -> PassPlan:
        """The pass plan (request ids 0.. in plan order: prefill, drafts, verifies)."""
        a = lambda xs, i: np.asarray([x[i] for x in xs], np.int64)  # noqa: E731
        n_pre, n_dr, n_ver = len(self.prefill), len(self.drafts), len(self.verifies)
        ids = np.arange(n_pre + n_dr + n_ver, dtype=np.int64)
        last = np.ones(n_pre, bool)
        return PassPlan(prefill_ids=ids[:n_pre], prefill_tokens=a(self.prefill, 1), prefill_context=a(self.prefill, 0),
                        prefill_last=last, draft_ids=ids[n_pre:n_pre + n_dr], draft_context=a(self.drafts, 0),
                        draft_budget=int(self.budget), draft_method=int(self.method), draft_pos=a(self.drafts, 1),
                        verify_ids=ids[n_pre + n_dr:], verify_query=a(self.verifies, 1),
                        verify_context=a(self.verifies, 0), keep_scores=self.method == DraftMethod.VERIFY_ATTN)

    def own_kv_tokens(self) -> int:
        """KV tokens the full-attention requests (prefill, verify) need in pages of their own."""
        return sum(c + n for c, n in self.prefill) + sum(c + q for c, q in self.verifies)

    def max_tokens(self) -> int:
        """The longest KV a request of this pass reaches."""
        return max([c + n for c, n in self.prefill] + [c + p + 1 for c, p in self.drafts]
                   + [c + q for c, q in self.verifies])


# ---------------------------------------------------------------------------- the default design

def _contexts(window: int) -> list[int]:
    top = window - 4096 if window > 16384 else window - max(64, window // 8)
    grid = [c for c in (1024, 4096, 16384, 32768, 65536) if c < top]
    return grid + [top]


def _mixed_lengths(n: int, lo: int, hi: int, seed: int) -> list[int]:
    """n log-uniform lengths in [lo, hi] (deterministic), rounded to 64 tokens."""
    rng = np.random.default_rng(seed)
    x = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    return [int(v) // 64 * 64 for v in x]


def _fits(ctxs, extra: int, kv_tokens: int) -> bool:
    return sum(c + extra for c in ctxs) <= 0.95 * kv_tokens


def default_design(window: int, kv_tokens: int) -> list[Point]:
    """The sweep for a model with context `window` on a GPU whose KV holds `kv_tokens` tokens for
    full-attention requests. About 270 points for a 128K window and ~800K tokens."""
    V, P = DraftMethod.VERIFY_QUEST, DraftMethod
    C = _contexts(window)
    top = C[-1]
    mid = 32768 if 32768 < top else C[len(C) // 2]
    short = 4096 if 4096 < top else C[0]
    pts: list[Point] = []

    def add(p: Point):
        # every request on pages of its own, drafting ones too: drafts sharing pages select the
        # same ones and read them from L2 (measured 9-29 % faster than the fit of the rest), and a
        # pass whose KV the GPU cannot hold is one no server of it runs
        ctxs = [c for c, _ in p.verifies] + [c for c, _ in p.prefill] + [c for c, _ in p.drafts]
        if _fits(ctxs, 64, kv_tokens) and p.max_tokens() <= window:
            pts.append(p)

    # ar: plain decode, uniform batches
    for b in (1, 2, 4, 8, 16, 32, 64, 128):
        for c in C:
            add(Point("ar", int(P.STATIC), verifies=((c, 1),) * b))
    # ar: the memory-limited edge: the most requests that fit at each long context
    for c in C[2:]:
        b = int(0.9 * kv_tokens // (c + 64)) // 2 * 2
        if b > 2 and b not in (4, 8, 16, 32, 64, 128):
            add(Point("ar", int(P.STATIC), verifies=((c, 1),) * b, note="memory edge"))
    # ar: mixed lengths in one pass
    for i, b in enumerate((4, 16, 48, 96)):
        hi = min(top, int(0.9 * kv_tokens / b * 2))  # mean about half of hi (log-uniform)
        ctxs = _mixed_lengths(b, 512, max(hi, 1024), seed=100 + i)
        add(Point("ar", int(P.STATIC), verifies=tuple((c, 1) for c in ctxs), note="mixed lengths"))

    # verify: query tokens x batch x context
    for q in (2, 5, 9, 17):
        for b in (1, 4, 16, 64):
            for c in (short, mid, top):
                add(Point("verify", int(V), verifies=((c, q),) * b))
    for q in (3, 33):
        for b in (1, 16):
            add(Point("verify", int(V), verifies=((mid, q),) * b))
    add(Point("verify", int(V), verifies=((short, 9),) * 128))
    add(Point("verify", int(V), verifies=((short, 33),) * 64))
    add(Point("verify", int(V), verifies=tuple((c, 5) for c in _mixed_lengths(24, 512, top, 7))))

    # draft: every method x batch x context x first / later draft, budget 2048
    for m in P:
        refresh_at_verify = m.refresh == "verify"
        for b in (1, 8, 32, 64):
            for c in (short, mid, top):
                add(Point("draft", int(m), drafts=((c, 0),) * b))
                if refresh_at_verify or (b == 8 and c == mid):
                    add(Point("draft", int(m), drafts=((c, 3),) * b))
        add(Point("draft", int(m), drafts=((C[0], 0),) * 8, note="context below the budget"))
        for budget in (512, 8192):
            add(Point("draft", int(m), budget, drafts=((mid, 0),) * 8))
            add(Point("draft", int(m), budget, drafts=((top, 0),) * 32))
        add(Point("draft", int(m), drafts=tuple((c, 1) for c in _mixed_lengths(16, 1024, top, 11 + int(m)))))
        for c in (mid, top):  # the memory-limited edge: the most drafting requests the KV holds
            b = int(0.9 * kv_tokens // (c + 64))
            if b > 1 and b not in (8, 32, 64):
                add(Point("draft", int(m), drafts=((c, 0),) * b, note="memory edge"))

    # mixed: fixed-k / ASPIRE passes: a (k+1)-th verify k+1 tokens, the others draft at 0..k-1
    for m in P:
        ks = (4, 8) if m in (P.VERIFY_QUEST, P.STEP_LAYER) else (8,)
        for k in ks:
            for b in (9, 36, 72):
                nv = max(1, b // (k + 1))
                nd = b - nv
                pos = [i % k for i in range(nd)]
                add(Point("mixed", int(m), drafts=tuple((mid, p) for p in pos), verifies=((mid, k + 1),) * nv))
                lens = _mixed_lengths(b, 1024, top, seed=1000 * k + 10 * b + int(m))
                add(Point("mixed", int(m), drafts=tuple((c, p) for c, p in zip(lens[:nd], pos)),
                          verifies=tuple((c, k + 1) for c in lens[nd:]), note="mixed lengths"))

    # prefill: chunk x context; two chunks; beside decodes and drafts (chunked prefill)
    for n in (256, 1024, 2048, 8192):
        for c in (0, 16384, 65536, top - 8192):
            if c >= 0 and c + n <= window:
                add(Point("prefill", int(V), prefill=((c, n),)))
    add(Point("prefill", int(V), prefill=((0, 4096), (mid, 4096))))
    add(Point("prefill", int(V), prefill=((0, 512),)))
    add(Point("prefill", int(P.STATIC), prefill=((0, 2048),), verifies=((mid // 2, 1),) * 16, note="beside ar"))
    add(Point("prefill", int(P.STATIC), prefill=((mid, 1024),), verifies=((short, 1),) * 64, note="beside ar"))
    add(Point("prefill", int(V), prefill=((0, 2048),), drafts=((mid, 1),) * 24, verifies=((mid, 9),) * 3,
              note="beside fixed-k"))
    add(Point("prefill", int(P.STEP_LAYER), prefill=((mid, 4096),), drafts=((mid, 2),) * 12,
              verifies=((mid, 5),) * 3, note="beside aspire"))
    _more_points(add, C, short, mid, top, kv_tokens)  # added for the fourth sweep (the points above keep their keys)
    _edge_mixed(add, top, kv_tokens)  # added later (the points above keep their keys)
    _first_drafts_mixed(add, top, kv_tokens)
    _short_mixed(add)  # added last
    return _unique(pts)


SHORT_MIXED = "short mixed lengths"


def _short_mixed(add) -> None:
    """Chat traffic's decode batches: 6-48 requests at log-uniform contexts of 64-4K tokens, plain
    and verifying 5 tokens (fixed-k / sync at k = 4). A live `ar` run of Azure conversations at 4x
    on an H100 ran its passes of 10-16 requests 4-8 % faster than the profile priced them, and its
    sweep held five such points among 344: too few to weigh against the uniform ones in the fit."""
    for b in (6, 10, 12, 14, 16, 20, 24, 32, 48):
        for s in range(2):
            lens = _mixed_lengths(b, 64, 4096, seed=11000 + 10 * b + s)
            add(Point("ar", int(DraftMethod.STATIC), verifies=tuple((c, 1) for c in lens), note=SHORT_MIXED))
    for b in (8, 16, 32):
        lens = _mixed_lengths(b, 64, 4096, seed=12000 + b)
        add(Point("verify", int(DraftMethod.VERIFY_QUEST), verifies=tuple((c, 5) for c in lens), note=SHORT_MIXED))


FIRST_MIXED = "first drafts, mixed lengths"


def _first_drafts_mixed(add, top: int, kv_tokens: int) -> None:
    """A batch's first drafts at mixed lengths: n - 1 requests of 1-16K and one long one, all
    selecting pages in one pass (as `sync` drafts: a whole batch at once). Why: every other first-draft point has one context for all its requests, so the
    pages a selection scores and the columns of its top-k (as wide as the longest request) rise
    together and the fit cannot tell them apart; Mooncake under `sync:k=4` ran such passes 16 %
    faster than the profile predicted. Two sizes per selecting method."""
    long = min(top, 98304)
    for m in DraftMethod:
        if m == DraftMethod.STATIC:
            continue
        for n in (8, 32):
            lens = _mixed_lengths(n - 1, 1024, 16384, seed=9000 + 10 * n + int(m)) + [long]
            if sum(c + 64 for c in lens) <= 0.6 * kv_tokens:
                add(Point("draft", int(m), drafts=tuple((c, 0) for c in lens), note=FIRST_MIXED))


def _edge_mixed(add, top: int, kv_tokens: int) -> None:
    """Fixed-k passes at the memory edge, mixed lengths: as many requests of log-uniform contexts
    (1K to 64K, or the window) as 85 % of the cache holds, a fifth verifying. Why:
    Mooncake under fixed-k:k=4 runs passes of 30-38 drafts up to ~90K tokens, whose drafts' page
    tables are as wide as the longest; the mixed points above stop at ~390K tokens of KV (`room`),
    and the profile predicted those passes 17-28 % short. One point per method, k = 4."""
    for m in DraftMethod:
        lens = _mixed_lengths(64, 1024, min(top, 65536), seed=7000 + int(m))
        while sum(c + 64 for c in lens) > 0.85 * kv_tokens:
            lens = lens[:-1]
        if len(lens) >= 10:
            add(replace(_fixed_k(m, 4, lens), note="memory edge, mixed lengths"))


def _fixed_k(m: DraftMethod, k: int, ctxs: list[int], nv: int | None = None) -> Point:
    """A fixed-k / ASPIRE pass over requests of `ctxs`: `nv` (default a (k+1)-th) verify k+1
    tokens, the others draft at positions 0..k-1 in turn (the steady state of staggered runs)."""
    b = len(ctxs)
    nv = max(1, b // (k + 1)) if nv is None else nv
    nd = b - nv
    return Point("mixed", int(m), drafts=tuple((c, i % k) for i, c in enumerate(ctxs[:nd])),
                 verifies=tuple((c, k + 1) for c in ctxs[nd:]))


def _more_points(add, C, short: int, mid: int, top: int, kv_tokens: int) -> None:
    """Points added for the fourth sweep (2026-12-01), where the third left groups resting on 1-2
    held-out points (mixed passes per method) or fitted poorly (short prefill chunks, verify at the
    attention kernel's tile-height edges). ~95 points for a 128K window."""
    P = DraftMethod
    V = P.VERIFY_QUEST
    c16 = 16384 if 16384 < top else C[len(C) // 2]
    # mixed: every method at k = 2, 3, 4, 6, 8 (the pass's tallest query sets the attention tile: 16,
    # 32, 64 rows for Llama-3.1-8B's GQA group of 4), short / middle / long uniform contexts, mixed
    # lengths, a verify-heavy pass. Every request on pages of its own: a resumed sweep's cache is
    # sized by its largest full-attention point (~520K tokens here: 16 x 32K verifying), and
    # drafting requests that share pages read each other's from L2 (cheaper than serving, where
    # requests never share), so each pass stays within `room` tokens.
    room = min(480_000, int(0.6 * kv_tokens))
    c48 = 49152 if 49152 < top else C[-2]
    c64 = 65536 if 65536 < top else C[-2]
    for m in P:
        def mix(n, seed):
            lens = _mixed_lengths(n, 1024, top, seed=seed)
            while sum(lens) > room:
                lens = lens[:-1]
            return lens

        for k, ctxs in ((2, [c16] * 12), (2, mix(36, 5000 + int(m))), (3, [short] * 16), (4, [short] * 10),
                        (4, [c16] * 28), (4, [c64] * 5), (4, mix(40, 5100 + int(m))), (6, [c16] * 28),
                        (6, mix(28, 5300 + int(m))), (8, [short] * 18), (8, [c16] * 27), (8, [c48] * 9),
                        (8, mix(45, 5200 + int(m)))):
            if len(ctxs) > k // 2 + 1 and sum(ctxs) <= room:  # (a small cache: too few requests left)
                add(_fixed_k(m, k, ctxs))
        add(_fixed_k(m, 4, [c16] * 16, nv=8))
    # short prefill chunks (eager passes: launch-bound below ~1K tokens), alone and beside decodes
    # or a fixed-k / ASPIRE batch
    for n in (128, 512):
        for c in (0, c16, 65536):
            add(Point("prefill", int(V), prefill=((c, n),)))
    add(Point("prefill", int(V), prefill=((mid, 256),)))
    for n in (128, 256, 512):
        for c in (0, c16):
            add(Point("prefill", int(P.STATIC), prefill=((c, n),), verifies=((c16, 1),) * 16, note="beside ar"))
            add(Point("prefill", int(P.STATIC), prefill=((c, n),), verifies=((short, 1),) * 64, note="beside ar"))
    add(Point("prefill", int(V), prefill=((0, 256),), drafts=((c16, 1),) * 24, verifies=((c16, 9),) * 3,
              note="beside fixed-k"))
    add(Point("prefill", int(V), prefill=((c16, 512),), drafts=tuple((c16, i % 4) for i in range(16)),
              verifies=((c16, 5),) * 4, note="beside fixed-k"))
    add(Point("prefill", int(P.STEP_LAYER), prefill=((0, 512),), drafts=((c16, 2),) * 12,
              verifies=((c16, 5),) * 3, note="beside aspire"))
    add(Point("prefill", int(P.STATIC), prefill=((0, 256),), drafts=((c16, 3),) * 24, verifies=((c16, 9),) * 3,
              note="beside fixed-k"))
    # verify at the tile-height edges (4 | 5, 8 | 9, 16 | 17 tokens for a group of 4) and in runs
    # that keep no Quest bounds (static) or keep page scores (verify-attn)
    for q in (4, 8, 16):
        add(Point("verify", int(V), verifies=((mid, q),) * 16))
        add(Point("verify", int(V), verifies=((top, q),) * 4))
    for q in (5, 9):
        add(Point("verify", int(P.STATIC), verifies=((mid, q),) * 16))
    # verify-attn verifications write every page's attention score for the next run's selection
    add(Point("verify", int(P.VERIFY_ATTN), verifies=((mid, 5),) * 16))
    add(Point("verify", int(P.VERIFY_ATTN), verifies=((mid, 9),) * 16))
    add(Point("verify", int(P.VERIFY_ATTN), verifies=((top, 9),) * 4))


def smoke_design(window: int, kv_tokens: int) -> list[Point]:
    """A few points of every group and method, short contexts: the CPU test of the pipeline."""
    c1, c2 = 64, min(window // 4, 600)
    pts = [Point("ar", int(DraftMethod.STATIC), verifies=((c, 1),) * b) for b in (1, 3) for c in (c1, c2)]
    pts += [Point("verify", int(DraftMethod.VERIFY_QUEST), verifies=((c2, q),) * 2) for q in (3, 5)]
    for m in DraftMethod:
        pts.append(Point("draft", int(m), 128, drafts=((c2, 0), (c1 + 40, 0))))
        pts.append(Point("draft", int(m), 128, drafts=((c2, 2),) * 2))
        pts.append(Point("mixed", int(m), 128, drafts=((c2, 0), (c2, 1)), verifies=((c1, 3),)))
    pts += [Point("prefill", int(DraftMethod.VERIFY_QUEST), prefill=((c, 48),)) for c in (0, c2)]
    pts.append(Point("prefill", int(DraftMethod.VERIFY_QUEST), prefill=((0, 32),), verifies=((c2, 1),)))
    return _unique([p for p in pts if p.own_kv_tokens() <= kv_tokens and p.max_tokens() <= window])


def anchor_points(window: int, kv_tokens: int) -> list[Point]:
    """Passes re-measured at intervals through a sweep (`measure.ANCHOR_EVERY`): a decode step and a
    drafting pass whose drift over the sweep says how much the machine's speed moved while it ran
    (clocks, host load), apart from what the design's points differ in. Not fitted."""
    c = min(16384, max(64, window // 8))
    while c > 64 and 8 * c > kv_tokens:
        c //= 2
    return [Point("ar", int(DraftMethod.STATIC), verifies=((c, 1),) * 8),
            Point("draft", int(DraftMethod.STATIC), min(DRAFT_BUDGET, c), drafts=((2 * c, 0),) * 8)]


def _unique(pts: list[Point]) -> list[Point]:
    seen, out = set(), []
    for p in pts:
        if p.key not in seen:
            seen.add(p.key)
            out.append(p)
    return out


def sweep_order(pts: list[Point]) -> list[Point]:
    """Measuring order: tier 0 first (a coarse half of everything), then by the runtime setting
    a point needs (one executor at a time), then the design's order."""
    idx = {p.key: i for i, p in enumerate(pts)}
    return sorted(pts, key=lambda p: (p.tier, p.method, p.group == "ar", idx[p.key]))
