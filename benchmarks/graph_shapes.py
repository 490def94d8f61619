"""How many distinct CUDA-graph shapes a run's passes have, without a GPU.

    python3 benchmarks/graph_shapes.py [--workload 16x32768] [--policies fixed-k:k=4,aspire] [--output-tokens 128]
    python3 benchmarks/graph_shapes.py --trace azure-conv --window 45 --policies fixed-k:k=4 --coarse --rehearse

The runtime replays a pass from a CUDA graph only when a pass of the same shape came before
(`gpu_runtime/graphs.py`); a pass of a new shape runs eagerly (about twice a replay's time on the
H200) or is captured. This drives the runtime's real executor, batcher and padding over an offline
workload of the Llama-3.1-8B shape, with a stand-in model that computes nothing (zero logits,
preset acceptance decides the drafts, prefill synthetic) and one layer of KV, and records each
pass's graph key exactly as `GraphedPasses` computes it (attention plans under the Triton
interpreter's host side: no kernel runs). Per policy: decode passes, distinct shapes, how many
passes would replay / capture / run eagerly under the runtime's rule (capture at the second
sighting, 48 graphs kept), and the distinct values of each part of the key (`GraphedPasses.stats`).
Seconds on a laptop CPU; what it counts is what a GPU run of the same workload meets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections import OrderedDict
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # plans need Triton's host side only; set before triton loads
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install

import numpy as np  # noqa: E402
import torch  # noqa: E402


class NullModel:
    """The forward's interface, computing nothing: logits of zeros."""

    def __init__(self, cfg):
        self.cfg, self.dtype, self.device = cfg, torch.bfloat16, torch.device("cpu")

    def __call__(self, tokens, positions, attn, logit_rows=None):
        rows = len(tokens) if logit_rows is None else len(logit_rows)
        return torch.zeros((rows, 16), dtype=torch.float32)


def count_shapes(workload: str, policy: str, output_tokens: int, kv_pages: int, max_graphs: int = 48,
                 capture_after: int = 2, trace=None, coarse: bool = False, jitter: float = 0.0, seed: int = 0,
                 stall_s: float = 0.0, seen: set | None = None, rule: bool = False, startup: bool = False,
                 max_batch: int | None = None, **settings) -> dict:
    """`workload` B x C offline, or `trace` (a `Trace`) at its own arrival times, the clock advanced
    by each pass's time as the shipped H200 profile prices it (the roofline where none ships).
    `jitter`: each pass's time scaled by a uniform draw in 1 +- jitter (`seed`); `stall_s` added to
    the clock at a pass of a shape not in `seen` (which the run then adds: a capture or an eager
    pass stalls the loop, so a rehearsal meets other batches than the run it prepares).
    `settings`: more ServingConfig fields (draft_kv, draft_budget, max_draft)."""
    from spsim.build import build
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.graphs import GraphedPasses
    from spsim.gpu_runtime.model_config import get_config
    from spsim.policies.kv import PagedKVPool
    from spsim.policies.request import RequestTable

    lc = dataclasses.replace(get_config("llama-3.1-8b"), layers=1, vocab=16)
    if trace is None:
        b_n, ctx = map(int, workload.split("x"))
        prompts, outs, arrivals = np.full(b_n, ctx), np.full(b_n, output_tokens), np.zeros(b_n)
    else:
        b_n, prompts, outs, arrivals = len(trace), trace.prompt_tokens, trace.output_tokens, trace.arrival_s
    cfg = ServingConfig(model="llama-3.1-8b", gpu="h200", policy=policy, acceptance="sparsespec-llama8b",
                        offline=settings.pop("offline", trace is None), kv_pages=kv_pages, cost="roofline" if trace is None else "auto",
                        **({"max_batch": max_batch} if max_batch else {}), **settings)
    rule = rule or startup
    serving = build(cfg, prefix_cache=False, block_size=None, capacity=kv_pages, max_context=lc.max_context)
    table = RequestTable(prompts, outs, np.asarray(arrivals, np.float64))
    batcher = serving.new_batcher(table, None, None, PagedKVPool)
    ex = stand_in_executor(cfg, serving, lc, table, batcher.pool, prompts, kv_pages, rule=rule, coarse=coarse,
                           synthetic_prefill=not startup, store_slots=min(cfg.max_batch, b_n) + 1)
    model, cache = ex.model, ex.cache
    probe = GraphedPasses(model, cache, capture=False)
    keys: list = []
    start = None
    if startup:  # the start-up set of these settings (startup.py), counted on the CPU
        from spsim.gpu_runtime.startup import capture, shape_set_for

        start = GraphedPasses(model, cache, capture=False)
        capture(start, ex, shape_set_for(ex.padding.rule, serving.batcher_config, lc, serving.method, kv_pages))
    missed: dict = {}

    class Probe:
        eligible = staticmethod(GraphedPasses.eligible)
        frozen = False

        def forward(self, attn, tokens, logit_rows):
            key, _, _ = probe.shape_key(attn, tokens, logit_rows)
            probe._note_shape(key)
            keys.append(key)
            if start is not None and key not in start.graphs:
                missed[key] = missed.get(key, 0) + 1
            return model(tokens, attn.positions, attn, logit_rows=logit_rows)

    ex.graphs = Probe()
    rng = np.random.default_rng(seed)
    now, nxt = 0.0, 0
    while True:
        while nxt < b_n and arrivals[nxt] <= now:
            serving.arrived(nxt, table)
            batcher.enqueue(nxt, float(arrivals[nxt]))
            table.replica[nxt] = 0
            nxt += 1
        if not batcher.has_work():
            if nxt >= b_n:
                break
            now = float(arrivals[nxt])
            continue
        plan = batcher.plan(now)
        n_keys = len(keys)
        out = ex.execute(plan)
        dt = 0.01 if trace is None else serving.cost.time(plan)
        now += dt * (rng.uniform(1 - jitter, 1 + jitter) if jitter else 1.0)
        if seen is not None and len(keys) > n_keys and keys[-1] not in seen:
            seen.add(keys[-1])
            now += stall_s
        batcher.apply(plan, out, now)
    # the runtime's rule over the recorded keys: capture at the capture_after-th sighting, LRU of max_graphs
    graphs, seen, replay, capture, eager = OrderedDict(), {}, 0, 0, 0
    for k in keys:
        if k in graphs:
            graphs.move_to_end(k)
            replay += 1
            continue
        seen[k] = seen.get(k, 0) + 1
        if seen[k] < capture_after:
            eager += 1
            continue
        seen.pop(k)
        graphs[k] = True
        capture += 1
        while len(graphs) > max_graphs:
            graphs.popitem(last=False)
    extra = {}
    if start is not None:
        extra = {"startup": start.startup_stats, "passes_outside_startup": sum(missed.values()),
                 "shapes_outside_startup": len(missed), "_missed": missed, "_startup_keys": list(start.graphs)}
    return {**extra, "workload": workload, "policy": policy, "coarse": coarse, "output_tokens": output_tokens,
            "graphable_passes": len(keys),
            "distinct_shapes": len(set(keys)), "replay": replay, "capture": capture, "eager": eager,
            "distinct_by_part": probe.stats()["distinct_by_part"], "_keys": keys}


def stand_in_executor(cfg, serving, lc, table, pool, prompts, kv_pages: int, *, rule: bool, coarse: bool,
                      synthetic_prefill: bool, store_slots: int):
    """The runtime's executor over the stand-in model and a CPU cache of `kv_pages` (+ scratch)."""
    from spsim.gpu_runtime.executor import RuntimeExecutor
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.padding import SCRATCH_PAGES, PassPadding
    from spsim.gpu_runtime.shapes import rule_for

    bc = serving.batcher_config
    cache = PagedKVCache(lc, kv_pages + SCRATCH_PAGES, cfg.page_size, device="cpu", dtype=torch.bfloat16)
    return RuntimeExecutor(NullModel(lc), cache, pool, table, lambda rid: [1] * int(prompts[rid]),
                           method=serving.method, budget=cfg.draft_budget, seed=cfg.seed,
                           acceptance=serving.acceptance, record_events=False,
                           drafts_possible=bc.max_draft > 0, synthetic_prefill=synthetic_prefill,
                           padding=PassPadding(kv_pages, cfg.page_size, coarse=coarse or rule,
                                               rule=rule_for(bc, cfg.draft_budget, serving.policy.make().longest_run(
                                                   bc.max_draft)) if rule else None),
                           store_slots=store_slots)  # as the engine sizes it


def made_up_executor(policy: str, kv_pages: int, layers: int, **settings):
    """(executor, serving, model config) for made-up passes (`RuntimeExecutor.synthetic`) under the
    shape rule: the 8B shape with `layers` layers, a stand-in model, one request's table; `settings`:
    more ServingConfig fields."""
    from spsim.build import build
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.model_config import get_config
    from spsim.policies.kv import PagedKVPool
    from spsim.policies.request import RequestTable

    lc = dataclasses.replace(get_config("llama-3.1-8b"), layers=layers, vocab=16)
    cfg = ServingConfig(model="llama-3.1-8b", gpu="h200", policy=policy, acceptance="sparsespec-llama8b",
                        offline=False, kv_pages=kv_pages, cost="roofline", **settings)
    serving = build(cfg, prefix_cache=False, block_size=None, capacity=kv_pages, max_context=lc.max_context)
    table = RequestTable(np.full(1, 16), np.full(1, 1), np.zeros(1))
    pool = serving.new_batcher(table, None, None, PagedKVPool).pool
    ex = stand_in_executor(cfg, serving, lc, table, pool, [16], kv_pages, rule=True, coarse=True,
                           synthetic_prefill=False, store_slots=cfg.max_batch + 1)
    return ex, serving, lc


def eager_launch_keys(policy: str, specs, kv_pages: int = 51222, **settings) -> tuple[set, list[set]]:
    """The attention launches' kernel variants (launch, BLOCK_M, BLOCK_N, warps, stages, fused
    merge, page scores) of the start-up's eager warm-ups (`ShapeSet.eager_passes`) and of each of
    `specs` (`RuntimeExecutor.synthetic`'s arguments): what compiles where, on the host only."""
    from spsim.gpu_runtime.startup import shape_set_for

    ex, serving, lc = made_up_executor(policy, kv_pages, 2, **settings)  # a drafting pass's two layers' lists

    def keys(spec) -> set:
        attn = ex.synthetic(**spec)[0]
        out = set()
        for layer in range(lc.layers):
            lists = attn.lists_for(layer)
            plan = attn._plan(lists, lc.q_heads)
            for i, p in enumerate(plan.parts()):
                out.add((i, p.block_m, p.block_n, p.num_warps, p.num_stages, int(p.fused_merge),
                         attn.page_scores_for(layer) is not None))
        return out

    ss = shape_set_for(ex.padding.rule, serving.batcher_config, lc, serving.method, kv_pages)
    warm = set().union(*(keys(s) for s in ss.eager_passes()))
    return warm, [keys(s) for s in specs]


def startup_misses(policy: str, specs, kv_pages: int = 20000, max_batch: int = 8, **settings) -> list:
    """The made-up passes of `specs` (`RuntimeExecutor.synthetic`'s arguments) that the executor
    would graph but whose graph key the start-up set of these settings lacks: (spec, tokens) each.
    Host side only (the 8B shape, one layer, a stand-in model)."""
    from spsim.gpu_runtime.graphs import GraphedPasses
    from spsim.gpu_runtime.startup import capture, shape_set_for

    ex, serving, lc = made_up_executor(policy, kv_pages, 1, max_batch=max_batch, **settings)
    start = GraphedPasses(ex.model, ex.cache, capture=False)
    capture(start, ex, shape_set_for(ex.padding.rule, serving.batcher_config, lc, serving.method, kv_pages))
    probe = GraphedPasses(ex.model, ex.cache, capture=False)
    out = []
    for spec in specs:
        attn, tok, rows, graphable, _ = ex.synthetic(**spec)
        if graphable and probe.shape_key(attn, tok, rows)[0] not in start.graphs:
            out.append((spec, int(tok.shape[0])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="16x32768")
    ap.add_argument("--policies", default="ar,fixed-k:k=4,aspire")
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--kv-pages", type=int, default=57248, help="the H200's 8B pool (runtime_offline.py)")
    ap.add_argument("--trace", default=None, help="a trace (file or shipped name) at its own arrival times "
                    "instead of --workload, e.g. azure-conv with --window 45 (spsim validate's window)")
    ap.add_argument("--window", type=float, default=None, help="with --trace: requests arriving in the first S seconds")
    ap.add_argument("--speed", type=float, default=None, help="with --trace: its arrivals this many times as fast "
                    "(validate_gpu.py's `speed=`)")
    ap.add_argument("--coarse", action="store_true", help="passes padded to powers of two (--coarse-shapes)")
    ap.add_argument("--rule", action="store_true", help="the shape rule of the settings (gpu_runtime/shapes.py): "
                    "widths by class, powers of two")
    ap.add_argument("--startup", action="store_true", help="the start-up shape set of the settings (startup.py): "
                    "its size, and the run's passes of a shape outside it")
    ap.add_argument("--max-batch", type=int, default=None)
    ap.add_argument("--rehearse", action="store_true", help="with --trace: serve it twice, a rehearsal then the "
                    "measured run, pass times jittered (--jitter) and each new shape stalling the clock (a capture: "
                    "50 ms in the rehearsal, an eager pass: 25 ms after it); counts the measured run's passes of a "
                    "shape the rehearsal never met (spsim validate --rehearse captures every shape it meets)")
    ap.add_argument("--jitter", type=float, default=0.1, help="with --rehearse: pass times scaled by 1 +- this")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    tr = None
    if a.trace:
        from spsim.traces import read_trace
        from spsim.traces.transforms import window

        tr = read_trace(a.trace)
        tr = window(tr, 0.0, a.window) if a.window else tr
        if a.speed and len(tr) > 1:
            from spsim.traces.transforms import rescale_qps

            tr = rescale_qps(tr, a.speed * len(tr) / float(tr.arrival_s[-1]))
    rows = []
    for pol in a.policies.split(","):
        if a.rehearse and tr is not None:
            seen: set = set()
            first = count_shapes(a.workload, pol, a.output_tokens, a.kv_pages, trace=tr, coarse=a.coarse,
                                 jitter=a.jitter, seed=1, stall_s=0.05, seen=seen)
            met = set(first.pop("_keys"))
            r = count_shapes(a.workload, pol, a.output_tokens, a.kv_pages, trace=tr, coarse=a.coarse,
                             jitter=a.jitter, seed=2, stall_s=0.025, seen=seen)
            new = [k for k in r["_keys"] if k not in met]
            r.update(rehearsal_passes=first["graphable_passes"], rehearsal_shapes=first["distinct_shapes"],
                     unseen_in_rehearsal=len(new), unseen_shapes=len(set(new)), jitter=a.jitter)
        else:
            r = count_shapes(a.workload, pol, a.output_tokens, a.kv_pages, trace=tr, coarse=a.coarse, rule=a.rule,
                             startup=a.startup, max_batch=a.max_batch)
            r.pop("_missed", None)
            r.pop("_startup_keys", None)
        r.pop("_keys", None)
        if tr is not None:
            r.update(workload=f"{a.trace}" + (f" first {a.window:g} s" if a.window else ""), requests=len(tr))
        rows.append(r)
        print(json.dumps(r), flush=True)
    if a.out:
        import datetime
        import platform

        meta = {"benchmark": "graph_shapes", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": " ".join(["python3", "benchmarks/graph_shapes.py"] + sys.argv[1:]),
                "machine": {"platform": platform.platform(), "python": platform.python_version(),
                            "numpy": np.__version__, "torch": torch.__version__}}
        Path(a.out).write_text(json.dumps(dict(meta, runs=rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
