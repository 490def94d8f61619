"""A cost model fitted to pass times measured on a GPU: the roofline's structure with fitted
constants, plus the terms the real runtime pays and the analytic model leaves out.

    pass = host + [smoothmax_e(the rest, eager_launch_s) if it runs eagerly, else the rest]
    the rest = per-layer fixed cost + smoothmax(weights' read, GEMM and LM-head flops) + sampling
         (the roofline's linear part, its constants fitted, the weights' read time scaled)
         + attention, per request and layer, in the pass's attention tile (below)
         + eager_pass_s               once, if it runs eagerly (no CUDA graph: below)
         + draft_pass_s[method]       once, if it holds drafts (selection kernels, host work)
         + verify_req_s               per verifying request (sampling, acceptance on the host)
         + draft_req_s[method][later] per drafting request
         + draft_page_s[method][later] x context pages, per drafting request: page scoring, page
           tables, top-k, split counts: what makes a draft at a fixed budget cost more at a longer
           context (measured ~2x from 32K to 128K at batch 8 on the H200)
         + first_pass_s[method]       once, if it holds a run's first draft (the verify-refreshed
                                      methods select their pages then: scoring, top-k per layer)
         + spec_pass_s                once, if it verifies drafts (a query > 1: the acceptance path)

Attention tiles (`attn_tile_eff` set, as every fit sets it): the runtime's attention kernel runs a
whole pass with one tile height, fitted to the pass's tallest query (gpu_runtime/attention.py
`choose_block_m`: 16/32/64/128 rows for 1-4/5-8/9-16/17+ query tokens of an 8B GQA group of 4;
a prefill chunk makes it 128), and each height has its own tile shape (SHORT/TALL/PREFILL_TILE)
and so its own MMA throughput. A runtime that plans prefill chunks apart (`prefill_split`: chunks
of 128-row tiles in an attention launch of their own beside other requests, as ours does since
2026-12-01) prices those chunks in the 128-row tile and the rest of the pass in the tile of its
own tallest query, each launch with its own work-item tail (below). A request with q query tokens in a pass of tile height bm computes
ceil(q / (bm / group)) whole tiles, each reading the KV up to its causal bound once:

    per layer = smoothmax_a(KV pages read x page time, tile rows x causal KV x flops / rate[bm])
              + per request + per KV split
    KV read   = n_kv + (tiles - 1) x causal KV (one tile: the request's KV; many: each its share)
    rate[bm]  = the GPU's bf16 rate x attn_flops_eff (16 rows) or attn_tile_eff[32, 64, 128 rows]

so a draft beside a 9-token verification computes 64-row tiles (hidden under its KV read when the
64-row tile's rate is high, as measured), a decode beside a prefill chunk 128-row ones, and a
5-token verification a 32-row tile at its own, lower rate. Without `attn_tile_eff` the attention
is the roofline's (16-row MMA padding per request, np.hypot).

Work-item tail (`attn_sms` > 0): the attention launch is a list of work items (request, KV
head, query block, token range of at most one split), one CTA per SM (every tile's shared memory
is over half an SM's), handed to the SMs in list order as they free up: prefill, then drafts, then
verifications. The launch lasts the greedy schedule's makespan, not the total work over the SMs:
a pass of 160 items on 132 SMs runs two rounds, and the long verification items at the end of the
list start late. `work_ratio` rebuilds the runtime's work list (gpu_runtime/attention.py
`plan_attention`: units, split size, items) from the pass's query and KV lengths and returns
makespan / (total work / SMs), each item `attn_item_tokens` longer than its tokens; the pass's
attention kernel time (the per-request attention above, without the draft and verify terms) is
multiplied by it. SMs and the item cost are the runtime's and assumed (a fit may search the item
cost: calibration/fit.py ITEM_TOKENS); fitted is the tail's bandwidth share (`attn_tail_bw`, k >= 1; 1, profiles before it: the pure makespan): in a short-tile
launch (16-32 rows: decodes, drafts, short verifications, which stream KV), once fewer items than
SMs are left, the m still running share the HBM, each at min(k, SMs / m) of its fair share, so the
last items of a mixed-length batch end sooner than at 1/SMs of the HBM (`_tail_phases`: the
schedule's SM ends at fair share, cached across models; `_tail_span`). Refits of the committed
sweeps put k at 1.15-1.30 (docs/calibration.md). A fit prices the same plans at many k: `plan_work_parts` keeps each plan's tail phases apart from k, and
`PlanBatch.work_ratios` prices them at each k (`tail_ratio`, to the bit as `_units_ratio`).
Computed exactly (no rounding), fast: a plan of at most `attn_sms` items runs one round, so its
makespan is its longest item and the ratio a closed form; longer plans are scheduled
(`_makespan`: round robin where the items ascend, as a prefill chunk's query blocks do, item by
item on a heap up to `HEAP_ITEMS`, numpy's steps beyond). Ratios are cached by the plan's units
(KV blocks), which change only every 64-128 tokens of a request: a segment prices each distinct
row of units once (`work_ratios`; a plain decode segment finds its rows from its first pass,
`_plain_ratios`), and the step path's passes build their units on Python lists (`plan_work_ratio`,
`_plain1`) into the same cache.

The shape rule (`padding` "rule": the runtime's default padding, gpu_runtime/shapes.py) changes
what a graphed pass runs, and the model follows it: a pass carrying prefill runs every chunk in
the 128-row prefill launch and its other requests in the tallest tile a verification can need
(`rule_max_query`; executor.py `tile_q`: on the H100, 64 decodes at 4K took 18.5 ms alone and 26.3
beside a 128-token chunk that took 9.9 alone, priced 14-17 % low in their own 16-row tile); its
requests are padded to a power of two with dummy verifiers, each a one-block unit of the
attention's work list that counts against the SMs in the split rule (8 drafts and 2 verifications
padded to 16: the verifications run in 4096-token items instead of 17-block ones, priced 8-11 %
low without them); and every request selects pages and keeps page scores (dummy entries too), at
the width class of the pass's longest request (256, 2048 pages or the window's), not its own
pages (`_select1`, `_scores1`: mixed passes at many contexts were priced 18-26 % low).

Page selection (`select_col_s`, per method): a top-k over [selecting rows, the padded width], one
program a row running at once, so a selection costs (selecting requests + `select_base_req`) x
columns: a pass of one first draft at 32K pays one row's latency at 16,384 columns, not 1/8 of
eight rows' (measured ~1.2 ms over a 4K one on the H100, priced 10 % low without it). Who selects:
a run's first drafts (verify-refreshed methods, padded to a power of two), every draft
(step-refreshed); padded graphed passes (bucket, pow2) select for every drafting row, dummy
drafters too, and a first-draft selection as long as them (executor.py `pad_first`).

Eager passes (no CUDA graph): the host launches ~30 kernels a layer while the GPU runs them, so a
short pass takes about the launch time whatever its size (256 and 512 tokens from an empty context
took the same 15.4 ms on the H200) and a long one its GPU time: smoothmax with exponent `eager_p`
of the two. Which passes run eagerly is the measured runtime's (`prefill_graph_tokens`, recorded
with the measurements): passes holding a prefill chunk and more tokens than it graphs (every one
holding a chunk, for runtimes before 2026-12-01 and profiles measured on them).
`later`: 0 for a run's first draft (draft_pos == 0), 1 after; methods refreshed at verification
select on the first draft only. With every extra term 0, both scales 1 and no tile rates this is
the roofline.

It is a `RooflineCostModel`, so the policies' grids use the roofline's lookup tables, built from
the overridden per-request formulas (a request priced in its own tile: a verification of q tokens
in the tile q needs, a draft in the smallest); the simulator's decode segments are priced here
(`times` of decode grids) from tables per tile height, the pass's tile chosen from its tallest query.
What a decode pass pays beyond its requests' attention (the tail's ratio, the padded linear part, the
once-per-pass terms, top-k, page scores) depends only on its shape (its requests' kinds and work units,
its counts, its longest requests' pages by interval), which changes every 64-128 tokens, not every
pass: each distinct shape is priced once on Python numbers and looked up (`_grid_terms`), as numpy's
per-call cost on a grid's few requests made the many small reductions of the vector form the slow part.
`spsim.calibration.fit` fits the params.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from spsim.buckets import SCRATCH_PAGES, pad_count, pow2, rule_graphed
from spsim.hardware import GPU
from spsim.models import ModelConfig
from spsim.plan import DraftMethod, PassPlan
from spsim.worklist import MIN_SPLIT_TOKENS, WAVES, split_of_units

from .batch import PlanBatch
from .padding import MODES as PADDING_MODES
from .padding import pad_count_vec, padded, padded_vec, pow2_vec, rule_graphed_vec
from .roofline import RooflineCostModel, RooflineParams
from .xp import NP, Table, fold, ns, pass_sums

N_METHODS = len(DraftMethod)
RULE_CLASS_PAGES = (256, 2048)  # the shape rule's width classes below the top one (gpu_runtime/shapes.py)
TILES = (16, 32, 64, 128)  # the attention kernel's tile heights (gpu_runtime/attention.choose_block_m)
_ZEROS = (0.0,) * N_METHODS
_ZEROS2 = ((0.0, 0.0),) * N_METHODS
# what a decode pass pays beyond its requests' attention (CalibratedCostModel._pass_terms): its work
# items' tail (a ratio), its linear part, once-per-pass terms (_once's), top-k, page scores, and
# whether it keeps them (1.0)
PASS_TERMS = ("ratio", "linear", "once_draft", "once_first", "once_spec", "once_mixed", "select", "scores", "keep")


@dataclass(frozen=True)
class CalibratedParams(RooflineParams):
    weight_scale: float = 1.0  # weights' read time / the roofline's
    attn_bw_scale: float = 1.0  # attention's KV page read time / the roofline's
    attn_tile_eff: tuple | None = None  # [32, 64, 128-row tiles]: attention flop rate / the GPU's bf16
    #                                     rate (16 rows: attn_flops_eff); None: the roofline's attention
    attn_p: float = 2.0  # smoothmax exponent between a request's KV read and its attention flops (tiles)
    eager_pass_s: float = 0.0  # per pass holding a prefill chunk (run eager: no CUDA graph)
    eager_launch_s: float = 0.0  # an eager pass takes about this long at least (the host's launches)
    eager_p: float = 4.0  # smoothmax exponent between an eager pass's GPU time and its launch time
    verify_req_s: float = 0.0  # per verifying request
    draft_pass_s: tuple = _ZEROS  # [method]: per pass holding drafts
    draft_req_s: tuple = _ZEROS2  # [method][later]: per drafting request
    draft_page_s: tuple | None = None  # [method][later]: per context page; None: the roofline's scoring
    first_pass_s: tuple = _ZEROS  # [method]: per pass holding a run's first draft (selection)
    spec_pass_s: float = 0.0  # per pass verifying drafts (a query > 1)
    mixed_pass_s: float = 0.0  # per pass holding both drafts and verifications (two sampling paths)
    select_col_s: tuple = _ZEROS  # [method]: per selecting request per top-k column (see _select1)
    select_base_req: float = 0.0  # a selection's latency, in selecting requests (see _select1)
    score_col_s: float = 0.0  # per request per page-score column, verify-attn passes that keep scores
    score_attn_frac: float = 0.0  # a pass keeping page scores: its attention kernel this much slower (the
    #                               per-block page max and atomic store in the kernel's loop)
    attn_sms: int = 0  # SMs the attention's work items are scheduled on (see work_ratio); 0: no tail term
    attn_item_tokens: float = 128.0  # an item's fixed cost (prologue, partial store), in KV tokens of streaming
    attn_tail_bw: float = 1.0  # the work-item tail's bandwidth share (see work_ratio): an SM's KV streaming rate
    #                            at most this many times its fair share (1/attn_sms of the HBM) once fewer
    #                            items than SMs are left in a short-tile launch; 1: every item at its fair
    #                            share, the pure makespan (profiles before it)
    # What the measured runtime did (set from the measurements' header records, not fitted):
    prefill_graph_tokens: int = 0  # passes with prefill of at most this many tokens replay a CUDA graph
    #                                (no eager terms); 0: every pass holding a prefill chunk ran eagerly
    prefill_split: bool = False  # prefill chunks of 128-row tiles ran in an attention launch of their own
    overlap: bool = False  # passes timed back to back, each prepared while the previous ran (the
    #                        overlapped loop of `spsim run`): the host's share is hidden where it is shorter
    padding: str = "none"  # how the runtime pads graphed passes (cost/padding.py: none, bucket, pow2): their
    #                        dummy and filler tokens are priced in the linear layers
    rule_max_query: int = 17  # the shape rule (padding "rule"): a verification's most tokens (max draft + 1)

    @classmethod
    def from_dict(cls, d: dict) -> "CalibratedParams":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown params {sorted(unknown)}")
        if d.get("padding", "none") not in PADDING_MODES:
            raise ValueError(f"padding must be one of {', '.join(PADDING_MODES)} (got {d['padding']!r})")
        kw = dict(d)
        for k in ("draft_pass_s", "first_pass_s", "attn_tile_eff", "select_col_s"):
            if kw.get(k) is not None:
                kw[k] = tuple(float(x) for x in kw[k])
        for k in ("draft_req_s", "draft_page_s"):
            if kw.get(k) is not None:
                kw[k] = tuple(tuple(float(x) for x in row) for row in kw[k])
        p = cls(**kw)
        p.check()
        return p

    def check(self) -> None:
        if self.attn_tile_eff is not None and (len(self.attn_tile_eff) != len(TILES) - 1
                                               or min(self.attn_tile_eff) <= 0):
            raise ValueError(f"attn_tile_eff has one positive entry per tile height {TILES[1:]}")
        if not self.attn_tail_bw >= 1:
            raise ValueError("attn_tail_bw is an SM's streaming rate over its fair share: >= 1")
        if self.attn_p < 1 or self.eager_p < 1:
            raise ValueError("attn_p and eager_p are smoothmax exponents >= 1")
        if len(self.draft_pass_s) != N_METHODS or len(self.draft_req_s) != N_METHODS or \
                len(self.first_pass_s) != N_METHODS or len(self.select_col_s) != N_METHODS or \
                (self.draft_page_s is not None and len(self.draft_page_s) != N_METHODS):
            raise ValueError(f"draft terms need one entry per draft-KV method ({N_METHODS})")
        if any(len(r) != 2 for r in self.draft_req_s) or \
                (self.draft_page_s is not None and any(len(r) != 2 for r in self.draft_page_s)):
            raise ValueError("draft_req_s / draft_page_s rows are [first draft, later drafts]")


class CalibratedCostModel(RooflineCostModel):
    """Implements spsim.cost.CostModel from a measured profile (see the module docstring)."""

    name = "calibrated"

    def __init__(self, model: ModelConfig | str = "llama-3.1-8b", gpu: GPU | str = "h200", tp: int = 1,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", page_size: int = 16,
                 params: CalibratedParams | None = None, check_memory: bool = True, info: dict | None = None):
        """`info`: the profile's measurement metadata (GPU, versions, points, errors, KV pages)."""
        params = params or CalibratedParams()
        if not isinstance(params, CalibratedParams):
            params = CalibratedParams(**asdict(params))
        super().__init__(model, gpu, tp, weight_dtype, kv_dtype, page_size, params, check_memory)
        P = self.p
        self.info = dict(info or {})
        self.weights_s *= P.weight_scale
        self.page_read_s *= P.attn_bw_scale
        # tallest query (tokens) -> tile class, as choose_block_m: rows = min(q, 128 // group) * group
        g = self.group
        cap = max(1, 128 // g)
        q = np.arange(cap + 1)
        need = np.maximum(q, 1) * g
        bm = np.minimum(np.maximum(16, 1 << np.ceil(np.log2(need)).astype(np.int64)),
                        max(128, 1 << math.ceil(math.log2(g))))
        self._tile_cls = np.minimum(np.searchsorted(np.asarray(TILES), bm), len(TILES) - 1).astype(np.int64)
        self._tile_cls_list = self._tile_cls.tolist()
        self._tile_cap = cap
        # the tallest query a pass of each tile class holds (the top class: any), for its verify table
        self._cls_top_q = [int(np.flatnonzero(self._tile_cls == c).max(initial=-1)) if c != self._tile_cls[cap]
                           else None for c in range(len(TILES))]
        self.tiles = P.attn_tile_eff is not None
        if self.tiles:
            bm = [max(t, g) for t in TILES]  # rows of one tile
            self._qb_t = Table([b // g for b in bm])  # query tokens per tile
            effs = (P.attn_flops_eff,) + tuple(P.attn_tile_eff)
            # seconds per tile row per KV token, per tile class (the roofline's row time at each
            # rate), and of a whole tile's rows
            self.row_flop_c = [self.row_flop_s * (P.attn_flops_eff / e) for e in effs]
            self._tile_flop_t = Table([b * r for b, r in zip(bm, self.row_flop_c)])
            self._ap, self._iap = P.attn_p, 1.0 / P.attn_p
        self._vt_cls, self._dt_cls = {}, {}  # segment tables per tile class
        self._ex_tbl = {}  # _extra_table: drafts' extras by method
        self._work_cache = {}  # work_ratios: ratios by (KV block size, units)
        self._hkv = max(1, self.model.kv_heads // self.tp)
        self._padded_ovh = {}  # _padded_overhead: the padded linear part by (tokens, drafts, verifications)
        self._pass_memo, self._pass_n = {}, 0  # _grid_terms: decode passes' terms by shape, rows of _pass_vals
        self._shape_memo = {}  # _pass_terms: the terms but the ratio, by method, counts and page interval ends
        self._pass_vals = np.empty((len(PASS_TERMS), 1024))
        # per tile class: the attention plan's KV block (tokens), query tokens per block, split cap
        bmt = np.maximum(np.asarray(TILES, np.int64), self.group)
        self._wi_bn = np.maximum(self.page_size, np.where(bmt <= 32, 128, 64))
        self._wi_qb = np.maximum(1, bmt // self.group)
        self._wi_cap = -(-self.ATTN_MIN_SPLIT // self._wi_bn)
        self._wi_bn_l, self._wi_qb_l = self._wi_bn.tolist(), self._wi_qb.tolist()
        # launches whose tail streams faster (attn_tail_bw): the short tiles' (16-32 rows: decodes,
        # drafts, short verifications), where the kernel streams KV; known by their KV block, where
        # the taller tiles' (compute: a prefill chunk's) differs
        self._tail_bn = {b for b, t in zip(self._wi_bn_l, TILES) if t <= 32} - \
            {b for b, t in zip(self._wi_bn_l, TILES) if t > 32}
        # the shape rule's width classes (pages; gpu_runtime/shapes.py ShapeRule.classes): below the
        # longest context a request reaches (the window plus a run of drafts), then that one
        top = -(-(-(-(self.model.max_context + P.rule_max_query) // self.page_size) + 1) // 64) * 64
        self._classes = [c for c in RULE_CLASS_PAGES if c < top] + [top]
        self._classes_t = Table(np.asarray(self._classes, np.int64))
        # pages change a pass's top-k and page scores only past a width class or a top-k width (a
        # power of two of 128 columns) or, scores outside the rule, every 128 columns: decode passes'
        # shapes hold them in granules of this many pages (_grid_terms), and their terms take the
        # end of the interval holding them (_page_end; past the last end, their own): without scores,
        # and with
        C = self.SELECT_COLS
        last = -(-self._classes[-1] // C) * C
        ends = {0, *self._classes, *(C << k for k in range(last.bit_length()) if C << k <= last)}
        self._page_ends = (sorted(ends), sorted(ends | set(range(C, last + 1, C))))
        self._page_gran = math.gcd(C, *self._classes)
        if P.draft_page_s is not None:
            self.score_tbl = np.asarray(P.draft_page_s, dtype=np.float64).reshape(N_METHODS, 2)
            self._score_t = Table(self.score_tbl)
        self.req_tbl = np.asarray(P.draft_req_s, dtype=np.float64).reshape(N_METHODS, 2)
        self._req_t = Table(self.req_tbl)
        self.draft_pass = np.asarray(P.draft_pass_s, dtype=np.float64)
        self._draft_pass_t = Table(self.draft_pass)
        self.first_pass = np.asarray(P.first_pass_s, dtype=np.float64)
        self._first_pass_t = Table(self.first_pass)
        self.select_col = np.asarray(P.select_col_s, dtype=np.float64)
        self._select_list = self.select_col.tolist()
        self._selects = bool(self.select_col.any())

    # ---- tile classes ----
    def tile_class(self, qmax):
        """The attention tile class (index into TILES) of a pass whose tallest query is `qmax`
        tokens (an int or an array; drafts count 1)."""
        if isinstance(qmax, (int, np.integer)):
            return self._tile_cls_list[min(max(int(qmax), 1), self._tile_cap)]
        return self._tile_cls[np.minimum(np.maximum(qmax, 1), self._tile_cap)]

    # ---- per-request terms: arrays, or Python numbers for one request (spsim/cost/xp.py) ----
    def _attn(self, n_kv, causal, q, cls):
        """All-layer seconds of one request's attention in tile class `cls` (tiles mode)."""
        P = self.p
        xp = ns(n_kv)
        qb = xp.pick(self._qb_t, cls)
        nt = xp.maximum(1, (q + qb - 1) // qb)  # tiles of the request's query
        kv = xp.maximum(n_kv + (nt - 1) * causal, P.attn_min_kv)
        mem = xp.ceil(kv / self.page_size) * self.page_read_s
        cmp = causal * (nt * xp.pick(self._tile_flop_t, cls))
        sm = (mem ** self._ap + cmp ** self._ap) ** self._iap
        return self.L * (sm + ((n_kv + (P.split_tokens - 1)) // P.split_tokens) * P.attn_split_s + P.attn_req_s)

    def _attn_read(self, n, cls):
        """`_attn(n, n, 1, cls)`: a one-token query over `n` KV tokens. A draft table's many
        contexts mostly read the whole budget (the largest n), computed once there (an elementwise
        formula: the same bits)."""
        if isinstance(n, np.ndarray) and n.size > 4096 and np.ndim(cls) == 0:
            at = n == n.max()  # the contexts past the budget
            k = np.count_nonzero(at)
            if 2 * k > n.size:
                one = n[at][:1]
                out = np.full(n.shape, self._attn(one, one, 1, cls)[0])
                if k < n.size:
                    rest = n[~at]
                    out[~at] = self._attn(rest, rest, 1, cls)
                return out
        return self._attn(n, n, 1, cls)

    def prefill_attn(self, context, query, cls=None):
        if not self.tiles:
            return RooflineCostModel.full_attn(self, context, query)
        return self._attn(context + query, context + (query + 1) * 0.5, query, self._cls(cls, query))

    def _cls(self, cls, query):
        return self.tile_class(query) if cls is None else cls

    def full_attn(self, context, query, cls=None):
        """A verifying request: its attention (in tile class `cls`, default the one its query
        needs) plus its per-request cost."""
        return self.prefill_attn(context, query, cls) + self.p.verify_req_s

    def draft_attn(self, context, budget, method, pos, cls=0):
        xp = ns(context)
        k = xp.minimum(pos, 1)  # a run's first draft, or a later one
        if not self.tiles:
            return RooflineCostModel.draft_attn(self, context, budget, method, pos) + xp.pick(self._req_t, method, k)
        sparse = xp.minimum(budget, context) + pos + 1
        ts = self._attn_read(sparse, cls)
        t = ts + xp.pick(self._score_t, method, k) * ((context + (self.page_size - 1)) // self.page_size)
        if xp.any(method == DraftMethod.STEP_LAYER):  # the designated layer reads all the KV
            full = context + pos + 1
            t = t + xp.where(method == DraftMethod.STEP_LAYER, (self._attn(full, full, 1, cls) - ts) / self.L, 0.0)
        return t + xp.pick(self._req_t, method, k)

    def draft_extra(self, context, budget, method, pos):
        """The part of `draft_attn` that is not the attention kernel: page scoring, per request."""
        xp = ns(context)
        k = xp.minimum(pos, 1)
        if not self.tiles:
            return xp.pick(self._req_t, method, k)
        return xp.pick(self._score_t, method, k) * ((context + (self.page_size - 1)) // self.page_size) + \
            xp.pick(self._req_t, method, k)

    # ---- the attention's work items (tail term) ----
    ATTN_WAVES = WAVES  # the split rule's: work items per SM aimed at, and the split floor
    ATTN_MIN_SPLIT = MIN_SPLIT_TOKENS
    WORK_CACHE_MAX = 1 << 18  # makespans kept (per model) of passes of more items than SMs
    HEAP_ITEMS = 1024  # a schedule of at most this many items: item by item on a heap (faster than numpy's steps)

    def work_ratio(self, q, kv, qmax: int | None = None, dummies: int = 0) -> float:
        """Makespan of the pass's attention work items, greedily scheduled on `attn_sms` SMs in
        list order, over their total / SMs (>= 1). `q`, `kv`: per request in pass order (prefill,
        drafts, verifications), query tokens and KV tokens read (a draft: its sparse selection).
        `dummies`: the shape rule's dummy verifiers after them (one token of KV each: a unit of
        one block, which counts against the SMs in the split rule).
        Replicates gpu_runtime/attention.py plan_attention's host plan (one KV head's units; every
        head has the same). One pass of `work_ratios`."""
        q = np.asarray(q, np.int64)[None, :]
        if not self.p.attn_sms or not q.size:
            return 1.0
        return float(self.work_ratios(q, np.asarray(kv, np.int64)[None, :], np.ones(q.shape, bool),
                                      None if qmax is None else np.array([qmax]), dummies=np.array([dummies]))[0])

    def work_ratios(self, q, kv, live, qmax=None, rank=None, dummies=None) -> np.ndarray:
        """`work_ratio` of many passes: row i holds pass i's requests where `live` (other entries
        are ignored), in pass order, or in the order of `rank` (a stable sort of row i's rank);
        `dummies[i]` dummy verifiers after them (see work_ratio).

        A pass's ratio depends only on its plan's units (KV blocks of each unit, in plan order)
        and its KV block size (the tile class's), which change only when a request's KV crosses a
        block boundary (64-128 tokens): each pass's units are built here (a few vector operations
        for all passes), consecutive passes with the same units share one ratio, and a ratio is
        computed once per distinct (block size, units) (`_units_ratio`) and cached. Tests hold it to
        the direct vector computation over every pass (tests/test_calibrated_speed.py)."""
        P = self.p
        S = int(P.attn_sms)
        n = len(q)
        if not S:
            return np.ones(n)
        if not n:
            return np.ones(0)
        D = int(dummies.max()) if dummies is not None and len(dummies) else 0
        if D:  # dummy verifiers: one token of KV, after every request (the largest rank)
            one = np.ones((n, D), np.int64)
            q, kv = np.concatenate([q, one], axis=1), np.concatenate([kv, one], axis=1)
            live = np.concatenate([live, np.arange(D) < dummies[:, None]], axis=1)
            if rank is not None:
                rank = np.concatenate([rank, np.full((n, D), np.iinfo(np.int64).max)], axis=1)
        cls = self.tile_class(np.where(live, q, 0).max(axis=1) if qmax is None else np.asarray(qmax))
        code, bn, J = self._unit_blocks(q, kv, live, cls)
        if rank is not None:  # units of a request stay together (query blocks inner)
            o = np.argsort(rank, axis=1, kind="stable")
            code = np.take_along_axis(code, o if J <= 1 else o[:, :, None], axis=1)
        return self._code_ratios(code.reshape(n, -1), bn)

    def _unit_blocks(self, q, kv, live, cls, J=None):
        """The work units of passes in tile classes `cls` (row i: pass i's requests, query tokens
        `q` >= 1 and KV tokens read `kv` where `live`): each unit's KV blocks (one head), -1 where
        there is none, as (passes, requests) where every request is one query block, else
        (passes, requests, J), query blocks inner (as the plan); the KV block size per pass; J.
        `J` = 1 given (every query within its class's block): `live` may be None (no request: 0 KV)."""
        bn = self._wi_bn[cls]
        if J is None:
            qb = self._wi_qb[cls][:, None]
            J = int(np.where(live, -(-q // qb), 0).max())  # query blocks
        if J <= 1:  # one query block a request (every decode pass): q <= its block, so a unit of its KV
            code = -(-kv // bn[:, None])
            return (code if live is None else np.where(live, code, -1)), bn, J
        qb = self._wi_qb[cls][:, None]
        nqb = np.where(live, -(-q // qb), 0)
        j = np.arange(J)
        q3, kv3 = q[:, :, None], kv[:, :, None]
        u_end = np.minimum(kv3, np.maximum(0, kv3 - q3 + np.minimum((j + 1) * qb[:, :, None], q3)))
        return np.where(j < nqb[:, :, None], -(-u_end // bn[:, None, None]), -1), bn, J

    def _code_ratios(self, code: np.ndarray, bn) -> np.ndarray:
        """`work_ratios` from each pass's units (row i: pass i's KV blocks per unit, -1 where none)
        and KV block size (per pass; an int: every pass's, every entry a unit, as plain decodes)."""
        n = len(code)
        same = isinstance(bn, int)
        bl = None if same else bn.tolist()
        if n > 1:  # runs of passes with the same units
            chg = np.empty(n, bool)
            chg[0] = True
            np.not_equal(code[1:], code[:-1]).any(axis=1, out=chg[1:])
            if not same:
                chg[1:] |= bn[1:] != bn[:-1]
            starts = np.flatnonzero(chg).tolist()
        else:
            starts = (0,)
        rows = code.tolist()  # (Python lists: a row's key costs less than a numpy slice)
        ratio = self._units_ratio1
        if same:
            out = [ratio(rows[i], bn) for i in starts]
        else:
            # (a row with no -1, as most, is its units: no copy)
            out = [ratio(r if -1 not in r else [u for u in r if u >= 0], bl[i]) for i in starts for r in (rows[i],)]
        if n == 1 or len(out) == n:
            return np.array(out)
        return np.array(out)[np.cumsum(chg) - 1]

    def _units_ratio1(self, units: list[int], bn: int) -> float:
        """`_units_ratio` of a list of units, cached by (bn, units) as `_code_ratios` caches its rows
        (the scalar paths: one pass, or a plain segment's few distinct rows)."""
        key = (bn, tuple(units))
        cache = self._work_cache
        r = cache.get(key)
        if r is None:
            if len(cache) >= self.WORK_CACHE_MAX:
                cache.clear()
            r = cache[key] = self._units_ratio(units, bn, self._hkv, int(self.p.attn_sms))
        return r

    def _units_ratio(self, ul: list[int], bn: int, hkv: int, S: int) -> float:
        """One pass's ratio from its plan's units (KV blocks of each unit, one head, in plan order)
        and KV block size `bn`, on Python ints and floats: the split rule
        (`worklist.split_of_units`), the closed form in one round, the makespan where it runs more
        than one."""
        if not ul:
            return 1.0
        total = hkv * sum(ul)
        umax = max(ul)
        split, items = split_of_units(ul, hkv, bn, S, self.ATTN_WAVES, self.ATTN_MIN_SPLIT)
        c = float(self.p.attn_item_tokens)
        ideal = (float(total * bn) + c * items) / S
        k = float(self.p.attn_tail_bw)
        if k > 1.0 and bn in self._tail_bn:  # the tail streams faster than its fair share
            ph = self._tail_phases(ul, split, bn, hkv, c, S, items)
            if self._parts:  # (plan_work_parts: the ratio's parts, priced at any k later)
                return ph, ideal
            return max(1.0, _tail_span(ph, k, S) / ideal)
        if items > S:  # more than one round
            return max(1.0, self._makespan(np.asarray(ul, np.int64), split, bn, hkv, c, S) / ideal)
        return max(1.0, (float(min(umax, split) * bn) + c) / ideal)

    _parts = False  # _units_ratio returns a tail launch's (phases, ideal) instead of its ratio

    def plan_work_parts(self, plans: list[PassPlan]) -> tuple[np.ndarray, list]:
        """`plan_work_ratio` of every plan, apart from `attn_tail_bw` (> 1): the ratios that do not
        depend on it (2 x plans: launch, split prefill chunks'), and the launches whose tail does as
        (launch, plan, phases, ideal), each priced at a k by `tail_ratio` (as `_units_ratio`, to the
        bit). A fit prices the same plans at many k: `PlanBatch.work_ratios` keeps these parts."""
        saved, self._work_cache, self._parts = self._work_cache, {}, True
        try:
            rows = [self.plan_work_ratio(p) for p in plans]
        finally:
            self._work_cache, self._parts = saved, False
        r = np.ones((2, len(rows)))
        tails = []
        for i, row in enumerate(rows):
            for j, x in enumerate(row):
                if isinstance(x, tuple):
                    tails.append((j, i, x[0], x[1]))
                else:
                    r[j, i] = x
        return r, tails

    def tail_ratio(self, phases: tuple, ideal: float) -> float:
        """A tail launch's ratio from its `plan_work_parts` (phases, ideal) at this model's k."""
        return max(1.0, _tail_span(phases, float(self.p.attn_tail_bw), int(self.p.attn_sms)) / ideal)

    TAIL_CACHE_MAX = 1 << 16  # tail phases kept (all models: they depend on no fitted constant)
    _tail_cache: dict = {}

    @classmethod
    def _tail_phases(cls, ul: list[int], split: int, bn: int, hkv: int, c: float, S: int, items: int) -> tuple:
        """The greedy schedule's SM ends at fair-share rates as phases ((length, SMs still busy), ...):
        every SM busy up to the first end, then as each frees, fewer. Cached across models by the
        plan (a fit prices the same plans at many `attn_tail_bw`)."""
        key = (bn, hkv, c, S, split, tuple(ul))
        cache = cls._tail_cache
        ph = cache.get(key)
        if ph is not None:
            return ph
        if len(cache) >= cls.TAIL_CACHE_MAX:
            cache.clear()
        if items > S:  # more than one round: every SM's end of the schedule (ascending), one phase each
            ph, prev, busy = [], 0.0, S  # (equal ends: one phase, as many SMs fewer after it)
            for x in cls._makespan(np.asarray(ul, np.int64), split, bn, hkv, c, S, all_ends=True):
                if x > prev:
                    ph.append((x - prev, busy))
                    prev = x
                busy -= 1
            ph = cache[key] = tuple(ph)
            return ph
        n = {}  # one round: each item on an SM of its own (the others idle), its length its end
        full = float(split * bn) + c
        for u in ul:
            if u <= split:
                x = float(u * bn) + c
                n[x] = n.get(x, 0) + 1
            else:
                f, r = divmod(u, split)
                n[full] = n.get(full, 0) + f
                if r:
                    x = float(r * bn) + c
                    n[x] = n.get(x, 0) + 1
        lens = sorted(n)
        cnt = [n[x] * hkv for x in lens]
        busy = sum(cnt)
        ph, prev = [], 0.0
        for x, m in zip(lens, cnt):
            ph.append((x - prev, busy))
            prev, busy = x, busy - m
        ph = cache[key] = tuple(ph)
        return ph

    @staticmethod
    def _makespan(units: np.ndarray, split: int, bn: int, hkv: int, c: float, S: int, all_ends: bool = False):
        """The greedy list schedule's makespan on S SMs of the plan's items: `units` (KV blocks of
        each unit, in plan order), each unit per head in turn: its items of `split` blocks, then
        the rest, each item `c` tokens longer. Exactly the heap's schedule (each item to the SM
        that frees first). Up to HEAP_ITEMS items: item by item on a heap. Beyond: while the items
        ascend (a prefill chunk's query blocks) the schedule is round robin (item i on SM i mod S:
        the SM freeing first is always the next one), so each SM's end is its items' sum in turn;
        the rest on a heap where few, else in steps of up to S items: with the SMs' free times
        sorted, the next K items start on the K earliest SMs as long as none of those K frees
        later than an item of the step already placed ends (then no SM is taken twice in the step).
        `all_ends`: every SM's end (a list of S, ascending) instead of the latest (the tail's phases)."""
        ul = units.tolist()
        if ul[-1] <= split and ul == sorted(ul):  # one item a unit, ascending (a prefill chunk's query blocks)
            return _round_robin(ul, bn, hkv, c, S, all_ends)
        if hkv * sum([-(-x // split) if x > split else 1 for x in ul]) <= CalibratedCostModel.HEAP_ITEMS:
            return _heap_makespan(ul, split, bn, hkv, c, S, all_ends)
        u = np.repeat(units, hkv)
        if int(units.max()) <= split:  # one item per unit and head
            p = (u * bn).astype(np.float64) + c
        else:
            n = np.maximum(1, -(-u // split))
            full = np.repeat(u, n)
            k = np.arange(len(full)) - np.repeat(np.cumsum(n) - n, n)
            p = (np.minimum(full - k * split, split) * bn).astype(np.float64) + c
        N = len(p)
        down = np.flatnonzero(p[1:] < p[:-1])
        a = int(down[0]) + 1 if len(down) else N  # the ascending prefix
        if a > S:  # round robin: each SM's items summed in turn
            free = np.concatenate((p[:a], np.zeros(-a % S))).reshape(-1, S).sum(axis=0)
            if a == N:
                return sorted(free.tolist()) if all_ends else float(free.max())
            free.sort()
        else:
            free = np.sort(p[:S])  # the first S items start at 0, one per SM
            a = S
        if N - a <= CalibratedCostModel.HEAP_ITEMS:  # the rest item by item
            return _heap_rest(free.tolist(), p[a:].tolist(), all_ends)
        acc, cat = np.minimum.accumulate, np.concatenate
        rounds = True
        while a < N:
            R = min((N - a) // S, 64)
            if rounds and R:  # whole rounds at once: the i-th item of each to the i-th earliest SM,
                # while the SMs' order stays (the round's ends ascending) and the first end comes
                # after the last SM frees (the long prefill lists: items ascending)
                rp = p[a:a + R * S].reshape(R, S)
                ends = free + np.cumsum(rp, axis=0)
                ok = (ends[:, 0] >= (ends - rp)[:, -1]) & (np.diff(ends, axis=1) >= 0).all(axis=1)
                k = R if ok.all() else int(ok.argmin())
                if k:
                    free, a = ends[k - 1], a + k * S
                    continue
                rounds = False
            K = min(S, N - a)
            end = free[:K] + p[a:a + K]
            if K > 1:  # the first SM of the step that frees after an earlier item of it ends
                late = free[1:K] > acc(end[:K - 1])
                i = int(late.argmax())
                if late[i]:
                    K = i + 1
            free = cat((free[K:], end[:K]))
            free.sort()
            a += K
            rounds = K == S
        return sorted(free.tolist()) if all_ends else float(free[-1])

    def work_ratio1(self, q: list[int], kv: list[int], qmax: int | None = None, dummies: int = 0) -> float:
        """`work_ratio` on Python lists (a plan of a few requests: no numpy calls), the same units
        and so the same ratio, cached by its units."""
        if not self.p.attn_sms or not q:
            return 1.0
        if dummies:
            q, kv = q + [1] * dummies, kv + [1] * dummies
        c = self.tile_class(max(q) if qmax is None else qmax)
        bn, qb = self._wi_bn_l[c], self._wi_qb_l[c]
        units = []
        for n, k in zip(q, kv):  # units in request order, query blocks inner (q >= 1: one block at least)
            base = k - n  # the KV before the query (>= 0): query block j ends at base + j x qb tokens
            if n > qb and base >= 0:
                units += [-(-e // bn) for e in range(base + qb, k, qb)]
                units.append(-(-k // bn))
                continue
            for j in range(1, -(-n // qb) + 1):
                e = base + (j * qb if j * qb < n else n)
                units.append(-(-(k if k < e else e if e > 0 else 0) // bn))
        return self._units_ratio1(units, bn)

    def plan_work_ratio(self, plan: PassPlan) -> tuple[float, float]:
        """`work_ratio` of a plan's attention launch, and of its prefill chunks' own launch where
        they are planned apart (`split_prefill`; else 1.0)."""
        if not self.p.attn_sms:
            return 1.0, 1.0
        b = int(plan.draft_budget)
        pq = plan.prefill_tokens.tolist()
        vq = plan.verify_query.tolist()
        q = pq + [1] * len(plan.draft_ids) + vq
        kv = [c + t for c, t in zip(plan.prefill_context.tolist(), pq)] + \
            [(b if b < c else c) + p + 1 for c, p in zip(plan.draft_context.tolist(), plan.draft_pos.tolist())] + \
            [c + t for c, t in zip(plan.verify_context.tolist(), vq)]
        ruled = self.ruled(sum(q), len(q))
        tall = self.split_prefill(pq, len(q), ruled)
        dummies = (1 << (len(q) - 1).bit_length()) - len(q) if ruled else 0  # the rule's, beside the rest
        if not any(tall):
            return self.work_ratio1(q, kv, None, dummies), 1.0
        n = len(tall)
        r_tall = self.work_ratio1([x for x, t in zip(q, tall) if t], [x for x, t in zip(kv, tall) if t],
                                  self._tile_cap if ruled else None)
        if all(tall) and n == len(q):
            return 1.0, r_tall
        q_o = [x for x, t in zip(q, tall) if not t] + q[n:]
        kv_o = [x for x, t in zip(kv, tall) if not t] + kv[n:]
        qmax = max(max(q_o), self.p.rule_max_query) if ruled else None  # the rule's tile (see time)
        return self.work_ratio1(q_o, kv_o, qmax, dummies), r_tall

    def split_prefill(self, prefill_q: list[int], n_requests: int, ruled: bool = False) -> list[bool]:
        """Which of a pass's prefill chunks (`prefill_q`: their query tokens) run in an attention
        launch of their own (the runtime plans chunks of 128-row tiles apart when the pass holds
        other requests). `ruled`: a pass padded by the shape rule, whose every chunk runs in the
        128-row prefill launch. Many passes: `PlanBatch.split_prefill`."""
        if not self.p.prefill_split or not prefill_q:
            return [False] * len(prefill_q)
        if ruled:
            return [True] * len(prefill_q)
        top = len(TILES) - 1
        tall = [self.tile_class(x) == top for x in prefill_q]
        return tall if sum(tall) < n_requests else [False] * len(prefill_q)

    def ruled(self, tokens, requests):
        """Which passes of `tokens` tokens over `requests` requests (ints, or arrays) the shape rule
        pads: those it graphs, padded within `prefill_graph_tokens` (buckets.rule_graphed;
        gpu_runtime/executor.py `_prepare`)."""
        if self.p.padding != "rule":  # (most profiles: no array arithmetic on the hot path)
            return ns(tokens).full(tokens, False)
        if isinstance(tokens, (int, np.integer)):  # (one pass: no numpy call; cost-aware policies ask every plan)
            return rule_graphed(tokens, requests, self.p.prefill_graph_tokens)
        return rule_graphed_vec(tokens, requests, self.p.prefill_graph_tokens)

    # ---- per-pass terms ----
    def eager(self, has_prefill, tokens, requests):
        """Whether a pass runs eagerly (no CUDA graph): under the shape rule, every pass it does not
        graph (`ruled`), prefill or not; otherwise a pass holding a prefill chunk and more tokens
        than the runtime graphs (`prefill_graph_tokens`). Scalars or arrays."""
        if self.p.padding == "rule":
            return not self.ruled(tokens, requests) if isinstance(tokens, (int, np.integer)) \
                else ~self.ruled(tokens, requests)
        return has_prefill & (tokens > self.p.prefill_graph_tokens)

    def _kernel_terms(self, att, kern, kern_tall, ratios, keep):
        """`att` (a pass's attention, or many passes') plus what its kernels take beyond their
        requests' terms: `kern` (the launch's kernel time, its requests' extras left out) and
        `kern_tall` (the split prefill chunks' own launch) each scaled by its work items' tail
        (`ratios`: theirs; falsy: none), a slowdown keeping page scores (`keep`), and the chunks'
        launch itself."""
        if ratios:
            r, r_tall = ratios
            att = att + kern * (r - 1.0)
            kern, kern_tall = kern * r, kern_tall * r_tall
        return att + ns(att).where(keep, (kern + kern_tall) * self.p.score_attn_frac, 0.0) + kern_tall

    def _once(self, t, eager, drafts, first, spec, mixed, method):
        """`t` plus what a pass pays once, in the step path's order (one pass: bools and an int;
        many: arrays): eager launches (no CUDA graph) with its drafts' selection kernels of the
        run's `method`, a run's first drafts (page selection), verifying drafts (a query > 1: the
        acceptance path), drafting and verifying together (two sampling paths)."""
        a, f, s, m = self._once_terms(eager, drafts, first, spec, mixed, method)
        return t + a + f + s + m

    def _once_terms(self, eager, drafts, first, spec, mixed, method):
        """`_once`'s four terms, each added to a pass in turn (a decode pass's, once: `_pass_terms`)."""
        xp, P = ns(drafts), self.p
        return (xp.where(eager, P.eager_pass_s, 0.0) + xp.where(drafts, xp.pick(self._draft_pass_t, method), 0.0),
                xp.where(first, xp.pick(self._first_pass_t, method), 0.0), xp.where(spec, P.spec_pass_s, 0.0),
                xp.where(mixed, P.mixed_pass_s, 0.0))

    def _eager(self, t):
        """An eager pass: the host's launch time and the GPU's time overlap (smoothmax)."""
        P = self.p
        if not P.eager_launch_s:
            return t
        h = P.host_overhead_s
        e = P.eager_p
        rest = ns(t).maximum(t - h, 0.0)
        return h + (rest ** e + P.eager_launch_s ** e) ** (1.0 / e)

    @property
    def padding(self) -> str:
        """How the measured runtime pads graphed passes, as priced (the params' `padding`)."""
        return self.p.padding

    @property
    def overlapped(self) -> bool:
        """Measured on a runtime that plans each pass while the previous one runs (the simulator
        then lets arrivals wait a pass longer: simulator/replica.py)."""
        return bool(self.p.overlap)

    # ---- the CostModel protocol ----
    def time(self, plan: PassPlan) -> float:
        n_pre, n_dr, n_ver = len(plan.prefill_ids), len(plan.draft_ids), len(plan.verify_ids)
        scalar = n_pre + n_dr + n_ver <= self.SCALAR_MAX
        total = 0.0
        tokens = n_dr
        logits = n_dr + n_pre
        qmax = 1
        pq, vq = plan.prefill_tokens.tolist(), plan.verify_query.tolist()  # (few: Python ints)
        ruled = self.ruled(n_dr + sum(pq) + sum(vq), n_pre + n_dr + n_ver)
        tall = self.split_prefill(pq, n_pre + n_dr + n_ver, ruled)
        split = any(tall)
        if n_pre:
            qmax = max(qmax, max([q for q, t in zip(pq, tall) if not t], default=1) if split else max(pq))
            if ruled:  # the rule: a pass carrying prefill takes the tallest tile a verification can need
                qmax = max(qmax, self.p.rule_max_query)
        if n_ver:
            qmax = max(qmax, max(vq))
        cls = self.tile_class(qmax)
        kern_tall = 0.0  # the split prefill chunks' attention (their own launch)
        if n_pre:
            if scalar:  # (as `fold`, the split chunks apart)
                f = self.prefill_attn
                top = len(TILES) - 1
                for c, q, t in zip(plan.prefill_context.tolist(), pq, tall):
                    if t:
                        kern_tall += f(c, q, top)
                    else:
                        total += f(c, q, cls)
            else:
                tall_a = np.array(tall)
                a = self.prefill_attn(plan.prefill_context, plan.prefill_tokens,
                                      np.where(tall_a, len(TILES) - 1, cls) if split else cls)
                kern_tall = float(a[tall_a].sum()) if split else 0.0
                total += float(a.sum()) - kern_tall
            tokens += sum(pq)
        b, m = plan.draft_budget, plan.draft_method
        dpos = plan.draft_pos.tolist()
        total = fold(total, lambda c, pos: self.draft_attn(c, b, m, pos, cls), scalar, plan.draft_context, plan.draft_pos)
        total = fold(total, lambda c, q: self.full_attn(c, q, cls), scalar, plan.verify_context, plan.verify_query)
        nq = sum(vq)
        tokens += nq
        logits += nq
        if tokens == 0:
            return 0.0
        # the rule keeps verify-attn's page scores in every pass (a pass of drafts alone: into a scratch slot)
        keep = (plan.keep_scores or (n_dr and m == DraftMethod.VERIFY_ATTN)) and (n_ver or n_pre or ruled)
        if self.p.attn_sms or (keep and self.p.score_attn_frac):  # the attention kernel: less the extras
            kern = total - n_ver * self.p.verify_req_s
            if n_dr:
                kern -= self._draft_extra_sum(plan, dpos)
            total = self._kernel_terms(total, kern, kern_tall, self.p.attn_sms and self.plan_work_ratio(plan), keep)
        else:
            total += kern_tall
        eager = bool(self.eager(n_pre > 0, tokens, n_pre + n_dr + n_ver))
        if self.p.padding != "none" and not eager:
            tokens, logits = padded(tokens, logits, n_dr, n_ver, self.p.padding, SCRATCH_PAGES * self.page_size, n_pre,
                                    self.p.rule_max_query)
        # the linear part alone: the eager terms are _once's and _eager below (as _flat_times)
        t = self._once(RooflineCostModel.pass_overhead(self, tokens, num_logits=logits) + total, eager, n_dr > 0,
                       0 in dpos, max(vq, default=1) > 1, n_dr > 0 and n_ver > 0, m)
        if n_dr and self._selects:
            t += self._select1(plan, m, ruled, self.p.padding in ("bucket", "pow2") and not eager)
        if keep and self.p.score_col_s:
            t += self._scores1(plan, ruled)
        return self._eager(t) if eager else t

    def _draft_extra_sum(self, plan: PassPlan, dpos: list[int]) -> float:
        """`draft_extra` of a plan's drafts, summed as numpy sums them (`_row_sum`): few drafts on
        Python floats, many as vectors."""
        b, m = plan.draft_budget, plan.draft_method
        if len(dpos) > self.SCALAR_MAX:
            return float(self.draft_extra(plan.draft_context, b, m, plan.draft_pos).sum())
        return _row_sum([self.draft_extra(c, b, m, p) for c, p in zip(plan.draft_context.tolist(), dpos)])

    def _scores1(self, plan: PassPlan, ruled: bool = False) -> float:
        """A verify-attn pass keeping its verifications' page scores: the attention kernel writes
        one score per page into a [every request's rows, longest page list] buffer, reset every
        layer, and the kept rows are copied out (pass_attention.py). Under the shape rule
        (`ruled`): the requests padded to a power of two, the width the longest one's class."""
        n = len(plan.draft_ids) + len(plan.verify_ids) + len(plan.prefill_ids)
        return self.p.score_col_s * self._rule_scale(n, self._longest_pages(plan), ruled)

    def _longest_pages(self, plan: PassPlan) -> int:
        """Pages of the pass's longest request (a draft's: its context, drafts held and this one)."""
        ps = self.page_size
        return max(int(((plan.draft_context + plan.draft_pos + ps) // ps).max(initial=0)),
                   int(((plan.verify_context + plan.verify_query + ps - 1) // ps).max(initial=0)),
                   int(((plan.prefill_context + plan.prefill_tokens + ps - 1) // ps).max(initial=0)))

    def _rule_cols(self, pages):
        """Top-k columns of selections under the shape rule: the next power of two of the width
        class holding `pages` (the pass's longest request), or of `pages` (in 128s) beyond the
        classes (the pass leaves the rule). An int or an array."""
        xp = ns(pages)
        w = xp.where(pages <= self._classes[-1], self._class_of(pages), -(-pages // self.SELECT_COLS) * self.SELECT_COLS)
        return xp.pow2(xp.maximum(w, 1))

    def _class_of(self, pages):
        """The rule's width class holding `pages` (the top one past it: callers check)."""
        xp, c = ns(pages), self._classes_t
        return xp.pick(c, xp.minimum(xp.searchsorted(c, pages), len(self._classes) - 1))

    # ---- page selection's top-k (per pass) ----
    # The runtime selects pages with a top-k kernel over a [selecting rows, columns] grid whose
    # columns are the longest page list among them (rounded up to 128), held in registers as the
    # next power of two (gpu_runtime/quest.py topk_pages; pass_attention.py's tables and score
    # widths), so a selection costs per selecting request in proportion to the padded width of
    # the pass's longest request, not its own pages: a batch of mixed lengths pays the longest.
    # Who selects: a run's first drafts (verify-refreshed methods; their count padded to a power
    # of two, as the runtime pads them), every draft (step-refreshed methods). Whose pages set the
    # width: the drafts' (verify-attn: the first drafts'; step-layer: every request's, the width
    # of the page scores its layer 0 writes). Static drafts select nothing. Padded graphed passes
    # select for every drafting row (dummies too); under the shape rule every request selects, at
    # its width class (see the module docstring). One row's program takes as long as the width
    # whatever the rows: `select_base_req` requests' worth more per selection.
    SELECT_COLS = 128

    def _sel_reqs(self, n):
        """Selecting requests' worth of top-k time for `n` of them (an int or an array): each row
        is one program, a selection of few rows takes one row's latency (`select_base_req`) rather
        than nothing."""
        return ns(n).where(n > 0, n + self.p.select_base_req, 0.0)

    def _pad_drafters(self, n):
        """Drafting rows of a padded graphed pass with `n` real ones (gpu_runtime/padding.py
        `drafters`: the bucket padding's request counts, or powers of two)."""
        if isinstance(n, (int, np.integer)):
            return (pow2(n) if self.p.padding == "pow2" else pad_count(n)) if n else 0
        return np.where(n > 0, pow2_vec(n) if self.p.padding == "pow2" else pad_count_vec(n), 0)

    def _select1(self, plan: PassPlan, m: int, ruled: bool = False, padded: bool = False) -> float:
        """The top-k of a pass drafting with method `m` (see above); `ruled`: padded by the shape
        rule, `padded`: by the bucket or pow2 padding."""
        c = self._select_list[m]
        pos = plan.draft_pos
        verify = DraftMethod(m).refresh == "verify"
        if not c or (verify and not (pos == 0).any()):
            return 0.0
        ps = self.page_size
        pages = (plan.draft_context + pos + ps) // ps  # (context + pos + 1) tokens
        # padded graphed passes select for every drafting row, dummy ones too (their count
        # padded: `_pad_drafters`); a first-draft selection as long, unless all are first
        d = self._pad_drafters(len(pos)) if padded else len(pos)
        allw = self._longest_pages(plan) if ruled or m == DraftMethod.STEP_LAYER else None  # every request's pages
        if verify:
            first = pos == 0
            n = int(first.sum())
            n = d if d > n else 1 << (n - 1).bit_length()
            w = int(pages[first].max()) if m == DraftMethod.VERIFY_ATTN else int(pages.max())
        else:
            n, w = d, allw if m == DraftMethod.STEP_LAYER else int(pages.max())
        nreq = len(plan.draft_ids) + len(plan.verify_ids) + len(plan.prefill_ids)
        return self._select_cost(c, n, w, ruled or None, nreq, allw)

    def _select_cost(self, c, n, w, ruled, nreq, allw):
        """Seconds of a top-k at `c` per row and column: `n` selecting rows (one pass: ints; many:
        arrays) over the columns of `w` pages (in 128s, held as the next power of two); where the
        shape rule pads a pass (`ruled`; None: no pass), every one of its `nreq` requests
        selects, dummy entries too, at the width class of `allw` (its longest request's pages)."""
        xp = ns(n)
        cols = xp.pow2(-(-xp.maximum(w, 1) // self.SELECT_COLS) * self.SELECT_COLS)
        if ruled is None:
            return c * self._sel_reqs(n) * cols
        n = xp.where(ruled & (n > 0), xp.pow2(xp.maximum(nreq, 1)), n)
        return c * self._sel_reqs(n) * xp.where(ruled, self._rule_cols(allw), cols)

    def pass_overhead(self, num_tokens: int, prefill_tokens: int = 0, *, num_logits: int | None = None) -> float:
        t = super().pass_overhead(num_tokens, prefill_tokens, num_logits=num_logits)
        # (requests: the policies ask for `num_tokens` drafting rows beside a chunk)
        eager = self.eager(prefill_tokens > 0, num_tokens + prefill_tokens, num_tokens + (prefill_tokens > 0))
        return self._eager(t + self.p.eager_pass_s) if eager else t

    def spec_overhead(self, method: int) -> tuple[float, float, float, float]:
        """The fitted once-per-pass terms of speculation (`time` adds them to the passes that hold
        them): drafting (`draft_pass_s`), a run's first drafts (`first_pass_s`), verifying drafts
        (`spec_pass_s`), drafting and verifying in one pass (`mixed_pass_s`). On the H200 8B
        profile these are ~1-3 ms a pass against 7-8 ms short-context decodes: `aspire`, not
        seeing them, drafted at 1-4K contexts and lost 15 % of TPOT to `ar` (docs/policies.md)."""
        m = int(method)
        return self._draft_pass_t.l[m], self._first_pass_t.l[m], self.p.spec_pass_s, self.p.mixed_pass_s

    # ---- tables per tile class (the simulator's segments) ----
    def tables_fit(self, width: int, rows: int) -> bool:
        old = self._tbl_rows
        ok = super().tables_fit(width, rows)
        if self._tbl_rows != old:  # more columns: the class tables are rebuilt on next use
            self._vt_cls, self._dt_cls = {}, {}
        return ok

    def verify_table_cls(self, cls: int) -> np.ndarray:
        """[context, q] -> full_attn(context, q) in tile class `cls`; q = 0 is 0. Only the queries a
        pass of that class holds (every q of a pass is at most its tallest, which sets its class):
        the columns past them are NaN, never read (a wrong read would show)."""
        tbl = self._vt_cls.get(cls)
        if tbl is not None and len(tbl) >= self._tbl_width:  # (every segment asks: the table as it is)
            return tbl
        top = self._cls_top_q[cls]
        rows = self._tbl_rows if top is None else min(self._tbl_rows, top + 1)

        def block(c):
            out = np.zeros((len(c), self._tbl_rows))
            out[:, rows:] = np.nan
            for q in range(1, rows):
                out[:, q] = self.full_attn(c, np.full_like(c, q), cls)
            return out

        tbl = self._vt_cls[cls] = self._extended(self._vt_cls.get(cls), block)
        return tbl

    def draft_table_cls(self, budget: int, method: int, cls: int) -> np.ndarray:
        """[context, draft_pos] -> draft_attn(context, budget, method, draft_pos) in tile class `cls`."""
        key = (budget, method, cls)
        tbl = self._dt_cls.get(key)
        if tbl is not None and len(tbl) >= self._tbl_width:
            return tbl

        def block(c):
            b, m = np.full_like(c, budget), np.full_like(c, method)
            out = np.empty((len(c), self._tbl_rows))
            for pos in range(self._tbl_rows):
                out[:, pos] = self.draft_attn(c, b, m, np.full_like(c, pos), cls)
            return out

        tbl = self._dt_cls[key] = self._extended(self._dt_cls.get(key), block)
        return tbl

    def _extra_table(self, method: int) -> np.ndarray:
        """[context, min(draft_pos, 1)] -> `draft_extra` (tiles: it depends on no budget), flat."""
        tbl = self._ex_tbl.get(method)
        if tbl is not None and len(tbl) >= 2 * self._tbl_width:
            return tbl
        have = 0 if tbl is None else len(tbl) // 2
        c = np.repeat(np.arange(have, self._tbl_width, dtype=np.int64), 2)
        k = np.tile(np.arange(2, dtype=np.int64), len(c) // 2)
        new = self.draft_extra(c, np.zeros_like(c), np.full_like(c, method), k)
        tbl = self._ex_tbl[method] = new if tbl is None else np.concatenate([tbl, new])
        return tbl

    # ---- many passes at once (the simulator's segments; the fit's design matrix) ----
    def _grid_times(self, seg: PlanBatch) -> np.ndarray:
        """Each pass's requests priced in the pass's tile class (from tables where they fit), their
        attention kernel scaled by the pass's work-item tail, plus what the pass pays beyond its
        requests (`_grid_terms`: the linear part, the once-per-pass terms, top-k, page scores)."""
        kind, ctx = seg.kind, seg.context
        draft, verify = kind == PlanBatch.DRAFT, kind == PlanBatch.VERIFY
        # plain decodes (the step path's one-pass segments too), unless their method keeps scores
        if verify.all() and (seg.query == 1).all() and seg.method != DraftMethod.VERIFY_ATTN:
            t = self._plain_times(ctx)
            if t is not None:
                return t
        q = np.where(verify, seg.query, 0)
        qmax = q.max(axis=1)
        cls = self.tile_class(qmax) if self.tiles else np.zeros(len(qmax), np.int64)
        has_draft, rows = seg.drafting(draft, q)
        budget, method = seg.budget, seg.method
        tables = self.tables_fit(int(ctx.max()) + 1, rows)
        if tables:
            att = self._grid_lookup(seg, draft, q, cls, has_draft)
        else:  # the formulas (the definition the tables reproduce)
            shape = kind.shape
            cb = np.broadcast_to(cls[:, None], shape)
            att = np.where(verify, self.full_attn(ctx, np.maximum(q, 1), cb) if self.tiles
                           else self.full_attn(ctx, q), 0.0)
            if has_draft:
                d = self.draft_attn(ctx, budget, method, seg.draft_pos, cb) if self.tiles else \
                    self.draft_attn(ctx, budget, method, seg.draft_pos)
                att = att + np.where(draft, d, 0.0)
        terms = self._grid_terms(seg, draft, verify, q, qmax, cls if self.tiles else self.tile_class(qmax))
        # (only verify-attn runs keep page scores: _shape_terms)
        keep = terms[PASS_TERMS.index("keep")] > 0 if method == DraftMethod.VERIFY_ATTN else None
        frac = self.p.score_attn_frac if keep is not None and keep.any() else 0.0
        if self.p.attn_sms or frac:  # the attention kernel, less the per-request extras
            if has_draft and tables and self.tiles:  # (x - 0.0 is x: one subtraction as the two below)
                ex = self._extra_table(method).take(ctx * 2 + (seg.draft_pos > 0))
                kern = att - np.where(draft, ex, np.where(verify, self.p.verify_req_s, 0.0))
            else:
                kern = att - np.where(verify, self.p.verify_req_s, 0.0)
                if has_draft:
                    kern = kern - np.where(draft, self.draft_extra(ctx, budget, method, seg.draft_pos), 0.0)
            if self.p.attn_sms:  # its tail (see work_ratio), pass by pass
                r = terms[0]
                att = att + kern * (r - 1.0)[:, None]
                kern = kern * r[:, None]
            if frac:
                att = att + np.where(keep[:, None], kern * frac, 0.0)
        t = terms[1] + att.sum(axis=1)
        for k in range(2, PASS_TERMS.index("keep")):  # added in turn, as the step path adds them (0: nothing)
            t = t + terms[k]
        return t

    def _grid_lookup(self, seg: PlanBatch, draft: np.ndarray, q: np.ndarray, cls: np.ndarray, has_draft: bool):
        """The requests' attention from the tables of their pass's tile class (`tables_fit` done):
        each class's tables read at every entry (flat indices: one gather each), kept where the pass
        is of that class."""
        idx = seg.context * self._tbl_rows + (np.where(draft, seg.draft_pos, q) if has_draft else q)
        lo, hi = int(cls.min()), int(cls.max())
        att = None
        for c in [lo, hi][:hi - lo + 1] if hi - lo < 2 else np.unique(cls).tolist():
            a = (self.verify_table_cls(c) if self.tiles else self.verify_table()).take(idx)
            if has_draft:
                dt = self.draft_table_cls(seg.budget, seg.method, c) if self.tiles else \
                    self.draft_table(seg.budget, seg.method)
                a = np.where(draft, dt.take(idx), a)
            att = a if att is None else np.where((cls == c)[:, None], a, att)
        return att

    PASS_MEMO_MAX = 1 << 16  # decode passes' terms kept (per model), by shape (_grid_terms)

    def _grid_terms(self, seg: PlanBatch, draft: np.ndarray, verify: np.ndarray, q: np.ndarray,
                    qmax: np.ndarray, cls: np.ndarray) -> np.ndarray:
        """`_pass_terms` of each pass of a decode grid, (terms, passes). They depend only on the
        pass's shape: its requests' kinds and work units (in plan order: the tail), its query
        tokens, tallest query and first drafts, and its longest draft's, first draft's and
        request's pages in granules of `_page_gran` (see `_shape_terms`); units change every 64-128
        tokens of a request, the rest more rarely, not every pass: each distinct shape of a run's
        method is priced once, kept in `_pass_vals`, and looked up by its row's bytes (numpy's
        per-call cost on a grid's few requests is what made the decode grids' pricing slow)."""
        ctx, dpos, P = seg.context, seg.draft_pos, self.p
        n = len(q)
        if self._pass_n + n > self.PASS_MEMO_MAX:  # (between grids: this grid's rows stay valid)
            self._pass_memo, self._pass_n = {}, 0
        r = q.shape[1]
        first = draft & (dpos == 0)
        vkv, dp1 = np.where(verify, ctx + q, 0), dpos + 1
        full = np.where(draft, ctx + dp1, vkv)  # the KV tokens each request's pages hold (0: none)
        J = 0
        gran = self.page_size * self._page_gran
        if P.attn_sms:  # each request's work units: (a draft reads its sparse selection)
            kv = np.where(draft, np.minimum(seg.budget, ctx) + dp1, vkv)
            if int(qmax.max()) <= self._tile_cap:  # every query within its class's block: a unit each
                return self._cell_terms(seg, q, first, full, -(-kv // self._wi_bn[cls][:, None]), gran)
            code, _, J = self._unit_blocks(q + draft, kv, draft | verify, cls)
        # a row per pass: kinds, query tokens, tallest query, first drafts, the longest draft's, first
        # draft's and request's page granules, units
        shapes = np.empty((n, r + 6 + (r * max(J, 1) if P.attn_sms else 0)), np.int64)
        shapes[:, :r] = seg.kind
        q.sum(axis=1, out=shapes[:, r])
        shapes[:, r + 1] = qmax
        first.sum(axis=1, out=shapes[:, r + 2])
        longest = np.empty((n, 3), np.int64)
        np.where(draft, full, 0).max(axis=1, out=longest[:, 0])
        np.where(first, full, 0).max(axis=1, out=longest[:, 1])
        full.max(axis=1, out=longest[:, 2])
        np.floor_divide(longest + (gran - 1), gran, out=shapes[:, r + 3:r + 6])
        if P.attn_sms:
            shapes[:, r + 6:] = code.reshape(n, -1)
        keys = shapes.view(np.dtype((np.void, shapes.shape[1] * 8))).ravel().tolist()  # (bytes: fast keys)
        memo = self._pass_memo.setdefault((seg.method, J), {})
        ids = list(map(memo.get, keys))
        if None in ids:
            new = []  # the new shapes' terms, columns from _pass_n on
            for i in [i for i, k in enumerate(ids) if k is None]:
                k = memo.get(keys[i])  # (an earlier pass of this grid's)
                if k is None:
                    k = memo[keys[i]] = self._pass_n + len(new)
                    new.append(self._pass_terms(shapes[i].tolist(), r, longest[i].tolist(), max(J, 1), seg.method))
                ids[i] = k
            self._keep_terms(new)
        return self._pass_vals.take(ids, axis=1)

    def _cell_terms(self, seg: PlanBatch, q: np.ndarray, first: np.ndarray, full: np.ndarray, units: np.ndarray,
                    gran: int) -> np.ndarray:
        """`_grid_terms` where every request is one work unit: each pass's shape keyed by its
        requests' kinds, query tokens, first drafts, units and page granules (what its row of
        `_grid_terms` sums and takes the largest of: the same terms, fewer vector operations)."""
        n, r = q.shape
        cells = np.empty((n, 5, r), np.int64)
        cells[:, 0] = seg.kind
        cells[:, 1] = q
        cells[:, 2] = first
        cells[:, 3] = units
        np.floor_divide(full + (gran - 1), gran, out=cells[:, 4])
        keys = cells.reshape(n, 5 * r).view(np.dtype((np.void, 40 * r))).ravel().tolist()
        memo = self._pass_memo.setdefault((seg.method, "cells"), {})
        ids = list(map(memo.get, keys))
        if None in ids:
            new = []  # the new shapes' terms, columns from _pass_n on
            D = PlanBatch.DRAFT
            for i in [i for i, k in enumerate(ids) if k is None]:
                k = memo.get(keys[i])  # (an earlier pass of this grid's)
                if k is None:
                    k = memo[keys[i]] = self._pass_n + len(new)
                    kinds, qs, fs, us = cells[i, :4].tolist()
                    fl = full[i].tolist()
                    longest = [max([x for x, kd in zip(fl, kinds) if kd == D], default=0),
                               max([x for x, f in zip(fl, fs) if f], default=0), max(fl)]
                    shape = kinds + [sum(qs), max(qs), sum(fs), 0, 0, 0] + us  # (_pass_terms reads no granule)
                    new.append(self._pass_terms(shape, r, longest, 1, seg.method))
                ids[i] = k
            self._keep_terms(new)
        return self._pass_vals.take(ids, axis=1)

    def _keep_terms(self, new: list[tuple]) -> None:
        """Append passes' terms to `_pass_vals` (one column each)."""
        k, m = self._pass_n, len(new)
        if k + m > self._pass_vals.shape[1]:
            grown = np.empty((len(PASS_TERMS), max(2 * self._pass_vals.shape[1], k + m)))
            grown[:, :k] = self._pass_vals[:, :k]
            self._pass_vals = grown
        self._pass_vals[:, k:k + m] = np.array(new).T
        self._pass_n = k + m

    def _pass_terms(self, shape: list, r: int, longest: list, J: int, method: int) -> tuple:
        """A decode pass's terms beyond its requests' attention (PASS_TERMS) from its `shape` row
        (`_grid_terms`: its r requests' kinds; query tokens, tallest query, first drafts; 3 page
        granules; J work units a request) and `longest` (KV tokens of its longest draft, first draft
        and request), on Python numbers: the work items' tail from its units, the rest from the
        pass's counts and pages alone (`_shape_terms`, cached apart: units change more often)."""
        kinds, (tq, qmax, nf) = shape[:r], shape[r:r + 3]
        nd, nv = kinds.count(PlanBatch.DRAFT), kinds.count(PlanBatch.VERIFY)
        ratio = 1.0
        if self.p.attn_sms:  # plan order: drafts, verifications, the rule's dummy verifiers (a block each)
            units = shape[r + 6:]
            order = [j for j, k in enumerate(kinds) if k == PlanBatch.DRAFT] + \
                [j for j, k in enumerate(kinds) if k == PlanBatch.VERIFY]
            ul = [units[j] for j in order] if J == 1 else \
                [u for j in order for u in units[j * J:(j + 1) * J] if u >= 0]
            nreq = nd + nv
            if nreq and self.ruled(tq + nd, nreq):
                ul += [1] * ((1 << (nreq - 1).bit_length()) - nreq)
            ratio = self._units_ratio1(ul, self._wi_bn_l[self.tile_class(qmax)])
        ends, ps = self._page_ends[method == DraftMethod.VERIFY_ATTN], self.page_size
        skey = (method, nd, nv, nf, tq, qmax > 1, *[self._page_end(-(-x // ps), ends) for x in longest])
        rest = self._shape_memo.get(skey)
        if rest is None:
            if len(self._shape_memo) >= self.PASS_MEMO_MAX:
                self._shape_memo.clear()
            rest = self._shape_memo[skey] = self._shape_terms(*skey[1:], method)
        return (ratio, *rest)

    @staticmethod
    def _page_end(pages: int, ends: list[int]) -> int:
        """The end of the interval of `ends` holding `pages` (past the last: `pages`)."""
        i = bisect_left(ends, pages)
        return ends[i] if i < len(ends) else pages

    def _shape_terms(self, nd: int, nv: int, nf: int, tq: int, spec: bool, dw: int, fw: int, allw: int,
                     method: int) -> tuple:
        """`_pass_terms` but the ratio, of a decode pass of `nd` drafts (`nf` a run's first), `nv`
        verifications of `tq` query tokens (`spec`: one of more than one), its longest draft's, first
        draft's and request's pages `dw`, `fw`, `allw` (or the ends of their `_page_ends` intervals:
        the same terms)."""
        P, m = self.p, method
        nreq, tokens = nd + nv, tq + nd
        ruled = bool(self.ruled(tokens, nreq))
        c, sel = self._select_list[m], 0.0
        if nd and c:  # (graphed: no prefill)
            d = self._pad_drafters(nd) if P.padding in ("bucket", "pow2") else nd
            if DraftMethod(m).refresh == "verify":
                n = (d if d > nf else 1 << (nf - 1).bit_length()) if nf else 0
                w = fw if m == DraftMethod.VERIFY_ATTN else dw
            else:
                n, w = d, allw if m == DraftMethod.STEP_LAYER else dw
            sel = self._select_cost(c, n, w, ruled or None, nreq, allw)
        # passes keeping page scores: the run's method is verify-attn, and they verify (the rule: all)
        keep = m == DraftMethod.VERIFY_ATTN and (nv > 0 or ruled)
        score = P.score_col_s * self._rule_scale(nreq, allw, ruled) if keep and P.score_col_s else 0.0
        once = self._once_terms(False, nd > 0, nf > 0, spec, nd > 0 and nv > 0, m)  # (never eager: no prefill)
        return (self._padded_overhead(tokens, nd, nv), *once, sel, score, float(keep))

    def _decode_times(self, context: list[int], n: int) -> np.ndarray:
        if self.p.attn_sms or self.p.padding != "none":  # the tail and padding are per pass
            if n == 1:
                t = self._plain1(context)
                if t is not None:
                    return np.array([t])
            t = self._plain_slices(context, n) if len(context) <= self.SLICE_MAX else None
            if t is None:
                ctx = np.asarray(context, np.int64) + np.arange(n, dtype=np.int64)[:, None]
                t = self._plain_times(ctx, context)
            if t is not None:
                return t
            return self._grid_times(PlanBatch.plain(context, n))
        return super()._decode_times(context, n)  # q = 1: the smallest tile, no pass terms

    SLICE_MAX = 3  # plain segments of at most this many requests: `_plain_slices`

    def _plain_slices(self, first: list[int], n: int) -> np.ndarray | None:
        """`_plain_times` of a plain segment of a few requests from slices of the table's q = 1
        column, a request at a time (no (passes, requests) arrays), added in turn: the bits of the
        row sum, a left fold below 8 requests (see RooflineCostModel._decode_times)."""
        if not self.tables_fit(max(first) + n, 2):
            return None
        c = self.tile_class(1) if self.tiles else 0
        col = (self.verify_table_cls(c) if self.tiles else self.verify_table())[:, 1]
        m = None
        if self.p.attn_sms:  # each request's attention plus its kernel's share of the pass's tail
            r = len(first)
            extra = (1 << (r - 1).bit_length()) - r if r & (r - 1) and self.ruled(r, r) else 0
            m = self._plain_ratios(first, n, self._wi_bn_l[c], extra) - 1.0
            v = self.p.verify_req_s
        t = None
        for x in first:
            a = col[x:x + n]
            if m is not None:
                a = a + (a - v) * m
            t = a if t is None else t + a
        if self.p.padding == "none":
            return self.overhead_table(len(first))[len(first)] + t
        return self._padded_overhead(len(first), 0, len(first)) + t

    def _plain_times(self, ctx: np.ndarray, first: list[int] | None = None) -> np.ndarray | None:
        """`_grid_times` of plain decode passes (every request verifies one token: the smallest
        tile, no drafts, no pass terms; `ctx`: (passes, requests) KV tokens before each pass; `first`:
        its first row where each pass is one token on from the last), without the general machinery:
        the same floats from the same operations in the same order. None where the tables do not
        cover them."""
        n, r = ctx.shape
        if n == 1:
            t = self._plain1(ctx[0].tolist())
            return None if t is None else np.array([t])
        if not (r and n and self.tables_fit(max(first) + n if first else int(ctx.max()) + 1, 2)):
            return None
        c = self.tile_class(1) if self.tiles else 0
        att = (self.verify_table_cls(c) if self.tiles else self.verify_table())[:, 1][ctx]
        if self.p.attn_sms:
            kern = att - self.p.verify_req_s
            # one query block a request: its unit's KV blocks are those of its KV (context + 1)
            bn = int(self._wi_bn[c])
            extra = (1 << (r - 1).bit_length()) - r if r & (r - 1) and self.ruled(r, r) else 0  # the rule's dummies
            if first is not None:
                ratio = self._plain_ratios(first, n, bn, extra)
            else:
                code = -(-(ctx + 1) // bn)
                if extra:  # a unit of one block each
                    code = np.concatenate([code, np.ones((n, extra), np.int64)], axis=1)
                ratio = self._code_ratios(code, bn)
            att = att + kern * (ratio - 1.0)[:, None]
        if self.p.padding == "none":
            return self.overhead_table(r)[np.full(n, r, np.int64)] + att.sum(axis=1)
        return self._padded_overhead(r, 0, r) + att.sum(axis=1)

    def _padded_overhead(self, tokens: int, n_draft: int, n_verify: int):
        """The linear part of a decode pass of `tokens` tokens (and logits rows), padded as graphed:
        every such pass is padded alike, so one number (numpy's elementwise formulas give each entry
        the same bits at any array length)."""
        if self.p.padding == "none":
            return self.overhead_table(tokens)[tokens]
        key = (tokens, n_draft, n_verify)
        ovh = self._padded_ovh.get(key)
        if ovh is None:
            # (the padded counts on Python ints: `padded` is `padded_vec`'s scalar twin, tests hold them equal)
            tp, lp = padded(tokens, tokens, n_draft, n_verify, self.p.padding, SCRATCH_PAGES * self.page_size,
                            0, self.p.rule_max_query)  # (graphed: no prefill)
            ovh = self._padded_ovh[key] = self.overhead_vec(np.array([tp], np.int64), np.array([lp], np.int64))[0]
        return ovh

    def _plain_ratios(self, first: list[int], n: int, bn: int, extra: int) -> np.ndarray:
        """`work_ratios` of n plain decode passes from the first one's contexts: a request's unit
        (the KV blocks of context + 1 tokens) grows by a block at the passes where its context is
        a multiple of `bn`, so the units change only there (each distinct row priced once)."""
        starts = sorted({0, *(i for x in first for i in range((-x) % bn or bn, n, bn))})
        vals = [self._units_ratio1([-(-(x + i + 1) // bn) for x in first] + [1] * extra, bn) for i in starts]
        if len(vals) == 1:
            return np.full(n, vals[0])
        starts.append(n)
        return np.repeat(vals, [b - a for a, b in zip(starts, starts[1:])])

    def _plain1(self, context: list[int]) -> float | None:
        """`_plain_times` of one pass (the step path's decode passes) on Python floats: the same
        operations in the same order, the row summed in numpy's order (`_row_sum`)."""
        r = len(context)
        if not (r and self.tables_fit(max(context) + 1, 2)):
            return None
        c = self.tile_class(1) if self.tiles else 0
        att = (self.verify_table_cls(c) if self.tiles else self.verify_table())[context, 1].tolist()
        if self.p.attn_sms:
            bn = self._wi_bn_l[c]
            units = [-(-(x + 1) // bn) for x in context]
            if r & (r - 1) and self.ruled(r, r):  # the rule's dummy verifiers: a unit of one block each
                units += [1] * ((1 << (r - 1).bit_length()) - r)
            m = self._units_ratio1(units, bn) - 1.0
            v = self.p.verify_req_s
            att = [a + (a - v) * m for a in att]
        ovh = self._padded_overhead(r, 0, r)
        return float(ovh + _row_sum(att))

    def _flat_times(self, batch: PlanBatch) -> np.ndarray:
        """`time(plan)` of many plans at once (vector formulas; the fit calls this per step)."""
        n = batch.n
        qmax = np.ones(n, np.int64)
        np.maximum.at(qmax, batch.ver_of, batch.ver_q)
        tall = batch.split_prefill(self)
        np.maximum.at(qmax, batch.pre_of[~tall], batch.pre_q[~tall])
        ruled = self.ruled(batch.tokens, batch.requests)
        qmax = np.where(ruled & batch.has_prefill, np.maximum(qmax, self.p.rule_max_query), qmax)
        cls = self.tile_class(qmax)
        a = self.prefill_attn(batch.pre_ctx, batch.pre_q, np.where(tall, len(TILES) - 1, cls[batch.pre_of]))
        kern_tall = np.bincount(batch.pre_of[tall], a[tall], n)  # split prefill chunks' attention (their own launch)
        att = pass_sums(n, (batch.pre_of[~tall], a[~tall]),
                         (batch.dr_of, self.draft_attn(batch.dr_ctx, batch.dr_budget, batch.dr_method, batch.dr_pos,
                                                       cls[batch.dr_of])),
                         (batch.ver_of, self.full_attn(batch.ver_ctx, batch.ver_q, cls[batch.ver_of])))
        keep = batch.keeps(ruled)
        frac = self.p.score_attn_frac
        if self.p.attn_sms or (frac and keep.any()):  # the attention kernel's tail (see work_ratio)
            kern = att - np.bincount(batch.ver_of, minlength=n) * self.p.verify_req_s
            if len(batch.dr_of):
                kern = kern - np.bincount(batch.dr_of, self.draft_extra(batch.dr_ctx, batch.dr_budget, batch.dr_method,
                                                                         batch.dr_pos), n)
            att = self._kernel_terms(att, kern, kern_tall, self.p.attn_sms and batch.work_ratios(self), keep)
        else:
            att = att + kern_tall
        eager = self.eager(batch.has_prefill, batch.tokens, batch.requests)
        tok, logi = batch.tokens, batch.logits
        if self.p.padding != "none":
            tp, lp = padded_vec(tok, logi, np.bincount(batch.dr_of, minlength=n), np.bincount(batch.ver_of, minlength=n),
                                self.p.padding, SCRATCH_PAGES * self.page_size, np.bincount(batch.pre_of, minlength=n),
                                self.p.rule_max_query)
            tok, logi = np.where(eager, tok, tp), np.where(eager, logi, lp)
        method = np.zeros(n, np.int64)
        method[batch.dr_of] = batch.dr_method  # (a plan's one)
        vmax = np.ones(n, np.int64)
        np.maximum.at(vmax, batch.ver_of, batch.ver_q)
        has_v = np.bincount(batch.ver_of, minlength=n) > 0
        t = self._once(self.overhead_vec(tok, logi) + att, eager, batch.has_draft,
                       np.bincount(batch.dr_of[batch.dr_pos == 0], minlength=n) > 0, vmax > 1,
                       batch.has_draft & has_v, method)
        if len(batch.dr_of) and self._selects:
            t = t + self._select_batch(batch, ruled, ~eager & (self.p.padding in ("bucket", "pow2")))
        if self.p.score_col_s:
            t = t + self._scores_batch(batch, keep, ruled)
        if self.p.eager_launch_s and eager.any():
            t = np.where(eager, self._eager(t), t)
        return np.where(batch.tokens > 0, t, 0.0)  # an empty pass costs nothing (as time())

    def _select_batch(self, batch: PlanBatch, ruled: np.ndarray, padded: np.ndarray) -> np.ndarray:
        """`_select1` of many plans (vector); `ruled`: `ruled(batch.tokens)`, `padded`: passes the
        bucket or pow2 padding pads."""
        n, ps = batch.n, self.page_size
        out = np.zeros(n)
        pages = (batch.dr_ctx + batch.dr_pos + ps) // ps
        allw = self._longest_batch(batch)  # every request's pages (step-layer's score width)
        nreq = np.bincount(batch.dr_of, minlength=n) + np.bincount(batch.ver_of, minlength=n) + \
            np.bincount(batch.pre_of, minlength=n)
        for m in np.unique(batch.dr_method).tolist():
            c = self._select_list[m]
            if not c:
                continue
            dm = batch.dr_method == m
            nd = np.bincount(batch.dr_of[dm], minlength=n)
            d = np.where(padded, self._pad_drafters(nd), nd)
            if DraftMethod(m).refresh == "verify":
                who = dm & (batch.dr_pos == 0)
                cnt = np.bincount(batch.dr_of[who], minlength=n)
                cnt = np.where(cnt > 0, np.where(d > cnt, d, NP.pow2(np.maximum(cnt, 1))), 0)
                src = who if m == DraftMethod.VERIFY_ATTN else dm
            else:
                cnt = d
                src = dm
            w = np.zeros(n, np.int64)
            np.maximum.at(w, batch.dr_of[src], pages[src])
            if m == DraftMethod.STEP_LAYER:
                w = np.where(cnt > 0, allw, w)
            out += self._select_cost(c, cnt, w, ruled if ruled.any() else None, nreq, allw)
        return out

    def _longest_batch(self, batch: PlanBatch) -> np.ndarray:
        """`_longest_pages` of every plan."""
        n, ps = batch.n, self.page_size
        w = np.zeros(n, np.int64)
        np.maximum.at(w, batch.dr_of, (batch.dr_ctx + batch.dr_pos + ps) // ps)
        np.maximum.at(w, batch.ver_of, (batch.ver_ctx + batch.ver_q + ps - 1) // ps)
        np.maximum.at(w, batch.pre_of, (batch.pre_ctx + batch.pre_q + ps - 1) // ps)
        return w

    def _scores_batch(self, batch: PlanBatch, keep: np.ndarray, ruled: np.ndarray) -> np.ndarray:
        """`_scores1` of many plans (vector); `keep`: `batch.keeps(ruled)`."""
        n = batch.n
        w = self._longest_batch(batch)
        nreq = np.bincount(batch.dr_of, minlength=n) + np.bincount(batch.ver_of, minlength=n) + \
            np.bincount(batch.pre_of, minlength=n)
        return np.where(keep, self.p.score_col_s * self._rule_scale(nreq, w, ruled), 0.0)

    def _rule_scale(self, nreq, w, ruled):
        """Page-score rows x columns: requests x the longest's pages in 128s, or under the rule
        (`ruled`, within its classes) requests padded to a power of two x the class's width. Ints
        (one pass) or arrays."""
        xp = ns(w)
        on = ruled & (w <= self._classes[-1])
        return xp.where(on, xp.pow2(xp.maximum(nreq, 1)) * self._class_of(w),
                        nreq * (-(-w // self.SELECT_COLS) * self.SELECT_COLS))

    def kv_capacity_pages(self, reserve_frac: float | None = None, selection_metadata: bool = True) -> int:
        """The KV pages the runtime could allocate on the measured GPU, where the profile says so."""
        pages = self.info.get("kv_pages_allocatable")
        if pages and reserve_frac is None:
            return int(pages)
        return super().kv_capacity_pages(reserve_frac, selection_metadata)

    # ---- metadata and profiles ----
    def metadata(self) -> dict:
        md = super().metadata()
        md.update({k: v for k, v in self.info.items() if k not in ("params",)})
        md["cost_model"] = self.name
        md["params"] = asdict(self.p)
        md.pop("fit_error", None)  # the roofline's (against the anchor table); ours are in info
        for k in ("fit_error", "heldout_error"):
            if k in self.info:
                md[k] = self.info[k]
        return md

    @classmethod
    def from_profile(cls, prof: dict) -> "CalibratedCostModel":
        md = prof["metadata"]
        return cls(ModelConfig.from_dict(md["model"]), GPU.from_dict(md["gpu"]), tp=md["tp"],
                   weight_dtype=md["weight_dtype"], kv_dtype=md["kv_dtype"], page_size=md["page_size"],
                   params=CalibratedParams.from_dict(md["params"]), check_memory=False,
                   info={k: v for k, v in md.items() if k not in ("params", "model", "gpu")})

    def with_params(self, **kw) -> "CalibratedCostModel":
        return CalibratedCostModel(self.model, self.gpu, self.tp, self.weight_dtype, self.kv_dtype, self.page_size,
                                   replace(self.p, **kw), check_memory=False, info=self.info)


def _heap_makespan(units: list[int], split: int, bn: int, hkv: int, c: float, S: int, ends: bool = False):
    """`CalibratedCostModel._makespan` item by item: each item to the SM that frees first (a heap
    of the SMs' free times), the schedule's definition."""
    full = float(split * bn) + c
    p = []
    for u in units:
        if u <= split:
            seq = [float(u * bn) + c]
        else:
            f, r = divmod(u, split)
            seq = [full] * f + [float(r * bn) + c] if r else [full] * f
        p += seq * hkv
    free = p[:S]
    heapq.heapify(free)
    return _heap_rest(free, p[S:], ends)


def _round_robin(units: list[int], bn: int, hkv: int, c: float, S: int, ends: bool = False):
    """`CalibratedCostModel._makespan` of ascending items, one a unit and head (units ascending, none
    past the split): the schedule is round robin (item i on SM i mod S), each SM's end its items
    summed in turn, and the latest end is that of the last SM given one item more than the rest or
    of the last SM (sums of larger items in turn are no smaller: rounding is monotone), so only
    those two are summed (a chunk of 8K tokens: ~16 items each, not 2,048)."""
    N = hkv * len(units)
    m = N % S
    if ends:  # every SM's (a list of S: those given none end at 0)
        cols = range(min(N, S))
    else:
        cols = [N - 1] if N <= S else [S - 1] if m == 0 else [m - 1, S - 1]
    out = []
    for s in cols:
        x = float(units[s // hkv] * bn) + c
        for i in range(s + S, N, S):
            x += float(units[i // hkv] * bn) + c
        out.append(x)
    if ends:
        return sorted(out + [0.0] * (S - len(out)))
    return max(out)


def _heap_rest(free: list[float], p: list[float], ends: bool = False):
    """The makespan once items `p` are scheduled after SMs free at `free` (a heap, or sorted);
    `ends`: every SM's end, ascending."""
    put = heapq.heapreplace
    for x in p:
        put(free, free[0] + x)
    return sorted(free) if ends else max(free)


def _tail_span(phases: tuple, k: float, S: int) -> float:
    """The launch's span from its schedule's phases ((length at fair share, SMs busy), ...: see
    `CalibratedCostModel._tail_phases`) where an SM streams at up to `k` times its fair share:
    the m SMs still busy share the HBM, each at min(k, S / m) of its share (fluid: the items keep
    their order of ending). k = 1: the last end (the makespan)."""
    t, ik = 0.0, 1.0 / k
    for x, m in phases:
        f = m / S
        t += x * (f if f > ik else ik)
    return t


def _row_sum(x: list[float]) -> float:
    """`np.sum` of a float64 row, bit for bit: numpy's pairwise summation (blocks of up to 128 in
    eight interleaved partial sums, halves above that), so a pass priced on Python floats equals
    the same pass priced in a segment (tests/test_calibrated_speed.py holds it to numpy)."""
    return 0.0 + _pairwise(x, 0, len(x))


def _pairwise(a: list[float], lo: int, n: int) -> float:
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo:lo + 8]
        end = lo + n - n % 8
        for j in range(lo + 8, end, 8):
            r0 += a[j]
            r1 += a[j + 1]
            r2 += a[j + 2]
            r3 += a[j + 3]
            r4 += a[j + 4]
            r5 += a[j + 5]
            r6 += a[j + 6]
            r7 += a[j + 7]
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for j in range(end, lo + n):
            res += a[j]
        return res
    h = n // 2
    h -= h % 8
    return _pairwise(a, lo, h) + _pairwise(a, lo + h, n - h)


def _load(prof: dict) -> CalibratedCostModel:
    return CalibratedCostModel.from_profile(prof)


from .profile import register_kind  # noqa: E402  (after the class it registers)

register_kind(CalibratedCostModel.name, _load)
