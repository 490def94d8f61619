"""Time the sweep's passes on the real runtime: random weights of the real shape, a KV cache of
random values, no trace (a pass's time does not depend on the values).

Each point is timed the way `spsim run` times a pass: `RuntimeExecutor.execute(plan)` (the
runtime's own timer, from the tokens' upload to the sampled outcomes, synchronised), replayed from
a CUDA graph where the runtime would graph that pass (`GraphedPasses`, decode-like passes) and
eager otherwise, after warm-up (compilation, graph capture), median of repeats. Before each
repeat the requests' token state is put back, so every repeat is the same pass: the drafts a
verification checks, a draft's position, the selection a later draft reuses (primed by a first
draft) and the scores a verify-attn selection reads (primed by a verification).

Every point gets a fresh executor (its Quest bounds filled with random keys where the method keeps
them) and fresh graphs, so one point's failure cannot leak into the next; the failure is
recorded with its reason. Drafting requests share pages with verifying requests or with each
other (they read only their selection), so big drafting batches fit; full-attention requests get
pages of their own. Neither simpy nor plotly is imported: this runs on the GPU machine.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import math
import platform
import statistics
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from spsim.config import ServingConfig
from spsim.errors import SpsimError
from spsim.plan import DraftMethod, PassPlan

from .clocks import ClockMonitor
from .design import Point, _unique, anchor_points, default_design, smoke_design, sweep_order
from .records import Writer, read_measurements

ROOT = Path(__file__).resolve().parent.parent
# the runtime's files (spsim.gpu_runtime) and the shared rules they follow (spsim.buckets, spsim.worklist)
KERNEL_FILES = tuple(f"gpu_runtime/{n}" for n in (
    "attention.py", "quest.py", "fused.py", "selection.py", "pages.py", "pass_attention.py", "graphs.py",
    "executor.py", "sampling.py", "model.py", "kv_cache.py", "kv_write.py", "padding.py")) + ("buckets.py",) + tuple(
    f"gpu_runtime/{n}" for n in ("draft_store.py", "gemv.py", "shapes.py")) + ("worklist.py",)
MEM_FRAC = 0.9  # of free memory for KV, as `spsim run` sizes its pool (engine.RuntimeOptions.mem_frac)
SWEEP_FRAC = 0.75  # of free memory the sweep's cache may take (Quest bounds, graphs, logits beside it)
ANCHOR_EVERY = 12  # design points between two measurements of the drift controls (design.anchor_points)
RETIME_SPREAD = 0.10  # a point whose repeats spread wider than this (max - min over median) is timed again


class NoRoom(Exception):
    """The point's full-attention requests need more KV than the sweep's cache holds."""


class Tables:
    """The executor's page-table source (`pool.table(rid)`, as the batcher's PagedKVPool)."""

    def __init__(self, tables: dict[int, np.ndarray]):
        self.tables = tables

    def table(self, rid: int) -> np.ndarray:
        return self.tables[rid]


def page_tables(point: Point, num_pages: int, page_size: int, perm: np.ndarray) -> dict[int, np.ndarray]:
    """Request id -> pages, each request its own (in a fixed random order, as a long-running pool
    scatters them) while there are any; then drafting requests share the pages of earlier requests
    long enough to cover them (they read only their selection; timing does not depend on values).
    Prefilling and verifying requests always get their own."""
    plan = point.plan()
    need = lambda t: -(-int(t) // page_size)  # noqa: E731
    out, used = {}, 0
    full = [(int(r), c + n) for r, c, n in zip(plan.prefill_ids, plan.prefill_context, plan.prefill_tokens)]
    full += [(int(r), c + q) for r, c, q in zip(plan.verify_ids, plan.verify_context, plan.verify_query)]
    for rid, kv in full:
        n = need(kv)
        if used + n > num_pages:
            raise NoRoom(f"needs more than the sweep's {num_pages} KV pages")
        out[rid] = perm[used:used + n]
        used += n
    owners = list(out.values())
    for j, (rid, c, p) in enumerate(zip(plan.draft_ids.tolist(), plan.draft_context.tolist(), plan.draft_pos.tolist())):
        n = need(c + p + 1)
        if used + n <= num_pages:
            out[rid] = perm[used:used + n]
            used += n
            owners.append(out[rid])
            continue
        fit = [t for t in owners if len(t) >= n]
        if fit:
            out[rid] = fit[j % len(fit)][:n]
        elif n <= num_pages:  # no earlier request this long (mixed lengths): wrap round the cache
            out[rid] = perm[(used + np.arange(n)) % num_pages]
        else:
            raise NoRoom(f"a draft at {c} tokens needs {n} pages, the sweep's cache has {num_pages}")
    return out


def _pages_needed_all(point: Point, page_size: int) -> int:
    """Pages the pass's requests would take, each its own."""
    need = lambda t: -(-int(t) // page_size)  # noqa: E731
    return (sum(need(c + n) for c, n in point.prefill) + sum(need(c + q) for c, q in point.verifies)
            + sum(need(c + p + 1) for c, p in point.drafts))


def _token_state(point: Point) -> dict[int, tuple[int, int, int]]:
    """rid -> (tokens held, prompt length, drafts held before the pass)."""
    return plan_token_state(point.plan())


def token_resetter(ex, plan, vocab: int):
    """A function putting the requests' token state back as the plan needs it (`plan_token_state`),
    so every repeat of a pass runs on the same state."""
    from spsim.gpu_runtime.executor import RequestTokens

    base = plan_token_state(plan)
    # every position its own token id, as in real prompts: a GEMM's power draw depends on its data,
    # and at the H200's power cap one id repeated through a prompt ran 8K-token prefill passes 2-10 %
    # faster than varied ids (benchmarks/results/engine_passes_tokens_h200.json)
    states = {rid: RequestTokens(np.random.default_rng(rid).integers(0, vocab, n).tolist(), prompt)
              for rid, (n, prompt, _) in base.items()}

    def reset():
        for rid, st in states.items():
            n, _, nd = base[rid]
            del st.tokens[n:]
            st.drafts[:] = [1] * nd
            st.draft_probs.clear()
            st.draft_entropy[:] = [0.0] * nd
            ex.req[rid] = st

    return reset


def plan_token_state(plan) -> dict[int, tuple[int, int, int]]:
    """rid -> (tokens held, prompt length, drafts held before the pass) of a plan's requests: what
    a request must hold for the plan to run on it (benchmarks set it up before each repeat)."""
    st = {}
    for rid, c, n in zip(plan.prefill_ids.tolist(), plan.prefill_context.tolist(), plan.prefill_tokens.tolist()):
        st[rid] = (c + n, c + n, 0)
    for rid, c, p in zip(plan.draft_ids.tolist(), plan.draft_context.tolist(), plan.draft_pos.tolist()):
        st[rid] = (c + 1, max(c, 1), p)
    for rid, c, q in zip(plan.verify_ids.tolist(), plan.verify_context.tolist(), plan.verify_query.tolist()):
        st[rid] = (c + 1, max(c, 1), q - 1)
    return st


class RejectAll:
    """A preset acceptance for timing: every draft rejected, entropies zero, decided on the host
    (the runtime's preset path; calibration repeats a pass from a reset state anyway)."""

    def verify(self, ids, committed, k, context, budget, method):
        return np.zeros(len(ids), np.int64)

    def draft_entropy(self, ids, committed, pos, context, budget, method):
        return np.zeros(len(ids))


class Bench:
    """The model, the cache and the way one point is timed."""

    def __init__(self, model, cache, graphs: bool, min_reps: int = 3, max_reps: int = 10, target_s: float = 0.25,
                 seed: int = 0, pad: bool | None = None, overlap: bool | None = None, shape_rule: bool = False,
                 max_draft: int = ServingConfig.max_draft):
        """`pad`: dummy requests bring passes without prefill to a few shapes, as `spsim run` does
        with CUDA graphs (gpu_runtime/padding.py); None: with graphs. A padding cache holds
        `SCRATCH_PAGES` pages past the ones the points' requests use. `overlap`: repeats run back to
        back, each prepared while the previous one runs, as `spsim run`'s overlapped loop runs a
        trace (engine.py; None: on a GPU); a sample is then the interval between two repeats'
        ends."""
        from spsim.gpu_runtime.padding import SCRATCH_PAGES

        self.model, self.cache = model, cache
        self.graphs = graphs and cache.device.type == "cuda"
        self.pad = self.graphs if pad is None else bool(pad)
        # the runtime's shape rule (gpu_runtime/shapes.py) for the dummies, as `--startup-shapes` runs pad
        self.shape_rule, self.max_draft = bool(shape_rule) and self.pad, int(max_draft)
        self.num_pages = cache.num_pages - (SCRATCH_PAGES if self.pad else 0)  # the requests' pages
        if self.num_pages <= 0:
            raise ValueError(f"a padding cache needs more than {SCRATCH_PAGES} pages")
        self.min_reps, self.max_reps, self.target_s = min_reps, max_reps, target_s
        self.perm = np.random.default_rng(seed).permutation(self.num_pages).astype(np.int64)
        self.dev = cache.device
        self.monitor = None  # a clocks.ClockMonitor: the GPU's clock and power over each point's repeats
        self.overlap = cache.device.type == "cuda" if overlap is None else bool(overlap)

    def _executor(self, point: Point, tables):
        from spsim.gpu_runtime.executor import RuntimeExecutor

        padding = None
        if self.pad:
            from spsim.gpu_runtime.padding import PassPadding

            rule = None
            if self.shape_rule:
                from spsim.gpu_runtime.pass_attention import budget_pages
                from spsim.gpu_runtime.shapes import ShapeRule

                ps = self.cache.page_size
                rule = ShapeRule(ps, self.model.cfg.max_context, self.max_draft if point.group != "ar" else 0,
                                 budget_pages(point.budget, ps))
            padding = PassPadding(self.num_pages, self.cache.page_size, rule=rule)
        # verifications accept nothing, decided on the host as a preset decides in `spsim run`
        # (the overlapped loop needs it; each repeat starts from the same state anyway)
        ex = RuntimeExecutor(self.model, self.cache, Tables(tables), None, lambda rid: [], method=point.method,
                             budget=point.budget, temperature=0.0, seed=0, acceptance=RejectAll(),
                             record_events=False, drafts_possible=point.group != "ar", padding=padding)
        ex.overlap = self.overlap
        for m in getattr(ex, "meta", None) or []:  # Quest bounds of random keys: min <= max, finite
            m.kmin.normal_().abs_().neg_()
            m.kmax.normal_().abs_()
        if self.graphs:  # as `spsim run` sets them up (gpu_runtime/engine.py), but the point's
            # shape is captured at once: every repeat after the first times a replay
            from spsim.gpu_runtime.graphs import GraphedPasses

            ex.graphs = GraphedPasses(self.model, self.cache, capture_after=1)
        return ex

    def run(self, point: Point) -> dict:
        """Time one point: {"seconds": median, "samples", "first_s", "graphed"}."""
        tables = page_tables(point, self.num_pages, self.cache.page_size, self.perm)
        ex = self._executor(point, tables)
        ex.time_gpu = self.dev.type == "cuda"
        reset = token_resetter(ex, point.plan(), self.model.cfg.vocab)
        plan = point.plan()
        self._prime(ex, point, plan, reset)
        reset()
        first = ex.execute(plan).elapsed_s  # compiles kernels, captures the graph
        captures = getattr(ex.graphs, "captures", 0) if ex.graphs is not None else 0
        if captures or first < 0.3:  # a second warm-up: the first replay, or caches of a fast pass
            reset()
            ex.execute(plan)
        replays0 = getattr(ex.graphs, "replays", 0) if ex.graphs is not None else 0
        samples: list[float] = []
        prep: list[float] = []  # host input preparation inside each sample (the runtime's own split)
        gpu: list[float] = []  # the forward on the device (CUDA events: first launch to logits)
        pad0 = ex.padding.stats() if ex.padding is not None else None
        t_a = time.monotonic()
        prev = None
        if self.overlap:
            reset()
            first_tk = ex.launch(plan)
            reset()
            prev = ex.launch(plan)  # prepared while the first runs
            ex.finish(first_tk)  # its interval held its own preparation, the GPU idle: not a sample
        while len(samples) < self.max_reps:
            reset()
            if prev is None:
                samples.append(ex.execute(plan).elapsed_s)
                prep.append(float(ex.last_prep_s))
            else:  # the next repeat is enqueued before this one is waited for
                cur = ex.launch(plan)
                prep.append(float(ex.last_prep_s))
                samples.append(ex.finish(prev).elapsed_s)
                prev = cur
            gpu.append(float(getattr(ex, "last_gpu_s", float("nan"))))
            spent = sum(samples)
            if (len(samples) >= self.min_reps and spent >= self.target_s) or (len(samples) >= 2 and spent >= 1.0):
                break
        if prev is not None:
            ex.finish(prev)
        during = self.monitor.window(t_a, time.monotonic()) if self.monitor is not None else None
        graphed = ex.graphs is not None and getattr(ex.graphs, "replays", 0) > replays0
        # drafting requests that share pages with others (the cache is smaller than the pass's KV):
        # a draft reading every page (step-layer's layer 0, Quest scoring) then hits L2 more
        shared = _pages_needed_all(point, self.cache.page_size) > self.num_pages
        out = {"seconds": statistics.median(samples), "samples": [round(s, 7) for s in samples],
               "prep_s": [round(s, 7) for s in prep], "first_s": round(first, 6), "graphed": bool(graphed),
               "shared_pages": bool(shared)}
        if ex.time_gpu:
            out["gpu_s"] = [round(s, 7) for s in gpu]
        if during is not None:  # SM clock and power over the repeats (clocks.py)
            out["during"] = during
        if pad0 is not None:  # what the dummies added to the point's pass (the timed runs' mean)
            d = {k: v - pad0[k] for k, v in ex.padding.stats().items()}
            n = len(samples)
            out["padding"] = {"padded": d["padded_passes"] > 0, "dummy_requests": d["dummy_requests"] / n,
                              "filler_tokens": d["filler_tokens"] / n}
        return out

    @staticmethod
    def _prime(ex, point: Point, plan: PassPlan, reset) -> None:
        """State a draft reads from earlier passes: verify-attn ranks pages by the scores the
        last verification wrote (one q=1 verification just before the run); a later draft of a
        verify-refreshed method reuses its run's first draft's selection (that draft, once)."""
        n = len(plan.draft_ids)
        if not n or point.method not in (DraftMethod.VERIFY_QUEST, DraftMethod.VERIFY_ATTN):
            return
        ids, ctx = plan.draft_ids, plan.draft_context
        if point.method == DraftMethod.VERIFY_ATTN:
            reset()
            for rid in ids.tolist():
                ex.req[rid].drafts.clear()
            ex.execute(PassPlan(verify_ids=ids, verify_query=np.ones(n, np.int64),
                                verify_context=np.maximum(ctx - 1, 0)))
        later = plan.draft_pos > 0
        if later.any():
            reset()
            for rid in ids[later].tolist():
                ex.req[rid].drafts.clear()
            k = int(later.sum())
            ex.execute(PassPlan(draft_ids=ids[later], draft_context=ctx[later], draft_budget=plan.draft_budget,
                                draft_method=plan.draft_method, draft_pos=np.zeros(k, np.int64)))


# ---------------------------------------------------------------------------- the sweep

def runtime_facts(graphs: bool, overlap: bool = False) -> dict:
    """What the runtime does that its cost model must price alike (recorded in each measuring run's header, read by
    the fit: `CalibratedParams.prefill_graph_tokens`, `prefill_split`)."""
    from spsim.gpu_runtime.graphs import PREFILL_GRAPH_TOKENS
    from spsim.gpu_runtime.pass_attention import SPLIT_PREFILL

    return {"prefill_graph_tokens": PREFILL_GRAPH_TOKENS if graphs else 0, "prefill_split": bool(SPLIT_PREFILL),
            # passes timed back to back, each prepared while the previous ran (Bench.overlap):
            # the profile prices the overlapped loop of `spsim run`
            "overlap": bool(overlap)}


def _package_file(name: str) -> Path:
    """A file of the spsim package ("gpu_runtime/attention.py", "buckets.py") where it is: in a
    source checkout spsim.gpu_runtime is the top-level gpu_runtime/ folder, installed it is
    spsim/gpu_runtime/ (found without importing the sub-package)."""
    pkg, _, file = name.rpartition("/")
    spec = importlib.util.find_spec(f"spsim.{pkg}" if pkg else "spsim")
    return Path(next(iter(spec.submodule_search_locations))) / file


def kernel_version() -> str:
    """Hash of the runtime's source files that decide a pass's time."""
    h = hashlib.sha1()
    for name in KERNEL_FILES:
        p = _package_file(name)
        h.update(p.read_bytes() if p.exists() else b"")
    return h.hexdigest()[:12]


def _git() -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                           text=True, timeout=5)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info(model, cache, dev, kv_pages_allocatable: int, free_bytes: int | None) -> dict:
    import torch

    try:
        import triton

        triton_v = triton.__version__
    except ImportError:
        triton_v = None
    cfg = model.cfg
    info = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": str(dev), "device_name": (torch.cuda.get_device_name(dev) if dev.type == "cuda"
                                            else platform.processor() or platform.machine() or "cpu"),
        "memory_bytes": (torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda" else None),
        "free_bytes_after_weights": free_bytes,
        "model_name": cfg.name, "model_shape": {k: getattr(cfg, k) for k in (
            "hidden", "layers", "q_heads", "kv_heads", "head_dim", "intermediate", "vocab", "max_context",
            "tied_embeddings", "qkv_bias")},
        "dtype": str(model.dtype).replace("torch.", ""), "kv_dtype": str(cache.k.dtype).replace("torch.", ""),
        "page_size": cache.page_size, "kv_pages_allocatable": int(kv_pages_allocatable),
        "sweep_cache_pages": cache.num_pages,
        "versions": {"torch": torch.__version__, "triton": triton_v, "numpy": np.__version__,
                     "python": platform.python_version()},
        "cuda": getattr(torch.version, "cuda", None), "kernel_version": kernel_version(), "git": _git(),
    }
    return info


class _Progress:
    """A rich progress bar with ETA where rich is installed and the output is a terminal; plain
    lines otherwise (every 10 points or 20 s)."""

    def __init__(self, total: int, log):
        self.log, self.total, self.done, self.t_last = log, total, 0, time.monotonic()
        self.bar = None
        try:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
            if not self.bar.console.is_terminal:
                self.bar = None
        except ImportError:
            pass
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task("calibrating", total=total)

    def grow(self, n: int = 1) -> None:
        self.total += n
        if self.bar is not None:
            self.bar.update(self.task, total=self.total)

    def step(self, label: str, failed: int) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=f"{label:<22} failed {failed}")
        elif self.done % 10 == 0 or time.monotonic() - self.t_last > 20 or self.done == self.total:
            self.t_last = time.monotonic()
            self.log(f"  {self.done}/{self.total} points ({label}), {failed} failed")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def measure(out: str | Path, model_name: str = ServingConfig.model, device: str = "cuda", design: str = "default",
            deadline: float | None = None, page_size: int = ServingConfig.page_size, dtype: str | None = None,
            graphs: bool = True, cpu_kv_pages: int = 4096, log=print, bench_kw: dict | None = None,
            max_points: int | None = None, pad: bool | None = None, anchor: bool = True, extra_points: list | None = None,
            retime_spread: float | None = None, shape_rule: bool = False) -> dict:
    """Measure the design's points missing from `out` (appending each as it is taken) until done,
    `deadline` (time.monotonic()) or `max_points` in this run; returns counts. `design`: default
    or smoke. `pad`: passes padded with dummy requests as `spsim run` pads them (None: with CUDA
    graphs); a measurements file holds padded or unpadded passes, not both. `anchor`: re-measure
    the drift controls (`design.anchor_points`) every `ANCHOR_EVERY` points and at the end.
    `extra_points`: more points to measure beside the design's (`trace_points.read_points`); those
    whose requests' KV would not fit the sweep's cache or the model's window are skipped, counted.
    `shape_rule`: padded passes padded by the runtime's shape rule (`--startup-shapes` runs; a
    file holds one rule or the other).
    `retime_spread`: points whose repeats spread wider are timed once more at the end (`noisy`);
    None: `RETIME_SPREAD` on a GPU, off on the CPU (the reference paths' wall clock is noisy)."""
    from spsim.gpu_runtime.padding import SCRATCH_PAGES

    import torch

    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config

    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SpsimError("no CUDA GPU on this machine: `spsim calibrate --gpu` measures this machine's GPU "
                         "(refit elsewhere with `spsim calibrate --from MEASUREMENTS.jsonl`)")
    cfg = get_config(model_name)
    sessions, done = read_measurements(out)
    padded = (graphs and dev.type == "cuda") if pad is None else bool(pad)
    for s in sessions:
        if s.get("model_name") not in (None, cfg.name) or s.get("page_size") not in (None, page_size):
            raise SpsimError(f"{out}: measurements of {s.get('model_name')} (page size {s.get('page_size')}); "
                             f"this sweep is {cfg.name} (page size {page_size}): use another --measurements file")
        if bool(s.get("shape_rule", False)) != (padded and bool(shape_rule)):
            raise SpsimError(f"{out}: its passes were padded {'by' if s.get('shape_rule') else 'without'} the shape "
                             f"rule and this sweep pads them {'by' if shape_rule else 'without'} it: use another "
                             "--measurements file")
        if bool(s.get("padded", False)) != padded:  # files from before padding have no key: unpadded
            raise SpsimError(f"{out}: its passes were measured {'with' if s.get('padded') else 'without'} padding "
                             f"and this sweep runs them {'with' if padded else 'without'} (as `spsim run` does "
                             f"{'with' if padded else 'without'} CUDA graphs): use another --measurements file")
    done_keys = {m.point.key for m in done}
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
    if dtype is not None and dtype not in tdt:
        raise SpsimError(f"--dtype must be one of {', '.join(tdt)} (got {dtype!r})")
    torch_dtype = tdt[dtype] if dtype else (torch.bfloat16 if dev.type == "cuda" else None)
    t0 = time.monotonic()
    log(f"building {cfg.name} (random weights) on {dev} ...")
    model = Transformer.random(cfg, seed=0, device=dev, dtype=torch_dtype)
    bpp = PagedKVCache.bytes_per_page(cfg, page_size, model.dtype)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        free, _ = torch.cuda.mem_get_info(dev)
        allocatable = int(free * MEM_FRAC) // bpp
        sweep_max = int(free * SWEEP_FRAC) // bpp
    else:
        free, allocatable = None, cpu_kv_pages
        sweep_max = cpu_kv_pages
    make = {"default": default_design, "smoke": smoke_design}[design]
    points = make(cfg.max_context, sweep_max * page_size)
    extra_skipped = 0
    if extra_points:
        given = _unique(list(extra_points))
        fit = [p for p in given if _pages_needed_all(p, page_size) <= sweep_max and p.max_tokens() <= cfg.max_context]
        extra_skipped = len(given) - len(fit)
        have = {p.key for p in points}
        points = points + [p for p in fit if p.key not in have]
        log(f"{len(fit)} extra points ({len(given)} given; {extra_skipped} skipped: their KV exceeds the sweep's "
            f"{sweep_max * page_size:,} tokens or the model's {cfg.max_context:,}-token window)")
    todo = sweep_order([p for p in points if p.key not in done_keys])
    if retime_spread is None:
        retime_spread = RETIME_SPREAD if dev.type == "cuda" else math.inf
    # noisy points of earlier runs are timed again after the new ones (this run's after it)
    again = {p.key: sp for p, sp in noisy(done, points, retime_spread)}
    todo += sweep_order([p for p in points if p.key in again])
    if not todo:
        log(f"all {len(points)} points of the {design} design are in {out} already")
        return {"measured": 0, "failed": 0, "skipped": len(points), "left": 0, "design": len(points), "retimed": 0}
    anchors = anchor_points(cfg.max_context, sweep_max * page_size) if anchor else []
    pages = min(sweep_max, max(_pages_needed_all(p, page_size) for p in todo + anchors))  # drafts on their own pages
    cache = PagedKVCache(cfg, pages + (SCRATCH_PAGES if padded else 0), page_size, device=dev, dtype=model.dtype)
    cache.k.normal_()
    cache.v.normal_()
    info = machine_info(model, cache, dev, allocatable, free)
    info["design"] = design
    if extra_points:
        info["extra_points"] = {"given": len(_unique(list(extra_points))), "skipped": extra_skipped}
    info["padded"] = padded
    info["shape_rule"] = padded and bool(shape_rule)
    info["token_ids"] = "random"  # per position (token_resetter); sweeps before 2026-12-02 repeated one id per request
    bench = Bench(model, cache, graphs, pad=padded, shape_rule=shape_rule, **(bench_kw or {}))
    info.update(runtime_facts(graphs and dev.type == "cuda", overlap=bench.overlap))
    info["sweep_cache_pages"] = pages  # the requests' pages (the dummies' scratch pages come after)
    log(f"{info['device_name']}: {allocatable:,} KV pages allocatable ({page_size} tokens), sweep cache "
        f"{pages:,} pages; {len(todo)} of {len(points)} points to measure "
        f"({len(points) - len(todo)} already in {out}); setup {time.monotonic() - t0:.0f} s")
    writer = Writer(out)
    writer.session(info)
    if dev.type == "cuda":
        bench.monitor = ClockMonitor.start(dev.index or 0)
    counts = {"measured": 0, "failed": 0, "skipped": len(points) - len(todo) + len(again), "left": 0,
              "design": len(points), "retimed": 0}
    walls: list[float] = []
    prog = _Progress(len(todo), log)
    ctx = _device_context(dev)
    anchors = [a for a in anchors if _pages_needed_all(a, page_size) <= bench.num_pages]
    t_start = time.monotonic()

    def measure_anchors(after: int) -> None:
        for a in anchors:
            rec = {"anchor": a.key, "label": f"anchor:{a.label}", "after": after,
                   "t_s": round(time.monotonic() - t_start, 3), "point": a.to_dict()}
            try:
                rec.update(bench.run(a), ok=True)
            except Exception as e:  # noqa: BLE001  (a control that fails is recorded, the sweep goes on)
                rec.update(ok=False, error=f"{type(e).__name__}: {str(e)[:200]}")
            clocks = _clocks(dev)
            if clocks:
                rec["clocks"] = clocks
            writer.write(rec)

    try:
        with ctx:
            for i, p in enumerate(todo):
                est = 1.5 * (statistics.median(walls) if walls else 2.0)
                if (deadline is not None and time.monotonic() + est > deadline) or i == max_points:
                    counts["left"] = len(todo) - i
                    break
                if i % ANCHOR_EVERY == 0:
                    measure_anchors(i)
                rec = {"id": p.key, "group": p.group, "label": p.label, "heldout": p.heldout, "point": p.to_dict(),
                       "t_s": round(time.monotonic() - t_start, 3)}
                if p.key in again:  # timed before with repeats this far apart
                    rec["retime"] = {"spread": again.pop(p.key)}
                    counts["retimed"] += 1
                w0 = time.monotonic()
                failed = False
                try:
                    rec.update(bench.run(p), ok=True)
                    counts["measured"] += 1
                except NoRoom as e:
                    rec.update(ok=False, error=f"no room: {e}")
                    counts["failed"] += 1
                except Exception as e:  # noqa: BLE001  (recorded with its reason; the sweep goes on)
                    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    rec.update(ok=False, error=f"{type(e).__name__}: {msg}"[:400])
                    counts["failed"] += 1
                    failed = True
                rec["wall_s"] = round(time.monotonic() - w0, 3)
                walls.append(rec["wall_s"])
                writer.write(rec)
                sp = spread(rec) if rec.get("ok") and "retime" not in rec else None
                if sp is not None and sp > retime_spread:  # once more at the end of the queue
                    again[p.key] = round(sp, 4)
                    todo.append(p)
                    prog.grow()
                prog.step(p.label, counts["failed"])
                if failed:
                    _recover(dev, p)
                elif dev.type == "cuda":  # the point's graphs and Quest bounds back to the device
                    torch.cuda.empty_cache()
            if counts["measured"] + counts["failed"]:
                measure_anchors(counts["measured"] + counts["failed"])
    finally:
        prog.close()
        writer.close()
        if bench.monitor is not None:
            bench.monitor.close()
    return counts


def spread(rec: dict) -> float | None:
    """(max - min) / median of a record's repeats, device times where it has them (the fit's
    target), else wall times; None without two finite samples."""
    xs = [x for x in (rec.get("gpu_s") or rec.get("samples") or [])
          if isinstance(x, (int, float)) and math.isfinite(x) and x > 0]
    if len(xs) < 2:
        return None
    return (max(xs) - min(xs)) / statistics.median(xs)


def noisy(done: list, points: list, limit: float = RETIME_SPREAD) -> list:
    """Points of this design measured with repeats spread wider than `limit` and not
    timed again yet: a transient (clock change, an allocation, another process) crossed them, so
    their median may not be the pass's steady cost. Each is timed once more at the end of a
    sweep; the fit keeps a point's last record. Chosen by the repeats alone, never by the fit."""
    wanted = {p.key: p for p in points}
    last = {m.point.key: m for m in done}
    out = []
    for key, m in last.items():
        if key in wanted and m.ok and not m.record.get("retime"):
            sp = spread(m.record)
            if sp is not None and sp > limit:
                out.append((wanted[key], round(sp, 4)))
    return out


def _clocks(dev) -> dict | None:
    """The GPU's clocks, power and temperature now (nvidia-smi), or None where there is none."""
    if dev.type != "cuda":
        return None
    q = "clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu"
    try:
        idx = dev.index if dev.index is not None else 0
        r = subprocess.run(["nvidia-smi", f"--id={idx}", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=5)
        vals = [v.strip() for v in r.stdout.strip().split(",")]
        return {k: float(v) for k, v in zip(q.split(","), vals) if v.replace(".", "", 1).isdigit()} or None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _device_context(dev):
    if dev.type == "cpu":  # the runtime on the CPU runs the PyTorch reference paths (engine.run_trace)
        from spsim.gpu_runtime.dispatch import reference_only

        return reference_only()
    import contextlib

    return contextlib.nullcontext()


def _recover(dev, point: Point) -> None:
    """After a failed point: free what it held; a GPU that cannot synchronise any more (an illegal
    access poisons the CUDA context) ends the sweep, the failure recorded."""
    gc.collect()
    if dev.type != "cuda":
        return
    import torch

    try:
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
    except Exception as e:  # noqa: BLE001
        raise SpsimError(f"the GPU failed at point {point.key} ({point.label}) and cannot continue ({e}); "
                         "run the same command again to resume after it") from None
