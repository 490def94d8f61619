"""Run a trace through replicas in simulated time and collect the metrics.

`simulate(trace, config)` wires everything: the cost model (clock), the acceptance model
(outcomes), one batcher + policy per replica, a router, and the arrival process in one of four
load modes: the trace's own times, rescaled to a QPS, offline (all at t=0), or a fixed number of
requests in flight (closed loop: a finish releases the next request).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import simpy

from spsim.errors import SpsimError
from spsim.metrics import RunResult

from .results import summarize
from spsim.plan import DraftMethod
from spsim.policies.batcher import Batcher, BatcherConfig
from spsim.policies.base import PolicyContext
from spsim.policies.registry import make_policy
from spsim.policies.request import RequestTable
from spsim.traces.trace import Trace

from .executor import SimExecutor
from .replica import Replica
from .router import ROUTERS


@dataclass
class SimConfig:
    policy: str = "aspire"
    model: str = "llama-3.1-8b"
    gpu: str = "h200"
    tp: int = 1
    profile: str | None = None  # a cost profile JSON replaces model/gpu pricing
    acceptance: str | None = None  # None: the embedded default preset
    replicas: int = 1
    router: str = "least-outstanding"
    seed: int = 0
    qps: float | None = None  # rescale arrivals to this rate
    offline: bool = False  # everything arrives at t=0
    concurrency: int | None = None  # closed loop with this many requests in flight
    max_batch: int = 256
    token_budget: int = 8192
    page_size: int = 16
    draft_kv: str = "auto"  # static | verify-refresh | step-refresh | auto (the policy's own)
    draft_budget: int = 2048  # tokens, sink and recent pages included
    max_draft: int = 16
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    prefix_cache: bool = True
    reserve_frac: float | None = None  # GPU memory kept back (activations, graphs); None: default
    kv_pages: int | None = None  # override the KV capacity (pages per replica)
    slo_ttft_s: float = 10.0  # goodput SLO where the trace gives none
    slo_tpot_s: float = 0.1
    fast: bool = True  # advance many decode passes per event where results are identical
    extra: dict = field(default_factory=dict)

    def with_(self, **kw) -> "SimConfig":
        return replace(self, **kw)


def build_cost_model(cfg: SimConfig):
    from .cost import load_cost_model, make_cost_model

    if cfg.profile:
        return load_cost_model(cfg.profile)
    return make_cost_model(model=cfg.model, gpu=cfg.gpu, tp=cfg.tp, weight_dtype=cfg.weight_dtype,
                           kv_dtype=cfg.kv_dtype, page_size=cfg.page_size)


def build_acceptance(cfg: SimConfig):
    from .acceptance import DEFAULT_ACCEPTANCE, make_acceptance

    return make_acceptance(cfg.acceptance or DEFAULT_ACCEPTANCE, cfg.seed)


def _arrivals(trace: Trace, cfg: SimConfig) -> np.ndarray:
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


def simulate(trace: Trace, cfg: SimConfig, cost=None, acceptance=None, progress=None) -> RunResult:
    """Replay `trace` under `cfg`. `progress(done, total)` is called now and then if given."""
    from spsim.memory import kv_capacity_pages
    from spsim.models import get_model

    if len(trace) == 0:
        raise SpsimError("the trace has no requests")
    if cfg.replicas < 1:
        raise SpsimError("--replicas must be >= 1")
    if cfg.concurrency is not None and cfg.concurrency < 1:
        raise SpsimError("--concurrency must be >= 1")
    if cfg.router not in ROUTERS:
        raise SpsimError(f"unknown router {cfg.router!r} (known: {', '.join(ROUTERS)})")
    cost = cost or build_cost_model(cfg)
    acc = acceptance or build_acceptance(cfg)
    # the cost model knows its own model, GPU, dtypes and page size (also for calibrated profiles)
    model = getattr(cost, "model", None) or get_model(cfg.model)
    page_size = int(getattr(cost, "page_size", cfg.page_size))
    kw = {} if cfg.reserve_frac is None else {"reserve_frac": cfg.reserve_frac}
    if cfg.kv_pages:
        capacity = cfg.kv_pages
    elif hasattr(cost, "kv_capacity_pages"):
        capacity = cost.kv_capacity_pages(**kw)
    else:
        capacity = kv_capacity_pages(model, cfg.gpu, page_size, cfg.kv_dtype, cfg.weight_dtype, cfg.tp, **kw)

    arrivals = _arrivals(trace, cfg)
    table = RequestTable(trace.prompt_tokens, trace.output_tokens, arrivals)
    env = simpy.Environment()
    probe = make_policy(cfg.policy)
    method = int(probe.default_draft_method if cfg.draft_kv == "auto" else DraftMethod.parse(cfg.draft_kv))
    max_draft = cfg.max_draft if probe.speculative else 0
    bcfg = BatcherConfig(capacity_pages=int(capacity), max_context=model.max_context, max_batch=cfg.max_batch,
                         token_budget=cfg.token_budget, page_size=page_size, draft_method=method,
                         draft_budget=cfg.draft_budget, max_draft=max_draft,
                         prefix_cache=cfg.prefix_cache and trace.prefix_indptr is not None,
                         block_size=trace.block_size or 512)
    n = len(trace)
    state = {"next": 0, "released": 0}

    replicas: list[Replica] = []
    for i in range(cfg.replicas):
        policy = make_policy(cfg.policy)
        policy.bind(PolicyContext(cost, max_draft, method, cfg.draft_budget, acc if policy.oracle else None))
        b = Batcher(bcfg, table, policy, trace.prefix_indptr, trace.prefix_ids)
        ex = SimExecutor(cost, acc, table, policy.needs_entropy)
        ex.configure(cfg.draft_budget, method)
        replicas.append(Replica(env, i, b, ex, fast=cfg.fast))
    router = ROUTERS[cfg.router]()

    def route(rid: int, now: float) -> None:
        r = replicas[router.pick(replicas)]
        acc.begin(rid, int(table.prompt[rid]), int(table.output[rid]))
        r.batcher.enqueue(rid, now)
        table.replica[rid] = r.index
        r.notify()

    def arrival_process():
        while state["next"] < n:
            i = state["next"]
            if arrivals[i] > env.now:
                yield env.timeout(arrivals[i] - env.now)
            state["next"] = i + 1
            route(i, env.now)

    def on_done(rid, now):
        acc.end(rid)
        if not cfg.concurrency:
            return
        nxt = state["released"]
        if nxt < n:
            state["released"] = nxt + 1
            table.arrival[nxt] = now
            route(nxt, now)

    for r in replicas:
        r.batcher.on_done = on_done
    if cfg.concurrency:
        first = min(cfg.concurrency, n)
        state["released"] = first
        for rid in range(first):
            route(rid, 0.0)
    else:
        env.process(arrival_process())

    if progress is not None:
        # a read-only monitor: one event per simulated chunk, negligible next to the passes
        def done() -> int:
            return sum(r.batcher.finished for r in replicas) + int((table.reject > 0).sum())

        step = max(1.0, float(arrivals[-1]) / 200)

        def monitor():
            while done() < n:
                yield env.timeout(step)
                progress(done(), n)

        env.process(monitor())
    env.run()
    return summarize(table, replicas, cfg, cost, trace)
