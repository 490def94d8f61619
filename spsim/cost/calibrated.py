"""A cost model fitted to pass times measured on a GPU: the roofline's structure with fitted
constants, plus the terms the real runtime pays and the analytic model leaves out.

    pass = roofline pass (its formulas, its constants fitted: `RooflineParams`)
         + weights' read time and the attention's KV read time each scaled by a fitted factor
           (the kernels' own effective bandwidths, not the copy benchmark's)
         + eager_pass_s               once, if it holds a prefill chunk (never replayed from a
                                      CUDA graph: ~800 kernel launches)
         + draft_pass_s[method]       once, if it holds drafts (selection kernels, host work)
         + verify_req_s               per verifying request (sampling, acceptance on the host)
         + draft_req_s[method][later] per drafting request
         + draft_page_s[method][later] x context pages, per drafting request: page scoring, page
           tables, top-k, split counts: what makes a draft at a fixed budget cost more at a longer
           context (measured ~2x from 32K to 128K at batch 8 on the H200)
         + first_pass_s[method]       once, if it holds a run's first draft (the verify-refreshed
                                      methods select their pages then: scoring, top-k per layer)
         + spec_pass_s                once, if it verifies drafts (a query > 1: the acceptance
                                      path; +2.3 ms on the H200 whatever the batch)
         + tile_row_s[tile] x sum over its requests of (tile rows x causal KV tokens) x layers,
           in a pass without prefill: the attention kernel runs the whole pass with one tile
           height, fitted to the pass's tallest query (16/32/64/128 rows for 4/8/16/32+ tokens of
           an 8B GQA group), so a draft beside a 9-token verification computes 64-row tiles;
           each tile shape has its own speed (the runtime's SHORT/TALL/PREFILL_TILE). 16-row
           tiles are the roofline's own attention flops (no term).
`later`: 0 for a run's first draft (draft_pos == 0), 1 after; methods refreshed at verification
select on the first draft only. With every extra term 0 and both scales 1 this is the roofline.

It is a `RooflineCostModel`, so the policies' grids and the simulator's segment pricing use the
roofline's lookup tables, which are built from the overridden per-request formulas; a decode
segment's passes add their drafts' per-pass term (`segment_times`; prefill is never in one). `spsim.calibration.fit` fits the params.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from spsim.hardware import GPU
from spsim.models import ModelConfig
from spsim.plan import DraftMethod, PassPlan

from .roofline import RooflineCostModel, RooflineParams

N_METHODS = len(DraftMethod)
TILES = (16, 32, 64, 128)  # the attention kernel's tile heights (gpu_runtime/attention.choose_block_m)
_ZEROS = (0.0,) * N_METHODS
_ZEROS2 = ((0.0, 0.0),) * N_METHODS


@dataclass(frozen=True)
class CalibratedParams(RooflineParams):
    weight_scale: float = 1.0  # weights' read time / the roofline's
    attn_bw_scale: float = 1.0  # attention's KV page read time / the roofline's
    eager_pass_s: float = 0.0  # per pass holding a prefill chunk (run eager: no CUDA graph)
    verify_req_s: float = 0.0  # per verifying request
    draft_pass_s: tuple = _ZEROS  # [method]: per pass holding drafts
    draft_req_s: tuple = _ZEROS2  # [method][later]: per drafting request
    draft_page_s: tuple | None = None  # [method][later]: per context page; None: the roofline's scoring
    first_pass_s: tuple = _ZEROS  # [method]: per pass holding a run's first draft (selection)
    spec_pass_s: float = 0.0  # per pass verifying drafts (a query > 1)
    tile_row_s: tuple = (0.0, 0.0, 0.0)  # [32, 64, 128-row tiles]: per tile row per causal KV token per layer

    @classmethod
    def from_dict(cls, d: dict) -> "CalibratedParams":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown params {sorted(unknown)}")
        kw = dict(d)
        for k in ("draft_pass_s", "first_pass_s", "tile_row_s"):
            if k in kw:
                kw[k] = tuple(float(x) for x in kw[k])
        for k in ("draft_req_s", "draft_page_s"):
            if kw.get(k) is not None:
                kw[k] = tuple(tuple(float(x) for x in row) for row in kw[k])
        p = cls(**kw)
        p.check()
        return p

    def check(self) -> None:
        if len(self.tile_row_s) != len(TILES) - 1:
            raise ValueError(f"tile_row_s has one entry per tile height {TILES[1:]}")
        if len(self.draft_pass_s) != N_METHODS or len(self.draft_req_s) != N_METHODS or \
                len(self.first_pass_s) != N_METHODS or \
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
                 params: CalibratedParams | None = None, check_memory: bool = True, info: dict | None = None,
                 table_q: int | None = None):
        """`info`: the profile's measurement metadata (GPU, versions, points, errors, KV pages).
        `table_q`: query lengths the attention tables cover (default the context window; the fit
        builds thousands of models and prices queries of at most a prefill chunk)."""
        params = params or CalibratedParams()
        if not isinstance(params, CalibratedParams):
            params = CalibratedParams(**asdict(params))
        self._defer_tables = True  # built once below, after the scales
        super().__init__(model, gpu, tp, weight_dtype, kv_dtype, page_size, params, check_memory)
        P = self.p
        self.info = dict(info or {})
        self.weights_s *= P.weight_scale
        self.page_read_s *= P.attn_bw_scale
        self._defer_tables = False
        self._build_tables(min(self.model.max_context, table_q or self.model.max_context))
        if P.draft_page_s is not None:
            self.score_tbl = np.asarray(P.draft_page_s, dtype=np.float64).reshape(N_METHODS, 2)
            self._score_rows = self.score_tbl.tolist()
        self.req_tbl = np.asarray(P.draft_req_s, dtype=np.float64).reshape(N_METHODS, 2)
        self._req_rows = self.req_tbl.tolist()
        self.draft_pass = np.asarray(P.draft_pass_s, dtype=np.float64)
        self._draft_pass_list = self.draft_pass.tolist()
        self.first_pass = np.asarray(P.first_pass_s, dtype=np.float64)
        self._first_pass_list = self.first_pass.tolist()
        # [tile class] -> seconds per tile row per causal KV token, all layers (16 rows: none)
        self.tile = self.L * np.asarray((0.0,) + tuple(P.tile_row_s), dtype=np.float64)
        self._tile_list = self.tile.tolist()
        self._tiles = bool(self.tile.any())
        # tallest query (tokens) -> tile class, as choose_block_m: rows = min(q, 128 // group) * group
        cap = max(1, 128 // self.group)
        q = np.arange(cap + 1)
        need = np.maximum(q, 1) * self.group
        bm = np.clip(1 << np.ceil(np.log2(need)).astype(np.int64), TILES[0], TILES[-1])
        self._tile_cls = np.searchsorted(np.asarray(TILES), bm).astype(np.int64)
        self._tile_bm = np.asarray(TILES, np.int64)[self._tile_cls]
        self._tile_cap = cap

    def _build_tables(self, qmax: int) -> None:
        if not self._defer_tables:
            super()._build_tables(qmax)

    # ---- per-request terms (vector formulas; the tables are built from these) ----
    def prefill_attn(self, context, query):
        return RooflineCostModel.full_attn(self, context, query)

    def full_attn(self, context, query):
        """A verifying request: the roofline's full attention plus its per-request cost."""
        return RooflineCostModel.full_attn(self, context, query) + self.p.verify_req_s

    def draft_attn(self, context, budget, method, pos):
        t = RooflineCostModel.draft_attn(self, context, budget, method, pos)
        return t + self.req_tbl[method, np.minimum(pos, 1)]

    # scalar twins (same operations in the same order)
    def _verify1(self, c: int, q: int) -> float:
        return self.L * self._layer1(c + q, c + (q + 1) * 0.5, q) + self.p.verify_req_s

    def _draft1(self, c: int, b: int, m: int, pos: int) -> float:
        return RooflineCostModel._draft1(self, c, b, m, pos) + self._req_rows[m][1 if pos > 0 else 0]

    # ---- per-pass terms ----
    def pass_terms(self, has_prefill: bool, methods) -> float:
        """Seconds a pass pays once: eager launches (a prefill chunk) and its drafts' selection
        (the largest of the methods present; a runtime uses one)."""
        t = self.p.eager_pass_s if has_prefill else 0.0
        return t + max(self._draft_pass_list[m] for m in methods) if len(methods) else t

    # ---- the CostModel protocol ----
    def time(self, plan: PassPlan) -> float:
        n_pre, n_dr, n_ver = len(plan.prefill_ids), len(plan.draft_ids), len(plan.verify_ids)
        scalar = n_pre + n_dr + n_ver <= self.SCALAR_MAX
        total = 0.0
        tokens = n_dr
        logits = n_dr + n_pre
        if n_pre:
            t = plan.prefill_tokens
            if scalar:
                L, f = self.L, self._layer1
                for c, q in zip(plan.prefill_context.tolist(), t.tolist()):
                    total += L * f(c + q, c + (q + 1) * 0.5, q)
            else:
                total += float(self.prefill_attn(plan.prefill_context, t).sum())
            tokens += int(t.sum())
        methods = ()
        if n_dr:
            if scalar:
                f = self._draft1
                ml = plan.draft_method.tolist()
                for c, b, m, pos in zip(plan.draft_context.tolist(), plan.draft_budget.tolist(), ml,
                                        plan.draft_pos.tolist()):
                    total += f(c, b, m, pos)
                methods = set(ml)
            else:
                total += float(self.draft_attn(plan.draft_context, plan.draft_budget, plan.draft_method,
                                                plan.draft_pos).sum())
                methods = np.unique(plan.draft_method).tolist()
        if n_ver:
            if scalar:
                f = self._verify1
                nq = 0
                for c, q in zip(plan.verify_context.tolist(), plan.verify_query.tolist()):
                    total += f(c, q)
                    nq += q
            else:
                q = plan.verify_query
                total += float(self.full_attn(plan.verify_context, q).sum())
                nq = int(q.sum())
            tokens += nq
            logits += nq
        if tokens == 0:
            return 0.0
        t = self.pass_overhead(tokens, num_logits=logits) + total + self.pass_terms(n_pre > 0, methods)
        if n_dr:
            pos0 = plan.draft_pos == 0
            if pos0.any():
                t += max(self._first_pass_list[m] for m in set(plan.draft_method[pos0].tolist()))
        if n_ver and int(plan.verify_query.max()) > 1:
            t += self.p.spec_pass_s
        if self._tiles and not n_pre:
            t += self._tile1(plan)
        return t

    def _tile1(self, plan: PassPlan) -> float:
        """The pass's tile-height term (see the module docstring)."""
        g, cap = self.group, self._tile_cap
        vq = plan.verify_query.tolist()
        qmax = max(vq) if vq else 1
        c = int(self._tile_cls[min(qmax, cap)])
        bm = TILES[c]
        qb = bm // g
        rows = 0.0
        for cx, q in zip(plan.verify_context.tolist(), vq):
            rows += (cx + (q + 1) * 0.5) * (((q + qb - 1) // qb) * bm)
        if len(plan.draft_ids):
            sparse = np.minimum(plan.draft_budget, plan.draft_context) + plan.draft_pos + 1
            rows += float(sparse.sum()) * bm  # one query token: one tile
        return self._tile_list[c] * rows

    def pass_overhead(self, num_tokens: int, prefill_tokens: int = 0, *, num_logits: int | None = None) -> float:
        t = super().pass_overhead(num_tokens, prefill_tokens, num_logits=num_logits)
        return t + self.p.eager_pass_s if prefill_tokens > 0 else t

    def marginal(self, context, budget, method, query, draft_pos=None):
        context, budget, method, query = (np.asarray(a, dtype=np.int64) for a in (context, budget, method, query))
        if context.ndim == 1 and len(context) <= self.SCALAR_MAX:
            pos = np.zeros_like(context) if draft_pos is None else np.asarray(draft_pos, dtype=np.int64)
            g, v = self._draft1, self._verify1
            cl = context.tolist()
            d = [g(c, b, m, p) for c, b, m, p in zip(cl, budget.tolist(), method.tolist(), pos.tolist())]
            return np.array(d), np.array([v(c, q) for c, q in zip(cl, query.tolist())])
        return super().marginal(context, budget, method, query, draft_pos)  # tables / vector formulas

    # ---- many passes at once (the simulator's segments; the fit's design matrix) ----
    def segment_times(self, seg) -> np.ndarray:
        """The roofline's table pricing (from this model's per-request formulas) plus the per-pass
        terms of passes holding drafts. Simulator only: imports it."""
        from spsim.simulator.segment_cost import RooflineSegments

        t = RooflineSegments(self).segment_times(seg)
        draft = seg.kind == type(seg).DRAFT
        verify = seg.kind == type(seg).VERIFY
        if draft.any():  # no prefill here
            t = t + np.where(draft, self.draft_pass[seg.method][None, :], 0.0).max(axis=1)
            t = t + np.where(draft & (seg.draft_pos == 0), self.first_pass[seg.method][None, :], 0.0).max(axis=1)
        q = np.where(verify, seg.query, 0)
        qmax = q.max(axis=1)
        if self.p.spec_pass_s:
            t = t + np.where(qmax > 1, self.p.spec_pass_s, 0.0)
        if self._tiles:
            cls = self._tile_cls[np.minimum(np.maximum(qmax, 1), self._tile_cap)]
            bm = self._tile_bm[np.minimum(np.maximum(qmax, 1), self._tile_cap)][:, None]
            qb = bm // self.group
            rows = np.where(verify, (seg.context + (q + 1) * 0.5) * (((q + qb - 1) // qb) * bm), 0.0)
            if draft.any():
                sparse = np.minimum(seg.budget[None, :], seg.context) + seg.draft_pos + 1
                rows = rows + np.where(draft, sparse * bm, 0)
            t = t + self.tile[cls] * rows.sum(axis=1)
        return t

    def decode_times(self, context: list[int], n: int) -> np.ndarray:
        from spsim.simulator.segment_cost import RooflineSegments

        return RooflineSegments(self).decode_times(context, n)  # no drafts, no prefill: no pass terms

    def times(self, batch: "PlanBatch") -> np.ndarray:
        """`time(plan)` of many plans at once (vector formulas; the fit calls this per step)."""
        n = batch.n
        att = np.zeros(n)
        if len(batch.pre_of):
            att += np.bincount(batch.pre_of, self.prefill_attn(batch.pre_ctx, batch.pre_q), n)
        if len(batch.dr_of):
            att += np.bincount(batch.dr_of, self.draft_attn(batch.dr_ctx, batch.dr_budget, batch.dr_method,
                                                             batch.dr_pos), n)
        if len(batch.ver_of):
            att += np.bincount(batch.ver_of, self.full_attn(batch.ver_ctx, batch.ver_q), n)
        lin = self.overhead_vec(batch.tokens, batch.logits)
        per = np.zeros(n)
        np.maximum.at(per, batch.dr_of, self.draft_pass[batch.dr_method])  # the largest method's (as time())
        first = np.zeros(n)
        f0 = batch.dr_pos == 0
        np.maximum.at(first, batch.dr_of[f0], self.first_pass[batch.dr_method[f0]])
        qmax = np.ones(n, np.int64)
        np.maximum.at(qmax, batch.ver_of, batch.ver_q)
        per = per + first + np.where(batch.has_prefill, self.p.eager_pass_s, 0.0) + \
            np.where(qmax > 1, self.p.spec_pass_s, 0.0)
        if self._tiles:
            qc = np.minimum(qmax, self._tile_cap)
            cls, bm = self._tile_cls[qc], self._tile_bm[qc]
            qb = bm // self.group
            vb, vq = bm[batch.ver_of], batch.ver_q
            rows = np.bincount(batch.ver_of, (batch.ver_ctx + (vq + 1) * 0.5) * (((vq + qb[batch.ver_of] - 1)
                                                                                // qb[batch.ver_of]) * vb), n)
            sparse = np.minimum(batch.dr_budget, batch.dr_ctx) + batch.dr_pos + 1
            rows = rows + np.bincount(batch.dr_of, sparse * bm[batch.dr_of], n)
            per = per + np.where(batch.has_prefill, 0.0, self.tile[cls] * rows)
        return lin + att + per

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


@dataclass
class PlanBatch:
    """Many plans as flat arrays (each group's requests, with the index of their plan): what
    `CalibratedCostModel.times` prices in a few vector operations."""

    n: int
    pre_of: np.ndarray
    pre_ctx: np.ndarray
    pre_q: np.ndarray
    dr_of: np.ndarray
    dr_ctx: np.ndarray
    dr_budget: np.ndarray
    dr_method: np.ndarray
    dr_pos: np.ndarray
    ver_of: np.ndarray
    ver_ctx: np.ndarray
    ver_q: np.ndarray
    tokens: np.ndarray
    logits: np.ndarray
    has_prefill: np.ndarray
    has_draft: np.ndarray

    @classmethod
    def of(cls, plans: list[PassPlan]) -> "PlanBatch":
        cat = lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64)  # noqa: E731
        idx = lambda f: cat([np.full(len(f(p)), i) for i, p in enumerate(plans)])  # noqa: E731
        n_pre = np.array([len(p.prefill_ids) for p in plans], np.int64)
        n_dr = np.array([len(p.draft_ids) for p in plans], np.int64)
        ver_tok = np.array([int(p.verify_query.sum()) for p in plans], np.int64)
        pre_tok = np.array([int(p.prefill_tokens.sum()) for p in plans], np.int64)
        return cls(
            len(plans), idx(lambda p: p.prefill_ids), cat([p.prefill_context for p in plans]),
            cat([p.prefill_tokens for p in plans]), idx(lambda p: p.draft_ids),
            cat([p.draft_context for p in plans]), cat([p.draft_budget for p in plans]),
            cat([p.draft_method for p in plans]), cat([p.draft_pos for p in plans]),
            idx(lambda p: p.verify_ids), cat([p.verify_context for p in plans]), cat([p.verify_query for p in plans]),
            tokens=pre_tok + n_dr + ver_tok, logits=n_pre + n_dr + ver_tok, has_prefill=n_pre > 0,
            has_draft=n_dr > 0)


def _load(prof: dict) -> CalibratedCostModel:
    return CalibratedCostModel.from_profile(prof)


from .profile import register_kind  # noqa: E402  (after the class it registers)

register_kind(CalibratedCostModel.name, _load)
