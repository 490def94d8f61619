"""The one builder both worlds call: from a `ServingConfig` to what a replica runs.

`build(cfg, ...)` resolves the cost model, the acceptance model, the policy (its spec parsed
once), the draft-KV method, the KV capacity and the batcher's settings; `Serving.new_batcher()`
makes one batcher with its own bound policy per replica (or per GPU on the runtime), and
`arrived`/`done` keep the acceptance model's per-request state. `spsim replay` (simulator) and
`spsim run` (runtime) both go through here, so the same settings make the same decisions.
Imports neither simpy nor torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ServingConfig
from .plan import DraftMethod
from .policies.base import PolicyContext
from .policies.batcher import Batcher, BatcherConfig
from .policies.kv import KVPool
from .policies.registry import PolicySpec, parse_policy
from .policies.request import RequestTable


def build_cost_model(cfg: ServingConfig):
    from .cost import load_cost_model, make_cost_model

    if cfg.profile:  # measured for another model than the run's: an error, not a silent mix
        return load_cost_model(cfg.profile, expect={"tp": cfg.tp, "model_name": _model_name(cfg.model)})
    if cfg.cost == "auto":  # a profile measured on this GPU for this model, where spsim ships one
        from .cost.shipped import shipped_cost_model

        cm = shipped_cost_model(cfg)
        if cm is not None:
            return cm
    return make_cost_model(model=cfg.model, gpu=cfg.gpu, tp=cfg.tp, weight_dtype=cfg.weight_dtype,
                           kv_dtype=cfg.kv_dtype, page_size=cfg.page_size)


def _model_name(name: str) -> str:
    """The catalog's name for `--model` (aliases resolved); an unknown name as given."""
    from .errors import SpsimError
    from .models import get_model

    try:
        return get_model(name).name
    except SpsimError:
        return name


def build_acceptance(cfg: ServingConfig):
    from .acceptance import DEFAULT_ACCEPTANCE, make_acceptance

    return make_acceptance(cfg.acceptance or DEFAULT_ACCEPTANCE, cfg.seed)


def arrival_times(trace, cfg: ServingConfig) -> np.ndarray:
    """When each request arrives, in seconds from the start, under the run's load mode: the
    trace's own times, rescaled to `--qps`, or all at 0 (`--offline`, and `--concurrency`, whose
    requests are released as others finish)."""
    from .errors import SpsimError

    arr = np.asarray(trace.arrival_s, np.float64)
    if cfg.offline or cfg.concurrency:
        return np.zeros(len(arr))
    if cfg.qps:
        span = arr[-1] - arr[0] if len(arr) > 1 else 0.0
        if span <= 0:
            raise SpsimError("--qps needs a trace whose arrivals span some time (use --offline)")
        native = (len(arr) - 1) / span
        return (arr - arr[0]) * (native / cfg.qps)
    return arr - arr[0]


def kv_capacity(cfg: ServingConfig, cost, page_size: int) -> int:
    """KV pages per replica: `--kv-pages`, else what the cost model's GPU holds beside the weights."""
    from .memory import kv_capacity_pages
    from .models import get_model

    if cfg.kv_pages:
        return int(cfg.kv_pages)
    kw = {} if cfg.reserve_frac is None else {"reserve_frac": cfg.reserve_frac}
    pages = cost.kv_capacity_pages(**kw)
    if pages is not None:
        return int(pages)
    model = cost.model or get_model(cfg.model)  # a model that knows no GPU: the config's
    return int(kv_capacity_pages(model, cfg.gpu, page_size, cfg.kv_dtype, cfg.weight_dtype, cfg.tp, **kw))


@dataclass
class Serving:
    cfg: ServingConfig
    cost: object
    acceptance: object | None
    policy: PolicySpec
    method: int  # DraftMethod code the drafts use
    batcher_config: BatcherConfig

    def new_batcher(self, table: RequestTable, prefix_indptr: np.ndarray | None = None,
                    prefix_ids: np.ndarray | None = None, pool_cls: type[KVPool] = KVPool) -> Batcher:
        """One batcher with its own policy; `pool_cls`: `PagedKVPool` where pages need identities."""
        policy = self.policy.make()
        policy.bind(PolicyContext(self.cost, self.acceptance if policy.oracle else None))
        return Batcher(self.batcher_config, table, policy, prefix_indptr, prefix_ids, pool_cls)

    @property
    def want_entropy(self) -> bool:
        return self.policy.cls.needs_entropy

    def arrived(self, rid: int, table: RequestTable) -> None:
        if self.acceptance is not None:
            self.acceptance.begin(rid, int(table.prompt[rid]), int(table.output[rid]))

    def done(self, rid: int) -> None:
        if self.acceptance is not None:
            self.acceptance.end(rid)


def draft_method(cfg: ServingConfig, spec: PolicySpec) -> int:
    """The run's draft-KV method: `--draft-kv`, else the policy's own."""
    return int(spec.cls.default_draft_method if cfg.draft_kv == "auto" else DraftMethod.parse(cfg.draft_kv))


def build(cfg: ServingConfig, *, prefix_cache: bool = True, block_size: int | None = None, cost=None,
          acceptance=None, capacity: int | None = None, max_context: int | None = None) -> Serving:
    """Wire a run. `prefix_cache`: whether the trace carries prefix blocks (`block_size` tokens
    each); `cost`, `acceptance`: prebuilt models (else from `cfg`); `capacity`: KV pages actually
    allocated (the runtime's pool), else from memory; `max_context`: the model's window, else the
    cost model's."""
    from .models import get_model

    cfg.validate()
    spec = parse_policy(cfg.policy)
    cost = cost if cost is not None else build_cost_model(cfg)
    if acceptance is None and cfg.acceptance != "real":
        acceptance = build_acceptance(cfg)
    if spec.cls.oracle and acceptance is None:
        from .errors import SpsimError

        raise SpsimError(f"policy {spec.name!r} reads the acceptance model's outcomes: give a preset "
                         "(--acceptance PRESET), not real acceptance")
    model = cost.model or get_model(cfg.model)
    page_size = int(cfg.page_size if cost.page_size is None else cost.page_size)
    method = draft_method(cfg, spec)
    bcfg = BatcherConfig(
        capacity_pages=int(capacity if capacity is not None else kv_capacity(cfg, cost, page_size)),
        max_context=int(max_context or model.max_context), max_batch=cfg.max_batch,
        token_budget=cfg.token_budget, page_size=page_size, draft_method=method,
        draft_budget=cfg.draft_budget, max_draft=cfg.max_draft if spec.cls.speculative else 0,
        prefix_cache=cfg.prefix_cache and prefix_cache, block_size=block_size or 512)
    return Serving(cfg, cost, acceptance, spec, method, bcfg)
