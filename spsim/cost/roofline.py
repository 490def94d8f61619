"""Analytic roofline cost model: seconds per forward pass from its per-request composition.

pass = host overhead + per-layer fixed cost (launches, norms, rope)
     + smoothmax(weights / bandwidth, GEMM and LM-head flops / flop rate)      (read once per pass)
     + sampling (one vocab-sized read per logits row) + TP all-reduces (2 per layer; latency
       grows with the TP degree: GPU.allreduce_latency)
     + sum over requests of its attention, priced from its own KV length:
         per layer: hypot(KV pages read / bandwidth, attention flops / flop rate)
                    + a fixed cost per request and per KV split (page tables, split merge).

smoothmax(a, b) = (a^p + b^p)^(1/p): p -> inf is the hard roofline max; the fitted p (~1.75) makes
the knee gradual, as measured for the GEMMs. Attention uses p = 2 (np.hypot, one vector op): we
have no measurement of our attention kernels to fit it to. KV is read in whole pages, at least
`attn_min_kv` tokens' worth per request (a convex floor), and every request pays fixed costs per
KV split, so a batch of mixed lengths costs more than the same batch at its mean length. Attention of a request with `q` query tokens per KV head packs the
GQA group: `q * group` rows, padded to MMA tiles of 16 rows, re-reading the KV once per 128-row
query tile (so a verify of up to 32 tokens reads it once, a long prefill chunk several times).

Draft-KV methods (spsim.plan.DraftMethod), one cost term each:
  every method: each layer reads min(budget, context) + draft_pos + 1 tokens of sparse KV;
  STATIC: nothing else (the window is fixed);
  VERIFY_QUEST: Quest page scoring (per-page min/max keys, 2/page_size of the keys, every layer)
      once per draft run, charged to its first draft (draft_pos == 0): the verify group of a plan
      does not say which method its next drafts use, and a run of k = 0 never needs the scores;
  VERIFY_ATTN: top-k over the per-page scores the verification's attention wrote (one fp32 per
      page and KV head, every layer), charged to the first draft of a run like VERIFY_QUEST;
  STEP_QUEST: Quest page scoring at every draft step;
  STEP_LAYER: one designated layer attends to the full context + drafts instead of the budget,
      and its attention scores choose the pages for the other layers (ASPIRE), so no separate
      scoring is charged.
Each per-request term is written once (spsim/cost/xp.py): `time(plan)` prices a small plan's
requests one at a time on Python numbers, a larger plan's, `times(batch)` many passes' requests or
their (passes, requests) grids on arrays, through the same formulas (equal to float rounding).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from spsim.errors import SpsimError
from spsim.hardware import GPU, get_gpu
from spsim.memory import check_tp, kv_budget_bytes, kv_capacity_pages, kv_heads_per_gpu
from spsim.models import ModelConfig, dtype_bytes, get_model
from spsim.plan import DraftMethod, PassPlan

from .batch import PlanBatch
from .xp import Table, fold, ns, pass_sums

# Per-pass times measured on this project's H200 for an 8B shape (docs/anchors.md), tokens -> seconds.
# 1-64 tokens all took 4.1 ms. The fitted constants below reproduce these (see fit_error()).
H200_8B_PASS_S = {1: 4.1e-3, 16: 4.1e-3, 32: 4.1e-3, 64: 4.1e-3, 128: 5.7e-3, 256: 7.1e-3, 512: 12.4e-3}


@dataclass(frozen=True)
class RooflineParams:
    # Fitted to H200_8B_PASS_S by benchmarks/cost_model_check.py (least squares, relative error):
    layer_fixed_s: float = 15.461e-6  # per layer per pass: launches, norms, rope, residuals
    gemm_eff: float = 0.8996  # fraction of the GPU's achievable GEMM rate the pass's GEMMs reach
    smooth_p: float = 1.7464  # smoothmax exponent between memory and compute time
    # Assumptions (not fitted; documented in docs/cost_model.md):
    host_overhead_s: float = 100e-6  # scheduler + input preparation per pass, not overlapped
    attn_flops_eff: float = 0.5  # attention kernels reach half the GEMM rate (softmax, small tiles)
    attn_req_s: float = 0.2e-6  # per request per layer: page-table walk, launch share
    attn_min_kv: int = 256  # KV tokens: the least a request's attention costs to stream
    attn_split_s: float = 0.1e-6  # per KV split per layer: the merge of split partial results
    split_tokens: int = 2048  # KV tokens per split
    mma_rows: int = 16  # query rows padded to this (mma.sync m16)
    q_tile_rows: int = 128  # query rows per tile; the KV is re-read once per tile
    sample_bytes_per_logit: int = 12  # fp32 logits written, read by softmax, read by the sampler


class RooflineCostModel:
    """Implements spsim.cost.CostModel from model shapes, GPU datasheet figures and efficiency factors."""

    name = "roofline"
    source: str | None = None  # set where loaded from a shipped profile (cost/shipped.py)
    overlapped = False  # analytic: measured on no runtime
    padding = "none"  # analytic: prices no padding

    def __init__(self, model: ModelConfig | str = "llama-3.1-8b", gpu: GPU | str = "h200", tp: int = 1,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", page_size: int = 16,
                 params: RooflineParams | None = None, check_memory: bool = True):
        self.model, self.gpu = get_model(model), get_gpu(gpu)
        check_tp(self.model, tp)
        if not isinstance(page_size, int) or page_size < 1:
            raise SpsimError(f"page size must be a positive integer, got {page_size!r}")
        dtype_bytes(weight_dtype)  # validates the name
        kb = dtype_bytes(kv_dtype)
        self.tp, self.weight_dtype, self.kv_dtype, self.page_size = tp, weight_dtype, kv_dtype, page_size
        self.p = params or RooflineParams()
        self.info: dict = {}  # analytic: no measurements
        if check_memory:  # raises SpsimError when the weights do not fit (e.g. 70B at tp=1 on 80 GB)
            kv_budget_bytes(self.model, self.gpu, weight_dtype, tp)
        m, g, P = self.model, self.gpu, self.p
        bw = g.bw
        self.L = m.layers
        hkv = kv_heads_per_gpu(m, tp)
        self.group = (m.q_heads // tp) // hkv  # query heads sharing one KV head on a GPU
        # Linear part, per GPU.
        self.weights_s = m.pass_weight_bytes(weight_dtype) / tp / bw
        rate = g.flops(weight_dtype) * P.gemm_eff
        self.token_flop_s = 2 * m.layers * m.layer_linear_params / tp / rate
        self.logit_flop_s = 2 * m.lm_head_params / tp / rate
        self.sample_s = m.vocab * P.sample_bytes_per_logit / bw  # per logits row
        self.fixed_s = m.layers * P.layer_fixed_s
        if tp > 1:  # ring all-reduce of the hidden state, twice per layer
            # latency: measured at 2 GPUs, plus a fitted cost per extra ring step (GPU.allreduce_latency;
            # sources in spsim/hardware.py's docstring and benchmarks/results/allreduce_tp_fit.json)
            link = g.nvlink_bw * g.nvlink_eff
            self.comm_fixed_s = 2 * m.layers * g.allreduce_latency(tp)
            self.comm_token_s = 2 * m.layers * 2 * (tp - 1) / tp * m.hidden * 2 / link
        else:
            self.comm_fixed_s = self.comm_token_s = 0.0
        # Attention, per layer per GPU.
        self.page_read_s = page_size * 2 * hkv * m.head_dim * kb / bw  # K and V of one page
        self.score_page_s = 2 * hkv * m.head_dim * kb / bw  # min and max key of one page
        self.attn_score_page_s = hkv * 4 / bw  # one fp32 attention score per page and KV head
        self.row_flop_s = 4 * m.head_dim * hkv / (g.flops("bf16") * P.attn_flops_eff)  # per row per KV token
        self.inv_p = 1.0 / P.smooth_p
        # [method, min(draft_pos, 1)] -> seconds per scored page (all layers)
        self.score_tbl = np.zeros((len(DraftMethod), 2))
        self.score_tbl[DraftMethod.VERIFY_QUEST, 0] = self.L * self.score_page_s
        self.score_tbl[DraftMethod.STEP_QUEST, :] = self.L * self.score_page_s
        self.score_tbl[DraftMethod.VERIFY_ATTN, 0] = self.L * self.attn_score_page_s
        # STEP_LAYER: the designated full layer's own attention ranks the pages; nothing extra
        self._score_t = Table(self.score_tbl)
        self._tbl_width = self._tbl_rows = 0  # segment tables: none yet
        self._verify_tbl, self._draft_tbls = None, {}
        self._ovh_tbl = np.zeros(0)

    # ---- linear part ----
    def pass_overhead(self, num_tokens: int, prefill_tokens: int = 0, *, num_logits: int | None = None) -> float:
        """Seconds of a pass with `num_tokens` tokens and no attention (logits for every token
        unless `num_logits` says otherwise), plus `prefill_tokens` of prefill chunks (one more
        logits row: a chunk's last token)."""
        n_log = num_tokens if num_logits is None else num_logits
        if prefill_tokens > 0:
            num_tokens += prefill_tokens
            n_log += 1
        if num_tokens <= 0:
            return 0.0
        p = self.p.smooth_p
        c = num_tokens * self.token_flop_s + n_log * self.logit_flop_s
        lin = (self.weights_s ** p + c ** p) ** self.inv_p
        return (self.p.host_overhead_s + self.fixed_s + lin + n_log * self.sample_s
                + self.comm_fixed_s + num_tokens * self.comm_token_s)

    def overhead_vec(self, tokens: np.ndarray, logits: np.ndarray) -> np.ndarray:
        p = self.p.smooth_p
        c = tokens * self.token_flop_s + logits * self.logit_flop_s
        lin = (self.weights_s ** p + c ** p) ** self.inv_p
        t = (self.p.host_overhead_s + self.fixed_s + self.comm_fixed_s) + lin + logits * self.sample_s \
            + tokens * self.comm_token_s
        return np.where(tokens > 0, t, 0.0)

    # ---- attention (per request: arrays, or Python numbers for one request; spsim/cost/xp.py) ----
    def _layer_attn(self, n_kv, causal_kv, q):
        """Seconds per layer per request reading `n_kv` KV tokens with `q` query tokens per head
        (GQA packed, rows = q * group); `causal_kv` is the KV a query row sees on average."""
        P = self.p
        xp = ns(n_kv)
        rows = q * self.group
        # a request streams at least `attn_min_kv` tokens' worth: a split's prologue (page-table
        # and first-page loads) is not hidden for a short request; the floor is convex, so a batch
        # of mixed lengths costs more than the same number of requests at the mean length. The KV
        # is read once per 128-row query tile.
        mem = ((xp.maximum(n_kv, P.attn_min_kv) + (self.page_size - 1)) // self.page_size) * \
            (((rows + P.q_tile_rows - 1) // P.q_tile_rows) * self.page_read_s)
        # flops: rows padded to MMA tiles; smoothmax with p = 2 (hypot: one op), no attention
        # measurement of our kernels to fit p to
        flop = ((rows + P.mma_rows - 1) // P.mma_rows) * (P.mma_rows * self.row_flop_s)
        sm = xp.hypot(mem, causal_kv * flop)
        return sm + ((n_kv + (P.split_tokens - 1)) // P.split_tokens) * P.attn_split_s + P.attn_req_s

    def full_attn(self, context, query):
        """All-layer seconds of full attention over `context` plus a causal tail of `query` tokens."""
        return self.L * self._layer_attn(context + query, context + (query + 1) * 0.5, query)

    def draft_attn(self, context, budget, method, pos):
        """All-layer seconds of one draft token, per request (arrays of one shape, or numbers)."""
        xp = ns(context)
        sparse = xp.minimum(budget, context) + pos + 1
        t_sparse = self._layer_attn(sparse, sparse, 1)
        # page scoring: the first draft of a run (VERIFY_*), or every step (STEP_QUEST)
        score = xp.pick(self._score_t, method, xp.minimum(pos, 1))
        t = self.L * t_sparse + score * ((context + (self.page_size - 1)) // self.page_size)
        if xp.any(method == DraftMethod.STEP_LAYER):  # the designated layer reads all the KV
            full = context + pos + 1
            t = t + xp.where(method == DraftMethod.STEP_LAYER, self._layer_attn(full, full, 1) - t_sparse, 0.0)
        return t

    # ---- the CostModel protocol ----
    # A small plan's requests are priced one at a time on Python numbers: numpy costs ~1 us per
    # vector op whatever the length, so below ~64 requests plain float math is several times faster.
    SCALAR_MAX = 64  # measured crossover ~80 requests (benchmarks/results/cost_model_check.json)

    def time(self, plan: PassPlan) -> float:
        scalar = len(plan.prefill_ids) + len(plan.draft_ids) + len(plan.verify_ids) <= self.SCALAR_MAX
        b, m = plan.draft_budget, plan.draft_method
        total = fold(0.0, self.full_attn, scalar, plan.prefill_context, plan.prefill_tokens)
        total = fold(total, lambda c, pos: self.draft_attn(c, b, m, pos), scalar, plan.draft_context, plan.draft_pos)
        total = fold(total, self.full_attn, scalar, plan.verify_context, plan.verify_query)
        nq = int(plan.verify_query.sum())
        tokens = len(plan.draft_ids) + int(plan.prefill_tokens.sum()) + nq
        if tokens == 0:
            return 0.0
        # one logits row per prefill chunk (its last token)
        return self.pass_overhead(tokens, num_logits=len(plan.draft_ids) + len(plan.prefill_ids) + nq) + total

    # ---- lookup tables (policies' marginal grids and the simulator's segment pricing) ----
    # A decode segment prices every (pass, request) from small integers: context, query tokens,
    # draft position (budget and method are fixed per run). The prices are pure functions of
    # them, so they are tabulated with the same vector formulas (bit-identical entries) and a
    # segment costs a few gathers instead of ~40 vector ops over (passes, requests): what the
    # simulator pays per segment, ~200 us, dominated by numpy's per-call overhead.
    # Tables grow to the longest context seen (power-of-two widths), so short traces stay small.
    # They are laid out [context, q]: a request's candidates (q = 1..k+1) share cache lines, where
    # [q, context] rows sit megabytes apart and every lookup missed the cache at long contexts.
    TABLE_MAX_Q = 64  # larger verify queries (or draft positions) fall back to the formulas
    TABLE_MAX_CONTEXT = 1 << 18  # 18 rows of 256K contexts are ~40 MB: beyond, the formulas

    def tables_fit(self, width: int, rows: int) -> bool:
        """Make the tables cover contexts < width and query / position rows < rows, if allowed."""
        if width <= self._tbl_width and rows <= self._tbl_rows:
            return True
        if width > self.TABLE_MAX_CONTEXT or rows > self.TABLE_MAX_Q:
            return False
        if rows > self._tbl_rows:  # more columns (rare: larger drafts): rebuild on next use
            self._tbl_rows = max(rows, 18)
            self._verify_tbl, self._draft_tbls = None, {}
        w = max(self._tbl_width, 4096)
        while w < width:
            w *= 2
        self._tbl_width = w  # existing tables are extended on their next use
        return True

    def _extended(self, tbl: np.ndarray | None, block) -> np.ndarray:
        """`tbl` with rows for the contexts it lacks below the current width, from `block(c)`."""
        have = 0 if tbl is None else len(tbl)
        if have >= self._tbl_width:
            return tbl
        new = block(np.arange(have, self._tbl_width, dtype=np.int64))
        return new if tbl is None else np.concatenate([tbl, new])

    def verify_table(self) -> np.ndarray:
        """[context, q] -> full_attn(context, q); q = 0 (not verifying) is 0."""
        def block(c):
            out = np.zeros((len(c), self._tbl_rows))
            for q in range(1, self._tbl_rows):  # one q at a time: small temporaries
                out[:, q] = self.full_attn(c, np.full_like(c, q))
            return out

        self._verify_tbl = self._extended(self._verify_tbl, block)
        return self._verify_tbl

    def draft_table(self, budget: int, method: int) -> np.ndarray:
        """[context, draft_pos] -> draft_attn(context, budget, method, draft_pos)."""
        def block(c):
            b, m = np.full_like(c, budget), np.full_like(c, method)
            out = np.empty((len(c), self._tbl_rows))
            for pos in range(self._tbl_rows):
                out[:, pos] = self.draft_attn(c, b, m, np.full_like(c, pos))
            return out

        tbl = self._draft_tbls[(budget, method)] = self._extended(self._draft_tbls.get((budget, method)), block)
        return tbl

    def overhead_table(self, tokens: int) -> np.ndarray:
        """[tokens] -> overhead_vec(tokens, tokens), covering at least `tokens`."""
        if len(self._ovh_tbl) <= tokens:
            n = max(2 * len(self._ovh_tbl), tokens + 1, 1024)
            t = np.arange(n, dtype=np.int64)
            self._ovh_tbl = self.overhead_vec(t, t)
        return self._ovh_tbl

    def tables(self, budget: int, method: int, width: int, rows: int):
        if not self.tables_fit(width, rows):
            return None
        return self.draft_table(budget, method), self.verify_table()

    def times(self, batch: PlanBatch) -> np.ndarray:
        """`time` of every pass of a batch in a few vector operations: decode grids and plain runs
        from the lookup tables (bit-identical to the formulas), plans from the flat arrays."""
        if batch.form == "plain":
            return self._decode_times(batch.plain_context, batch.n)
        if batch.form == "decode":
            return self._grid_times(batch)
        return self._flat_times(batch)

    def _flat_times(self, batch: PlanBatch) -> np.ndarray:
        att = pass_sums(batch.n, (batch.pre_of, self.full_attn(batch.pre_ctx, batch.pre_q)),
                         (batch.dr_of, self.draft_attn(batch.dr_ctx, batch.dr_budget, batch.dr_method, batch.dr_pos)),
                         (batch.ver_of, self.full_attn(batch.ver_ctx, batch.ver_q)))
        return np.where(batch.tokens > 0, self.overhead_vec(batch.tokens, batch.logits) + att, 0.0)

    def _grid_times(self, seg: PlanBatch) -> np.ndarray:
        kind, ctx = seg.kind, seg.context
        draft, verify = kind == PlanBatch.DRAFT, kind == PlanBatch.VERIFY
        q = np.where(verify, seg.query, 0)
        has_draft, rows = seg.drafting(draft, q)
        if not self.tables_fit(int(ctx.max()) + 1, rows):
            return self._grid_formula(seg)
        att = self.verify_table()[ctx, q]
        if has_draft:
            att = np.where(draft, self.draft_table(seg.budget, seg.method)[ctx, seg.draft_pos], att)
        tokens = q.sum(axis=1) + draft.sum(axis=1)
        return self.overhead_table(int(tokens.max()))[tokens] + att.sum(axis=1)

    def _decode_times(self, context: list[int], n: int) -> np.ndarray:
        """From slices of the q = 1 column: no (n, r) arrays. Below 8 requests numpy's row sum is
        a left fold (its pairwise sum starts at 8 terms), so slices added in order give the same
        bits."""
        r = len(context)
        if not self.tables_fit(max(context) + n, 2):
            return self._grid_formula(PlanBatch.plain(context, n))
        v = self.verify_table()[:, 1]
        if r < 8:
            c = context[0]
            att = v[c:c + n]
            for c in context[1:]:
                att = att + v[c:c + n]
        else:
            att = v[np.asarray(context, np.int64) + np.arange(n, dtype=np.int64)[:, None]].sum(axis=1)
        return self.overhead_table(r)[r] + att

    def _grid_formula(self, seg: PlanBatch) -> np.ndarray:
        """`_grid_times` without tables (the definition the tables reproduce)."""
        kind, ctx = seg.kind, seg.context
        draft, verify = kind == PlanBatch.DRAFT, kind == PlanBatch.VERIFY
        q = np.where(verify, seg.query, 0)
        att = np.where(verify, self.full_attn(ctx, q), 0.0)
        if draft.any():
            att = att + np.where(draft, self.draft_attn(ctx, seg.budget, seg.method, seg.draft_pos), 0.0)
        tokens = q.sum(axis=1) + draft.sum(axis=1)
        return self.overhead_vec(tokens, tokens) + att.sum(axis=1)

    def spec_overhead(self, method: int) -> tuple[float, float, float, float]:
        """(drafting pass, first-draft pass, verifying pass, mixed pass) once-per-pass seconds: the
        roofline prices speculation per request only."""
        return 0.0, 0.0, 0.0, 0.0

    def marginal(self, context, budget: int, method: int, query, draft_pos=None):
        """Attention seconds a request adds when it drafts one token (at `draft_pos`, default 0)
        with the run's `budget` and `method`, and when it verifies `query` tokens; the shared
        linear part is `pass_overhead`."""
        context, query = np.asarray(context, dtype=np.int64), np.asarray(query, dtype=np.int64)
        b, m = int(budget), int(method)
        scalar = context.ndim == 1 and len(context) <= self.SCALAR_MAX
        if (draft_pos is None and not scalar and context.shape == query.shape
                and self.tables_fit(int(context.max()) + 1, int(query.max()) + 1)):
            # policies' (request, k) grids (first draft of a run): table lookups
            return self.draft_table(b, m)[context, 0], self.verify_table()[context, query]
        pos = np.zeros_like(context) if draft_pos is None else np.asarray(draft_pos, dtype=np.int64)
        if scalar:  # (one at a time on Python numbers: see SCALAR_MAX)
            cl = context.tolist()
            return (np.array([self.draft_attn(c, b, m, p) for c, p in zip(cl, pos.tolist())]),
                    np.array([self.full_attn(c, q) for c, q in zip(cl, query.tolist())]))
        return self.draft_attn(context, b, m, pos), self.full_attn(context, query)

    def kv_capacity_pages(self, reserve_frac: float | None = None, selection_metadata: bool = True) -> int:
        """KV pages a replica holds with this model's GPU, model, tp, dtypes and page size (works for
        a profile's own GPU and model even when they are not in the catalogs)."""
        kw = {} if reserve_frac is None else {"reserve_frac": reserve_frac}
        return kv_capacity_pages(self.model, self.gpu, self.page_size, self.kv_dtype, self.weight_dtype, self.tp,
                                 selection_metadata=selection_metadata, **kw)

    # ---- metadata and profiles ----
    def metadata(self) -> dict:
        from datetime import datetime, timezone
        from importlib import metadata as im

        def ver(pkg):
            try:
                return im.version(pkg)
            except im.PackageNotFoundError:
                return None

        return {
            "cost_model": self.name, "gpu_name": self.gpu.name, "model_name": self.model.name,
            "gpu": self.gpu.to_dict(), "model": self.model.to_dict(), "tp": self.tp,
            "weight_dtype": self.weight_dtype, "kv_dtype": self.kv_dtype, "page_size": self.page_size,
            "params": asdict(self.p), "versions": {p: ver(p) for p in ("spsim", "numpy", "torch", "triton")},
            "kernel_version": None,  # analytic: no kernels measured
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "fit_error": fit_error(self.p),
        }

    def to_profile(self) -> dict:
        """JSON-able profile; `load_cost_model` rebuilds the same model from it."""
        return {"spsim_cost_profile": 1, "kind": self.name, "metadata": self.metadata()}

    @classmethod
    def from_profile(cls, prof: dict) -> "RooflineCostModel":
        md = prof["metadata"]
        return cls(ModelConfig.from_dict(md["model"]), GPU.from_dict(md["gpu"]), tp=md["tp"],
                   weight_dtype=md["weight_dtype"], kv_dtype=md["kv_dtype"], page_size=md["page_size"],
                   params=RooflineParams(**md["params"]))

    def with_params(self, **kw) -> "RooflineCostModel":
        return RooflineCostModel(self.model, self.gpu, self.tp, self.weight_dtype, self.kv_dtype, self.page_size,
                                 replace(self.p, **kw), check_memory=False)


def fit_error(params: RooflineParams | None = None) -> dict:
    """Relative error of the linear part (host overhead excluded: the measurement had none) against
    the H200 8B per-pass measurements, each pass computing logits for all its tokens."""
    cm = RooflineCostModel("llama-3.1-8b", "h200", params=params or RooflineParams())
    rel = []
    for n, y in H200_8B_PASS_S.items():
        rel.append((cm.pass_overhead(n) - cm.p.host_overhead_s) / y - 1)
    r = np.asarray(rel)
    return {"reference": "H200 Llama-3.1-8B shape per-pass times, 1-512 tokens (docs/anchors.md)",
            "max_abs_rel": float(np.abs(r).max()), "rms_rel": float(math.sqrt(float((r ** 2).mean()))),
            "per_point_rel": {str(k): round(float(v), 4) for k, v in zip(H200_8B_PASS_S, r)}}


def _load(prof: dict) -> RooflineCostModel:
    return RooflineCostModel.from_profile(prof)


from .profile import register_kind  # noqa: E402  (after the class it registers)

register_kind(RooflineCostModel.name, _load)
