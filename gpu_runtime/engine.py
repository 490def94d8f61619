"""`spsim run`: a trace through the real model, driven by the same batcher and policy objects the
simulator drives (`spsim.build`). Only time and acceptance come from the hardware and the model.

One loop: admit arrivals whose time has come (wall clock, or all at once with `--offline`; with
`--concurrency` a finish releases the next request), plan a pass, execute it on the model, apply
its outcome. Host planning time (`Batcher.plan`) is measured per pass beside the pass's GPU time.
No simpy, no plotly: this runs on the GPU machine.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from spsim.build import arrival_times, build
from spsim.config import ServingConfig
from spsim.errors import SpsimError
from spsim.metrics import CATEGORIES, RunResult, summarize_run
from spsim.plan import Outcome
from spsim.policies.kv import PagedKVPool
from spsim.policies.request import Phase, RequestTable

from .executor import RuntimeExecutor
from .kv_cache import PagedKVCache
from .model_config import LlamaConfig
from .padding import SCRATCH_PAGES


@dataclass
class RuntimeOptions:
    weights: str | None = None  # safetensors folder or .gguf file; None: seeded random weights
    device: str = "cpu"
    dtype: str | None = None  # bf16, fp16, fp32, fp64; default: the config's (bf16 on GPUs)
    text: str | None = None  # real text to cut prompts from (with real weights)
    temperature: float = 0.0
    mem_frac: float = 0.9  # of free GPU memory for the KV cache when --kv-pages is not given
    cpu_kv_pages: int = 4096  # default KV pages on the CPU
    max_passes: int | None = None  # stop after this many passes (a window of a long run)
    record_events: bool = True
    cuda_graphs: bool = True  # replay passes without prefill from CUDA graphs (GPU only)
    pad_passes: bool | None = None  # dummy requests pad passes to a few shapes (padding.py); None: with graphs
    synthetic_prefill: bool = False  # timing: skip prefill compute, KV pages hold random values
    rehearse: bool = False  # serve the trace once untimed first, capturing its graph shapes (graphs only)
    rehearse_graphs: int = 1024  # graphs kept when rehearsing (they share their memory)
    repeats: int = 1  # measured runs, each over the previous one's cache, executor and graphs
    coarse_shapes: bool = False  # pad passes to powers of two (padding.py coarse): fewer graph shapes
    # the shape rule (shapes.py): padded passes take widths from classes fixed by the settings and
    # drafting/verifying as data. Off in the library's options (tests pad the older ways through
    # them); the CLI's --startup-shapes turns both on by default
    shape_rule: bool = False
    # the shape rule's start-up set (startup.ShapeSet): every decode-like and small prefill pass's
    # graph captured before the first request, none while serving (with `shape_rule`)
    startup_shapes: bool = False
    # device memory set aside from the KV pool for the start-up set's graphs (their pool, inputs
    # and the graphs themselves; the run reports what they took: runtime.cuda_graphs.startup.bytes).
    # None: estimated from the settings' shape set (`startup_reserve_bytes`)
    startup_reserve_gib: float | None = None
    say: object = None  # one-line messages (start-up capture) to the user, e.g. print
    startup_progress: object = None  # progress(done, total, graphs) during the start-up capture
    # warm-up forwards before start-up captures: "first" of each kernel set, or "always" (graphs.py)
    startup_warm: str = "first"
    # plan and prepare each pass while the previous one runs (preset acceptance only: the host
    # knows a pass's outcome before the GPU ends it). None: on the GPU with preset acceptance
    overlap: bool | None = None


_SERVED: dict = {}  # the process's start-up-captured server: settings -> (cache, executor, graphs)


def release_served(keep=None) -> None:
    """Drop the process's start-up-captured server unless its settings are `keep`'s (what sizing a
    new KV pool must see: a kept server holds its pool and graphs)."""
    for key in list(_SERVED):
        if keep is None or key[0] != keep:
            del _SERVED[key]
    if not _SERVED and torch.cuda.is_available():
        import gc

        gc.collect()
        torch.cuda.empty_cache()


@dataclass
class RunOutput:
    result: RunResult
    events: list[dict]
    passes: list[dict]
    tokens: dict[int, list[int]]
    extra: dict = field(default_factory=dict)


def policy_cost_model(cfg: ServingConfig, lc: LlamaConfig):
    """What cost-aware policies price their choices with: the run's profile or roofline for the
    simulator's shape of this name, else a roofline of the loaded model's own shape."""
    from spsim.build import build_cost_model
    from spsim.cost import RooflineCostModel
    from spsim.models import MODELS, ModelConfig

    if cfg.profile or lc.name in MODELS:
        return build_cost_model(cfg.with_(model=lc.name) if lc.name in MODELS else cfg)
    shape = ModelConfig(lc.name, lc.layers, lc.hidden, lc.q_heads, lc.kv_heads, lc.head_dim, lc.intermediate,
                        lc.vocab, lc.max_context, lc.tied_embeddings, lc.qkv_bias)
    return RooflineCostModel(shape, cfg.gpu, tp=cfg.tp, kv_dtype=cfg.kv_dtype, weight_dtype=cfg.weight_dtype,
                             page_size=cfg.page_size)


def _torch_dtype(name: str | None):
    if name is None:
        return None
    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
    if name not in table:
        raise SpsimError(f"--dtype must be one of {', '.join(table)} (got {name!r})")
    return table[name]


def kv_pages_for(lc: LlamaConfig, cfg: ServingConfig, opts: RuntimeOptions, dtype) -> int:
    if cfg.kv_pages:
        return int(cfg.kv_pages)
    dev = torch.device(opts.device)
    if dev.type == "cuda":
        release_served(keep=(lc.name, str(dtype), cfg.policy, cfg.draft_kv, cfg.draft_budget, cfg.max_batch,
                             cfg.max_draft, cfg.token_budget, cfg.page_size))
        if _SERVED:  # the same settings' server, kept: its pool is the one to serve on
            return next(iter(_SERVED))[1]
        free, _ = torch.cuda.mem_get_info(dev)
        per_page = PagedKVCache.bytes_per_page(lc, cfg.page_size, dtype)
        if opts.shape_rule and opts.startup_shapes and opts.cuda_graphs:  # the graphs count against the pool
            free -= (int(opts.startup_reserve_gib * 2**30) if opts.startup_reserve_gib is not None
                     else startup_reserve_bytes(lc, cfg, int(free * opts.mem_frac) // per_page))
        return max(0, int(free * opts.mem_frac)) // per_page
    return opts.cpu_kv_pages


# Start-up graph memory per made-up pass of the shape set (graphs.py `startup` keys them: about one
# in seven is a graph of its own), with a margin: measured on an H100 with Llama-3.1-8B at max batch
# 256 (ar 1.22, fixed-k:k=4 1.48, aspire 1.49 MiB a pass; ~10.4 MiB a graph) and with a 4-layer 1B
# shape (1.24): the graphs' nodes and kept buffers, not the model's size, set it.
STARTUP_BYTES_PER_PASS = int(1.6 * 2**20)
STARTUP_BYTES_BASE = 2**30
# The passes past the graph limit run eager (at start-up once, then while serving): their
# activations come from the allocator's general pool beside the graphs'. Per token of the largest
# chunk and per unit of hidden + intermediate width: an H100 with Llama-3.1-8B took 2.2 GiB more at
# start-up for 8,192-token chunks once they ran there (14.6 B), with a margin.
EAGER_BYTES_PER_TOKEN_UNIT = 16


def startup_reserve_bytes(lc: LlamaConfig, cfg: ServingConfig, pool_pages: int) -> int:
    """Device memory to set aside for the start-up set of these settings (`RuntimeOptions.
    startup_reserve_gib` None): a base plus a share per made-up pass (`startup.ShapeSet.passes`,
    counted on the host in well under a second)."""
    from spsim.build import build

    from .shapes import rule_for
    from .startup import shape_set_for

    serving = build(cfg, prefix_cache=False, capacity=max(1, pool_pages), max_context=lc.max_context)
    bc = serving.batcher_config
    rule = rule_for(bc, cfg.draft_budget, serving.policy.make().longest_run(bc.max_draft))
    shapes = shape_set_for(rule, bc, lc, serving.method, max(1, pool_pages))
    return reserve_for(sum(1 for _ in shapes.passes()), eager_bytes(lc, shapes))


def eager_bytes(lc: LlamaConfig, shapes) -> int:
    """Activations of the largest pass that runs eager (a prefill chunk past the graph limit)."""
    if shapes.token_budget <= shapes.token_limit:
        return 0
    return shapes.token_budget * (lc.hidden + lc.intermediate) * EAGER_BYTES_PER_TOKEN_UNIT


def reserve_for(passes: int, eager: int = 0) -> int:
    """The start-up reserve of a shape set of `passes` made-up passes, beside `eager` bytes of
    the largest eager pass's activations."""
    return STARTUP_BYTES_BASE + passes * STARTUP_BYTES_PER_PASS + int(eager)



def load(cfg: ServingConfig, opts: RuntimeOptions):
    from .weights import load_model

    dev = torch.device(opts.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SpsimError("--device cuda: no CUDA device here; --device cpu serves small models (e.g. --model tiny)")
    dtype = _torch_dtype(opts.dtype)
    if dtype is None and dev.type == "cuda":
        dtype = torch.bfloat16
    model, tokenizer = load_model(opts.weights, None if opts.weights else cfg.model, device=dev, dtype=dtype,
                                  seed=cfg.seed)
    return model, tokenizer


def prompt_source(trace, model, tokenizer, cfg: ServingConfig, opts: RuntimeOptions):
    from . import tokens as T

    vocab = model.cfg.vocab
    bs = trace.block_size or 512
    blocks = (lambda rid: trace.prefix_ids[trace.prefix_indptr[rid]:trace.prefix_indptr[rid + 1]]) \
        if trace.prefix_indptr is not None else (lambda rid: None)
    if opts.text:
        if tokenizer is None:
            raise SpsimError("--text needs a tokenizer: real weights from a .gguf file")
        try:
            text = Path(opts.text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SpsimError(f"{opts.text}: cannot read text ({e})") from None
        src = T.TextSource(text, lambda s: tokenizer.encode(s).ids, cfg.seed)
        return lambda rid: src.prompt_tokens(rid, int(trace.prompt_tokens[rid]), blocks(rid), bs)
    return lambda rid: T.prompt_tokens(rid, int(trace.prompt_tokens[rid]), blocks(rid), bs, vocab, cfg.seed)


def overlap_for(opts: RuntimeOptions, model, serving) -> bool:
    """Whether the host plans each pass while the GPU runs the previous one (preset acceptance)."""
    overlap = opts.overlap if opts.overlap is not None else model.device.type == "cuda"
    if overlap and serving.acceptance is None:
        if opts.overlap:
            raise SpsimError("--overlap needs preset acceptance (--acceptance NAME): with real acceptance "
                             "the next pass waits for the GPU's verification")
        return False
    return overlap


def new_server(model, cfg: ServingConfig, opts: RuntimeOptions, serving, b, table, prompts, pages: int,
               startup: bool, overlap: bool, store_slots: int):
    """The device side of serving: KV cache (with the padding's scratch pages), executor, and CUDA
    graphs (the start-up set captured here when `startup`). Returns `(cache, executor, graphs)`.
    `store_slots`: requests live at once (the padding's scratch slot is added)."""
    lc, dtype, bc = model.cfg, model.dtype, serving.batcher_config
    graphed = opts.cuda_graphs and model.device.type == "cuda"
    padding = None
    if opts.pad_passes or (opts.pad_passes is None and graphed):  # scratch pages past the pool's for the dummies
        from .padding import PassPadding
        from .shapes import rule_for

        rule = (rule_for(bc, cfg.draft_budget, serving.policy.make().longest_run(bc.max_draft))
                if opts.shape_rule else None)
        padding = PassPadding(pages, cfg.page_size, coarse=opts.coarse_shapes, rule=rule)
    cache = PagedKVCache(lc, pages + (SCRATCH_PAGES if padding else 0), cfg.page_size, device=model.device,
                         dtype=dtype)
    ex = RuntimeExecutor(model, cache, b.pool, table, prompts,
                         method=serving.method, budget=cfg.draft_budget, temperature=opts.temperature,
                         seed=cfg.seed, acceptance=serving.acceptance, record_events=opts.record_events,
                         drafts_possible=bc.max_draft > 0,
                         synthetic_prefill=opts.synthetic_prefill, padding=padding,
                         # a store that grows mid-run leaves every graph captured before unusable
                         store_slots=store_slots + 1)
    ex.overlap = overlap
    if opts.synthetic_prefill and cache.device.type == "cuda":  # finite values for attention to read
        for t in (cache.k, cache.v):
            t.normal_()
    graphs = None
    if graphed:
        from .graphs import GraphedPasses

        graphs = ex.graphs = GraphedPasses(model, cache)
        if startup:
            from .startup import capture, shape_set_for

            shapes = shape_set_for(padding.rule, bc, lc, serving.method, pages)
            say = opts.say or (lambda msg: None)
            say("capturing the start-up shape set (CUDA graphs of every pass shape these settings allow)")
            st = capture(graphs, ex, shapes, progress=opts.startup_progress, warm=opts.startup_warm)
            # the set just made up, not the pool estimate's (counted again would cost seconds of start-up)
            st["reserve_bytes"] = (int(opts.startup_reserve_gib * 2**30) if opts.startup_reserve_gib is not None
                                   else reserve_for(st["passes"], eager_bytes(lc, shapes)))
            aside = "" if cfg.kv_pages else f" (set aside from the KV pool: {st['reserve_bytes'] / 2**20:,.0f} MiB)"
            say(f"start-up capture: {st['graphs']:,} graphs in {st['seconds']:.1f} s, "
                f"{st['bytes'] / 2**20:,.0f} MiB of graph memory{aside}")
            if cfg.kv_pages is None and st["bytes"] > st["reserve_bytes"]:
                say("warning: the start-up graphs took more memory than was set aside for them: "
                    "--kv-pages or a lower memory fraction leaves the allocator more room")
    return cache, ex, graphs


def run_trace(trace, cfg: ServingConfig, opts: RuntimeOptions, progress=None, model=None, tokenizer=None,
              cost=None) -> RunOutput:
    """Serve `trace` on the real model. `model`/`tokenizer`: already loaded (tests reuse one);
    `cost`: what the policies price with (default `policy_cost_model`)."""
    if torch.device(opts.device).type == "cpu":
        from .dispatch import reference_only

        with reference_only():
            return _run(trace, cfg, opts, progress, model, tokenizer, cost)
    return _run(trace, cfg, opts, progress, model, tokenizer, cost)


def _run(trace, cfg, opts, progress, model, tokenizer, cost) -> RunOutput:
    if len(trace) == 0:
        raise SpsimError("the trace has no requests")
    if cfg.replicas != 1:
        raise SpsimError("spsim run serves one replica (--replicas 1)")
    if model is None:
        model, tokenizer = load(cfg, opts)
    lc = model.cfg
    dtype = model.dtype
    pages = kv_pages_for(lc, cfg, opts, dtype)
    cost = cost if cost is not None else policy_cost_model(cfg, lc)
    arrivals = arrival_times(trace, cfg)

    def world():  # the scheduling side of one run: policy, request table, batcher (fresh per run)
        serving = build(cfg, prefix_cache=trace.prefix_indptr is not None, block_size=trace.block_size, cost=cost,
                        capacity=pages, max_context=lc.max_context)
        table = RequestTable(trace.prompt_tokens, trace.output_tokens, arrivals.copy())
        return serving, table, serving.new_batcher(table, trace.prefix_indptr, trace.prefix_ids, PagedKVPool)

    serving, table, b = world()
    graphed = opts.cuda_graphs and model.device.type == "cuda"
    bc = serving.batcher_config
    startup = bool(graphed and opts.shape_rule and opts.startup_shapes)
    if opts.startup_shapes and not graphed and model.device.type == "cuda" and opts.say:
        opts.say("--startup-shapes: --no-cuda-graphs, so nothing to capture")  # (on the CPU there never is)
    # a start-up set is captured once per process: a later run of the same settings on the same
    # model (a validation's warm-up, then its measured run) serves over the same cache, executor
    # and graphs, as a server serves every request over what it captured at start
    served_key = ((lc.name, str(dtype), cfg.policy, cfg.draft_kv, cfg.draft_budget, cfg.max_batch, cfg.max_draft,
                   cfg.token_budget, cfg.page_size), pages, id(model), bc.max_context, opts.synthetic_prefill,
                  opts.coarse_shapes)
    hit = _SERVED.get(served_key) if startup else None
    prompts = prompt_source(trace, model, tokenizer, cfg, opts)
    overlap = overlap_for(opts, model, serving)
    if hit is not None:
        cache, ex, graphs = hit
        ex.prompt_fn, ex.temperature, ex.seed = prompts, float(opts.temperature), int(cfg.seed)
        ex.events = [] if opts.record_events else None
        ex.reset(b.pool, table, serving.acceptance)
        ex.overlap = overlap
        graphs.reset_counts()
    else:
        if startup:  # one server per process: the previous one's memory goes back before this one's is taken
            release_served()
        cache, ex, graphs = new_server(model, cfg, opts, serving, b, table, prompts, pages, startup, overlap,
                                       # +1 at start-up: a request finished in the pass in flight
                                       # (overlapped loop) may hold its slot while its successor takes one
                                       store_slots=cfg.max_batch + 1 if startup else min(cfg.max_batch, table.n))
        if startup:
            _SERVED[served_key] = (cache, ex, graphs)
    padding = ex.padding

    def again():  # serve the trace once more over the same cache, executor and graphs
        if graphs is not None:
            graphs.reset_counts()
        w = world()
        ex.reset(w[2].pool, w[1], w[0].acceptance)
        return w

    rehearsal = None
    if opts.rehearse:
        # serve the trace once untimed, capturing every graph shape at first sight, then serve it
        # again measured over the same cache, executor and graphs: the steady state of a server
        # that has met its workload's shapes (engines capture their graphs at start-up)
        if graphs is not None:
            graphs.capture_after, graphs.max_graphs = 1, max(graphs.max_graphs, opts.rehearse_graphs)
        first, _, _ = _serve(trace, cfg, opts, None, serving, table, b, ex, graphs, arrivals)
        rehearsal = {"passes": len(first), **(graphs.stats() if graphs is not None else {})}
        serving, table, b = again()
    from .compiles import COMPILES

    if model.device.type == "cuda":
        COMPILES.install()
    COMPILES.reset()  # what the measured run compiles: each one stalled a pass
    passes, cat_ns, cat_passes = _serve(trace, cfg, opts, progress, serving, table, b, ex, graphs, arrivals)
    compiles = COMPILES.stats() if COMPILES.installed else None
    res = summarize_run(table, [b], [cat_ns], [cat_passes], cfg, cost, trace)
    events, tokens = ex.events or [], ex.generated()
    first_graphs = graphs.stats() if graphs is not None else None
    repeats = None
    if opts.repeats > 1:
        # the same trace served again, measured, as often as asked: under arrivals one run's
        # latencies move with where its passes fall (measured on the H200: mean TPOT 7.5-8.1 ms
        # over four runs of one 45 s window), so a prediction is judged against the spread
        repeats = [_repeat_summary(res.summary, passes, first_graphs)]
        for _ in range(opts.repeats - 1):
            w_serving, w_table, w_b = again()
            more, ns, ps = _serve(trace, cfg, opts, None, w_serving, w_table, w_b, ex, graphs, arrivals)
            r = summarize_run(w_table, [w_b], [ns], [ps], cfg, cost, trace)
            repeats.append(_repeat_summary(r.summary, more, graphs.stats() if graphs is not None else None))
    host = np.array([p["host_ms"] for p in passes]) if passes else np.zeros(1)
    res.summary["runtime"] = {
        "device": str(model.device), "device_name": (torch.cuda.get_device_name(model.device)
                                                     if model.device.type == "cuda" else "cpu"),
        "model": lc.name, "weights": opts.weights or "random (seeded)", "dtype": str(dtype).replace("torch.", ""),
        "kv_pages": pages, "acceptance": cfg.acceptance or "real", "temperature": opts.temperature,
        "synthetic_prefill": opts.synthetic_prefill,
        "policy_cost_model": cost.name, "passes": len(passes),
        "stopped_early": bool(opts.max_passes and len(passes) >= opts.max_passes),
        "mean_host_ms": float(host.mean()), "p99_host_ms": float(np.percentile(host, 99)),
        "cuda_graphs": first_graphs,
        # Triton specialisations first launched during the measured run (None: no Triton JIT)
        "kernel_compiles": compiles,
        "rehearsal": rehearsal,  # graph counts of the untimed first run (--rehearse), else None
        "padding": None if padding is None else {**padding.stats(), "coarse": padding.coarse,
                                                 "shape_rule": padding.rule is not None},
        "torch": torch.__version__,
        "overlap": overlap,
    }
    if repeats is not None:
        res.summary["runtime"]["repeats"] = repeats
    return RunOutput(res, events, passes, tokens)


def _repeat_summary(summary: dict, passes: list[dict], graphs: dict | None) -> dict:
    """One measured run of several (`repeats`): its summary's numbers, its passes and graph counts."""
    keep = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    keep["passes_run"] = len(passes)
    keep["pass_time_s"] = dict(summary.get("pass_time_s") or {})
    keep["passes"] = dict(summary.get("passes") or {})
    if graphs is not None:
        keep["graph_captures"], keep["graph_eager"] = graphs.get("captures", 0), graphs.get("eager", 0)
    return keep


def _serve(trace, cfg, opts, progress, serving, table, b, ex, graphs, arrivals):
    """The serving loop: admit, plan, execute, apply, until the trace is done. Returns the pass log
    and GPU time and passes per category."""
    n = len(trace)
    cat_ns = dict.fromkeys(CATEGORIES, 0)
    cat_passes = dict.fromkeys(CATEGORIES, 0)
    state = {"next": 0, "released": 0}
    passes: list[dict] = []
    wall = not (cfg.offline or cfg.concurrency)
    t0 = time.perf_counter()
    clock = (lambda: time.perf_counter() - t0) if wall else None
    sim_now = [0.0]  # offline / closed loop: time advances by the passes' measured time only

    def now() -> float:
        return clock() if wall else sim_now[0]

    def route(rid: int, at: float) -> None:
        serving.arrived(rid, table)
        b.enqueue(rid, at)
        table.replica[rid] = 0

    def on_done(rid, at):
        serving.done(rid)
        if cfg.concurrency and state["released"] < n:
            nxt = state["released"]
            state["released"] += 1
            table.arrival[nxt] = at
            route(nxt, at)

    b.on_done = on_done
    done_count = 0
    pending: list = []  # the overlapped loop's pass in flight: (ticket, host_s, captured)

    def log(plan, out, host_s, captured):
        nonlocal done_count
        cat = plan.category
        cat_ns[cat] += int(round(out.elapsed_s * 1e9))
        cat_passes[cat] += 1
        passes.append({"pass": len(passes), "category": cat, "prefill_tokens": int(plan.prefill_tokens.sum()),
                       "drafts": len(plan.draft_ids), "verifies": len(plan.verify_ids),
                       "verify_tokens": int(plan.verify_query.sum()), "gpu_ms": round(out.elapsed_s * 1e3, 4),
                       "prep_ms": round(ex.last_prep_s * 1e3, 4), "host_ms": round(host_s * 1e3, 4),
                       # tokens this pass committed: first tokens of finished prefills, and per
                       # verification its accepted drafts plus one
                       "committed": int(plan.prefill_last.sum()) + len(plan.verify_ids) + int(out.accepted.sum()),
                       "captured": captured})
        if progress is not None:
            d = int(((table.phase == Phase.DONE) | (table.phase == Phase.REJECTED)).sum())
            if d != done_count:
                done_count = d
                progress(d, n)

    def settle():  # the overlapped loop: wait for the pass in flight, stamp its end
        if not pending:
            return
        tk, host_s, captured = pending.pop()
        out = ex.finish(tk)
        if not wall:  # its interval already holds the host's planning, done while a pass ran
            sim_now[0] += out.elapsed_s
        b.stamp(now())
        log(tk.plan, out, host_s, captured)

    if cfg.concurrency:
        state["released"] = min(cfg.concurrency, n)
        for rid in range(state["released"]):
            route(rid, 0.0)
        state["next"] = n
    while True:
        while state["next"] < n and arrivals[state["next"]] <= now():
            route(state["next"], float(arrivals[state["next"]]))
            state["next"] += 1
        if not b.has_work():
            if pending:  # what is in flight may finish requests (and, closed-loop, release more)
                settle()
                continue
            if state["next"] >= n:
                break
            wait = float(arrivals[state["next"]]) - now()
            if wall and wait > 0:
                time.sleep(min(wait, 0.5))
            elif not wall:
                sim_now[0] = float(arrivals[state["next"]])
            continue
        h0 = time.perf_counter()
        plan = b.plan(now())
        host_s = time.perf_counter() - h0
        if plan.is_empty():
            raise RuntimeError("batcher produced an empty pass with work pending")  # a bug, not input
        before = graphs.captures if graphs is not None else 0
        tk = ex.launch(plan)
        captured = graphs is not None and graphs.captures > before  # this pass captured a graph
        if ex.overlap:
            # the batcher takes this pass's outcome (known on the host) now and plans the next
            # while the GPU runs it; the previous pass is settled first, so time stamps land in
            # order. Arrivals and finishes are thus seen one pass later than in a serial loop.
            settle()
            b.apply(plan, Outcome(float("nan"), tk.entropy, tk.accepted), None)
            pending.append((tk, host_s, captured))
        else:
            out = ex.finish(tk)
            if not wall:
                sim_now[0] += out.elapsed_s + host_s
            b.apply(plan, out, now())
            log(plan, out, host_s, captured)
        if opts.max_passes and len(passes) + len(pending) >= opts.max_passes:
            break
    settle()
    return passes, cat_ns, cat_passes

def write_outputs(out_dir: Path, run: RunOutput, trace, dump_tokens: Path | None = None) -> None:
    from spsim.events import write_events

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(run.result.summary_json())
    run.result.requests.to_csv(out_dir / "requests.csv", index=False)
    ev = run.events
    cols = {f: np.asarray([e[f] for e in ev]) for f in ("request", "out_pos", "draft_pos", "accepted", "entropy",
                                                         "method", "budget", "context")}
    if ev:
        write_events(out_dir / "events.jsonl", cols, {"source": "spsim run", "model": run.result.summary["runtime"]["model"],
                                                      "temperature": run.result.summary["runtime"]["temperature"]})
    else:
        (out_dir / "events.jsonl").write_text(json.dumps({"spsim_accept_events": 1, "source": "spsim run"}) + "\n")
    with open(out_dir / "passes.jsonl", "w") as f:
        for p in run.passes:
            f.write(json.dumps(p) + "\n")
    if dump_tokens is not None:
        ids = trace.ids
        dump_tokens.write_text(json.dumps({str(ids[r]): toks for r, toks in sorted(run.tokens.items())}) + "\n")
