"""Many passes as one batch: what `CostModel.times` prices in one call.

Three constructors, one type. `of(plans)`: any plans, as each group's requests in flat arrays with
the index of their pass (`pre_of`, `dr_of`, `ver_of`), so a term per request is one vector formula
and a term per pass one `np.bincount` or `np.maximum.at` over the pass index. `decode(...)`: the
simulator's runs of pure-decode passes over the same requests, as dense (pass, request) grids
(`kind`, `query`, `context`, `draft_pos`) that a model with lookup tables prices in a few gathers.
`plain(context, n)`: n plain decode passes, known from the first pass's contexts alone (the
commonest run, priced without building its grids). A model reads the form it has a fast path for
(`form`); any other form is built from it on first use (grids from `plain`, plans and flat arrays
from grids), so a model pricing only flat arrays prices every batch.

The run's draft budget and method are one value per pass (`PassPlan.draft_budget`, `draft_method`):
repeated for each draft in the flat form, so that a batch of passes of different settings
(calibration's designs) prices alike; one scalar each in the grid form.
"""

from __future__ import annotations

import numpy as np

from spsim.plan import DraftMethod, PassPlan

I64 = np.int64
FLAT = ("pre_of", "pre_ctx", "pre_q", "dr_of", "dr_ctx", "dr_budget", "dr_method", "dr_pos", "ver_of", "ver_ctx",
        "ver_q", "tokens", "requests", "logits", "has_prefill", "has_draft", "keep_scores", "plans")
GRID = ("kind", "query", "context", "draft_pos")


class PlanBatch:
    """`n` passes, in one of three forms (`form`): "plans", "decode" (grids) or "plain".

    Grid form, per pass i and request j: `kind[i, j]` is DRAFT, VERIFY or IDLE (not in the pass: a
    synchronous batch's request waiting for the batch's verification), `query[i, j]` the query
    tokens (1 for a draft), `context[i, j]` the KV tokens before that pass, `draft_pos[i, j]` the
    provisional drafted tokens held before that pass (PassPlan.draft_pos for drafts; for a verify,
    query - 1); `budget`, `method` the run's draft settings (method: verify-attn passes verifying
    keep page scores). Entry i of `times` must equal what the step path pays for the same pass.
    """

    DRAFT = 1
    VERIFY = 2
    IDLE = 0

    def __init__(self, n: int, form: str, budget: int = 0, method: int = 0, **arrays):
        self.n, self.form, self.budget, self.method = n, form, budget, method
        self.plain_context: list[int] | None = None
        self._ratios: dict | None = None
        self.__dict__.update(arrays)

    def __getattr__(self, name: str):
        """A form's arrays this batch was not built with, built once from the form it has."""
        form = self.__dict__.get("form")  # (absent while a copy is being built)
        if name in GRID and form == "plain":
            self.__dict__.update(self._plain_grid())
        elif name in FLAT and form in ("decode", "plain"):
            flat = PlanBatch.of(self._grid_plans())
            self.__dict__.update({k: getattr(flat, k) for k in FLAT})
        else:
            raise AttributeError(name)
        return self.__dict__[name]

    # ---- constructors ----
    @classmethod
    def of(cls, plans: list[PassPlan]) -> "PlanBatch":
        cat = lambda xs: np.concatenate(xs).astype(I64) if xs else np.zeros(0, I64)  # noqa: E731
        idx = lambda f: cat([np.full(len(f(p)), i) for i, p in enumerate(plans)])  # noqa: E731
        n_pre = np.array([len(p.prefill_ids) for p in plans], I64)
        n_dr = np.array([len(p.draft_ids) for p in plans], I64)
        ver_tok = np.array([int(p.verify_query.sum()) for p in plans], I64)
        pre_tok = np.array([int(p.prefill_tokens.sum()) for p in plans], I64)
        return cls(
            len(plans), "plans", pre_of=idx(lambda p: p.prefill_ids), pre_ctx=cat([p.prefill_context for p in plans]),
            pre_q=cat([p.prefill_tokens for p in plans]), dr_of=idx(lambda p: p.draft_ids),
            dr_ctx=cat([p.draft_context for p in plans]),
            dr_budget=np.repeat([p.draft_budget for p in plans], n_dr).astype(I64),
            dr_method=np.repeat([p.draft_method for p in plans], n_dr).astype(I64),
            dr_pos=cat([p.draft_pos for p in plans]), ver_of=idx(lambda p: p.verify_ids),
            ver_ctx=cat([p.verify_context for p in plans]), ver_q=cat([p.verify_query for p in plans]),
            tokens=pre_tok + n_dr + ver_tok, requests=n_pre + n_dr + np.array([len(p.verify_ids) for p in plans], I64),
            logits=n_pre + n_dr + ver_tok, has_prefill=n_pre > 0,
            has_draft=n_dr > 0, keep_scores=np.array([bool(p.keep_scores) for p in plans], bool), plans=list(plans))

    @classmethod
    def decode(cls, kind: np.ndarray, query: np.ndarray, context: np.ndarray, draft_pos: np.ndarray, budget: int,
               method: int) -> "PlanBatch":
        """`n` consecutive pure-decode passes over the same `r` requests, as (n, r) grids."""
        return cls(len(kind), "decode", budget, method, kind=kind, query=query, context=context, draft_pos=draft_pos)

    @classmethod
    def plain(cls, context: list[int], n: int) -> "PlanBatch":
        """n plain decode passes (every request verifies one token) from `context`."""
        b = cls(n, "plain")
        b.plain_context = context
        return b

    @classmethod
    def from_plan(cls, plan: PassPlan) -> "PlanBatch":
        """A one-pass grid from a plan without prefill, drafts first (tests use it)."""
        assert not len(plan.prefill_ids)
        nd = len(plan.draft_ids)
        kind = np.concatenate([np.full(nd, cls.DRAFT, np.int8), np.full(len(plan.verify_ids), cls.VERIFY, np.int8)])
        query = np.concatenate([np.ones(nd, I64), plan.verify_query])
        ctx = np.concatenate([plan.draft_context, plan.verify_context])
        dpos = np.concatenate([plan.draft_pos, plan.verify_query - 1])
        # the run's method, where it shows: its drafts, or verifications keeping page scores
        method = int(DraftMethod.VERIFY_ATTN) if plan.keep_scores else plan.draft_method if nd else 0
        return cls.decode(kind[None, :], query[None, :], ctx[None, :], dpos[None, :], plan.draft_budget, method)

    def head(self, n: int) -> "PlanBatch":
        """The first n passes of a grid batch."""
        return PlanBatch.decode(self.kind[:n], self.query[:n], self.context[:n], self.draft_pos[:n], self.budget,
                                self.method)

    def _plain_grid(self) -> dict:
        r, n = len(self.plain_context), self.n
        one = np.ones((n, r), I64)
        return {"kind": np.full((n, r), self.VERIFY, np.int8), "query": one,
                "context": np.asarray(self.plain_context, I64) + np.arange(n, dtype=I64)[:, None],
                "draft_pos": one - 1}

    def _grid_plans(self) -> list[PassPlan]:
        """Each pass of the grid as a plan (its requests numbered by column)."""
        out = []
        ids = np.arange(self.kind.shape[1], dtype=I64)
        for i in range(self.kind.shape[0]):
            d, v = self.kind[i] == self.DRAFT, self.kind[i] == self.VERIFY
            out.append(PassPlan(draft_ids=ids[d], draft_context=self.context[i][d], draft_pos=self.draft_pos[i][d],
                                draft_budget=self.budget, draft_method=self.method, verify_ids=ids[v],
                                verify_query=self.query[i][v], verify_context=self.context[i][v]))
        return out

    # ---- derived terms ----
    def drafting(self, draft: np.ndarray, q: np.ndarray) -> tuple[bool, int]:
        """Grid form: `(has_draft, rows)` for table lookups: whether any pass drafts, and the table
        rows the batch reads (`q`: the verify query tokens, 0 where none)."""
        if not draft.any():
            return False, int(q.max()) + 1
        return True, max(int(q.max()), int(self.draft_pos.max())) + 1

    def keeps(self, ruled=False) -> np.ndarray:
        """Plans whose pass keeps page scores (verify-attn runs, or drafts of that method beside
        them): those with a verification or a prefill chunk, or padded by the shape rule (`ruled`,
        per plan: it keeps them in every pass)."""
        n = self.n
        va = np.bincount(self.dr_of[self.dr_method == DraftMethod.VERIFY_ATTN], minlength=n) > 0
        if self.keep_scores is not None:
            va = va | self.keep_scores
        return va & ((np.bincount(self.ver_of, minlength=n) > 0) | self.has_prefill | ruled)

    def work_ratios(self, model) -> tuple[np.ndarray, np.ndarray]:
        """`plan_work_ratio` of every plan: its launch's, its split prefill chunks' (cached: they
        depend on no fitted constant but `attn_tail_bw`, whose launches are kept as parts and
        priced at the model's k: a fit tries many)."""
        P = model.p
        parts = bool(P.attn_tail_bw > 1 and P.attn_sms)
        key = (parts, model.group, model.model.kv_heads // model.tp, model.page_size, P.attn_sms,
               P.attn_item_tokens, P.prefill_split, P.padding, P.prefill_graph_tokens, P.rule_max_query)
        if self._ratios is None:
            self._ratios = {}
        got = self._ratios.get(key)
        if got is None:
            if len(self._ratios) >= 16:  # (a fit's search tries several attn_item_tokens)
                self._ratios.clear()
            got = self._ratios[key] = model.plan_work_parts(self.plans) if parts else \
                np.array([model.plan_work_ratio(p) for p in self.plans]).reshape(-1, 2).T
        if not parts:
            return got[0], got[1]
        r, tails = got
        if tails:
            r = r.copy()
            f = model.tail_ratio
            for j, i, ph, ideal in tails:
                r[j, i] = f(ph, ideal)
        return r[0], r[1]

    def split_prefill(self, model) -> np.ndarray:
        """`CalibratedCostModel.split_prefill` of every pass's prefill chunks (a mask over `pre_of`)."""
        if not model.p.prefill_split or not len(self.pre_of):
            return np.zeros(len(self.pre_of), bool)
        from .calibrated import TILES  # the calibrated model's rule (it alone splits prefill)

        ruled = model.ruled(self.tokens, self.requests)
        tall = (model.tile_class(self.pre_q) == len(TILES) - 1) | ruled[self.pre_of]
        return tall & ((np.bincount(self.pre_of[tall], minlength=self.n) < self.requests) | ruled)[self.pre_of]
