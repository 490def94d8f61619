"""Host (Python/numpy) time the runtime spends preparing one forward pass, on the CPU.

What is timed is everything the host does before the model's kernels would launch:
`RuntimeExecutor.execute` up to the forward (the executor's request loop, `PassAttention`: page
lists, draft rows, padding, the per-pass input tensors), the attention work plans
(`plan_attention`, padded as with CUDA graphs) and, with graphs, the copy of the pass's inputs
into the captured pass's static buffers (`GraphedPasses` with `capture=False`: the same buffer
path without a graph). The model is a stub that records when it is entered and returns zero
logits: its time is not counted. `dispatch.use_triton` is forced True so the host takes the
GPU's path (fused KV-write run lengths, attention plans) on the CPU.

Passes have the Llama-3.1-8B shape (8 KV heads, 32 query heads, head dim 128, pages of 16
tokens); each request has its own pages, scattered over the cache as a long-running pool
leaves them. Medians over many repeats; every repeat is the same pass (token state put back, as
calibration/measure.py does).

    python benchmarks/host_prep.py --label before   # then, after a change:
    python benchmarks/host_prep.py --label after    # merged into benchmarks/results/host_prep_cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # a checkout without an install
OUT = ROOT / "benchmarks" / "results" / "host_prep_cpu.json"

from spsim.plan import DRAFT_BUDGET, DraftMethod, PassPlan  # noqa: E402
from spsim.calibration.measure import token_resetter  # noqa: E402


# ---------------------------------------------------------------------------- the passes
def _ints(x):
    return np.asarray(x, np.int64)


def decode(n: int, ctx: int, rid0: int = 0) -> dict:
    return dict(verify_ids=_ints(range(rid0, rid0 + n)), verify_query=np.ones(n, np.int64),
                verify_context=np.full(n, ctx - 1, np.int64))


def verify(n: int, ctx: int, q: int, rid0: int = 0) -> dict:
    return dict(verify_ids=_ints(range(rid0, rid0 + n)), verify_query=np.full(n, q, np.int64),
                verify_context=np.full(n, ctx - 1, np.int64))


def drafts(n: int, ctx: int, method: int, pos: int = 0, rid0: int = 0) -> dict:
    return dict(draft_ids=_ints(range(rid0, rid0 + n)), draft_context=np.full(n, ctx - 1, np.int64),
                draft_budget=DRAFT_BUDGET, draft_method=int(method),
                draft_pos=np.full(n, pos, np.int64))


def prefill(ctx: int, tokens: int, rid: int) -> dict:
    return dict(prefill_ids=_ints([rid]), prefill_tokens=_ints([tokens]), prefill_context=_ints([ctx]),
                prefill_last=np.zeros(1, bool))


def passes() -> dict[str, tuple[int, PassPlan]]:
    """name -> (draft-KV method, plan)."""
    K32, K4 = 32768, 4096
    return {
        "decode_16x32k": (DraftMethod.STATIC, PassPlan(**decode(16, K32))),
        "decode_64x4k": (DraftMethod.STATIC, PassPlan(**decode(64, K4))),
        "draft_static_8x32k": (DraftMethod.STATIC, PassPlan(**drafts(8, K32, DraftMethod.STATIC))),
        "draft_static_8x32k_pos2": (DraftMethod.STATIC, PassPlan(**drafts(8, K32, DraftMethod.STATIC, pos=2))),
        "draft_verify_quest_8x32k_first": (DraftMethod.VERIFY_QUEST,
                                           PassPlan(**drafts(8, K32, DraftMethod.VERIFY_QUEST))),
        "draft_verify_quest_8x32k_later": (DraftMethod.VERIFY_QUEST,
                                           PassPlan(**drafts(8, K32, DraftMethod.VERIFY_QUEST, pos=2))),
        "draft_step_layer_8x32k": (DraftMethod.STEP_LAYER, PassPlan(**drafts(8, K32, DraftMethod.STEP_LAYER))),
        "verify_16x9_32k": (DraftMethod.STATIC, PassPlan(**verify(16, K32, 9))),
        "fixed_k_16draft_16verify_32k": (DraftMethod.STATIC, PassPlan(
            **drafts(16, K32, DraftMethod.STATIC, pos=1), **verify(16, K32, 5, rid0=100))),
        "prefill128_plus_16decode_16k": (DraftMethod.STATIC, PassPlan(
            **prefill(4096, 128, rid=200), **decode(16, 16384))),
    }


# ---------------------------------------------------------------------------- the stubs
class StubCache:
    """What the host side reads of a `PagedKVCache` (no KV tensors: nothing runs on them)."""

    def __init__(self, cfg, num_pages: int, page_size: int = 16, device="cpu"):
        self.cfg, self.num_pages, self.page_size = cfg, num_pages, page_size
        self.device = torch.device(device)
        self.k = torch.zeros(1, dtype=cfg.torch_dtype, device=self.device)  # dtype only


class StubModel:
    """Records when the forward is entered, builds the attention plans as the first attention
    call would (cached in `attn`: graphs build them before, in `shape_key`), returns zero logits."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.entered = 0.0
        self.plan_s = 0.0

    def __call__(self, tokens, positions, attn, logit_rows=None):
        self.entered = time.perf_counter()
        for L in attn.graph_lists():
            attn._plan(L, self.cfg.q_heads)
        self.plan_s = time.perf_counter() - self.entered
        n = len(logit_rows) if logit_rows is not None else int(tokens.shape[0])
        return torch.zeros((n, self.cfg.vocab), device=attn.cache.device)


class Tables:
    def __init__(self, tables):
        self.tables = tables

    def table(self, rid):
        return self.tables[rid]


def _tables(plan: PassPlan, page_size: int, seed: int = 0) -> tuple[dict[int, np.ndarray], int]:
    """Each request its own pages (a few spare ones past its context), scattered; and the pool size."""
    need = {}
    for rid, c, n in zip(plan.prefill_ids, plan.prefill_context, plan.prefill_tokens):
        need[int(rid)] = -(-int(c + n) // page_size)
    for rid, c, p in zip(plan.draft_ids, plan.draft_context, plan.draft_pos):
        need[int(rid)] = -(-int(c + p + 1) // page_size)
    for rid, c, q in zip(plan.verify_ids, plan.verify_context, plan.verify_query):
        need[int(rid)] = -(-int(c + q) // page_size)
    total = sum(need.values()) + 2 * len(need)
    perm = np.random.default_rng(seed).permutation(total).astype(np.int64)
    out, used = {}, 0
    for rid, n in need.items():
        out[rid] = perm[used:used + n + 2]
        used += n + 2
    return out, total


DEVICE = ["cpu"]  # --device: "cuda" times the host path with device tensors (uploads, launches)


def _executor(cfg, method: int, plan: PassPlan, graphs: bool):
    from spsim.gpu_runtime.executor import RuntimeExecutor
    from spsim.gpu_runtime.graphs import GraphedPasses
    from spsim.gpu_runtime.padding import SCRATCH_PAGES, PassPadding

    tables, pages = _tables(plan, 16)
    cache = StubCache(cfg, pages + SCRATCH_PAGES, device=DEVICE[0])
    model = StubModel(cfg)
    ex = RuntimeExecutor(model, cache, Tables(tables), None, lambda rid: [], method=method, budget=DRAFT_BUDGET,
                         record_events=False, padding=PassPadding(pages, 16) if graphs else None)
    if graphs:
        ex.graphs = GraphedPasses(model, cache, capture=False, capture_after=1)
    return ex, model, token_resetter(ex, plan, cfg.vocab)


def time_pass(cfg, method: int, plan: PassPlan, graphs: bool, reps: int, warm: int = 3) -> dict:
    """Median host preparation per pass (ms): up to the forward's entry, plus the attention plans."""
    ex, model, reset = _executor(cfg, method, plan, graphs)
    prep, exec_prep = [], []
    for i in range(warm + reps):
        reset()
        if DEVICE[0] != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        ex.execute(plan)
        if i >= warm:
            prep.append(model.entered - t0 + model.plan_s)
            exec_prep.append(ex.last_prep_s)
    ms = lambda xs: round(1e3 * statistics.median(xs), 4)  # noqa: E731
    return {"prep_ms": ms(prep), "executor_last_prep_ms": ms(exec_prep),
            "p10_ms": round(1e3 * float(np.percentile(prep, 10)), 4),
            "p90_ms": round(1e3 * float(np.percentile(prep, 90)), 4), "reps": reps}


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        git = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        git = None
    return {"platform": platform.platform(), "cpu": cpu, "cores": __import__("os").cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "git": git,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def main() -> None:
    from spsim.gpu_runtime import dispatch
    from spsim.gpu_runtime.model_config import get_config

    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="after", help="the column the medians are stored under (before/after)")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--only", default=None, help="substring of the pass names to run")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--profile", action="store_true", help="cProfile the selected passes instead (graphed)")
    a = ap.parse_args()

    DEVICE[0] = a.device
    dispatch.use_triton = lambda device: True  # the GPU's host path (plans, fused-write run lengths)
    torch.set_num_threads(1)
    cfg = get_config("llama-3.1-8b").replace(layers=2, vocab=1024)  # host work does not depend on either
    sel = {k: v for k, v in passes().items() if a.only is None or a.only in k}
    if a.profile:
        import cProfile
        import pstats

        for name, (m, plan) in sel.items():
            ex, model, reset = _executor(cfg, m, plan, graphs=True)
            for _ in range(3):
                reset()
                ex.execute(plan)
            prof = cProfile.Profile()
            for _ in range(a.reps):
                reset()
                prof.enable()
                ex.execute(plan)
                prof.disable()
            print(f"== {name}")
            pstats.Stats(prof).sort_stats(a.sort).print_stats(a.top)
        return

    out = Path(a.out)
    res = json.loads(out.read_text()) if out.exists() else {"passes": {}}
    res["what"] = ("host preparation per pass on the CPU (ms, median): RuntimeExecutor.execute up to the "
                   "model's forward + attention plans (plan_attention, padded) + graph input staging "
                   f"(GraphedPasses capture=False); Llama-3.1-8B shape, page size 16, draft budget {DRAFT_BUDGET}")
    res.setdefault("machine", {})[a.label] = machine()
    for name, (m, plan) in sel.items():
        row = res["passes"].setdefault(name, {})
        for graphs in (True, False):
            key = "graphed" if graphs else "eager"
            r = time_pass(cfg, m, plan, graphs, a.reps)
            row.setdefault(key, {})[a.label] = r
            b, f = row[key].get("before"), row[key].get("after")
            if b and f:
                row[key]["speedup"] = round(b["prep_ms"] / f["prep_ms"], 2)
            print(f"{name:34s} {key:8s} {a.label}: {r['prep_ms']:.3f} ms (executor {r['executor_last_prep_ms']:.3f})"
                  + (f"  x{row[key]['speedup']}" if b and f else ""), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
