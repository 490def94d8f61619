"""Runtime speed on a GPU: the model's passes against the memory floor and the roofline model.

    python3 benchmarks/runtime.py [--model llama-3.1-8b] [--out benchmarks/results/runtime_h200.json]

- `copy_tb_s`: device copy bandwidth measured in this run (a 4 GiB copy), the floor's ruler.
- `ar_step`: one plain decode pass (every request verifies one token) at batch x context, timed
  over a KV cache whose pages hold random values (a decode's time does not depend on them):
  `ms` (median of repeats after warm-up, eager PyTorch + Triton attention) and `ms_graph` (the same
  forward captured in one CUDA graph: what the runtime reaches once it captures graphs) against
  `floor_ms` = (weights + the KV read) / copy bandwidth, and the roofline's prediction.
- `mixed`: 16 drafting (first drafts) at a 2K budget per draft-KV method (`--mixed-methods`; static: no
  selection cost) + 16 verifying 9 tokens,
  32K each, against the roofline's prediction for that plan. The drafting requests' page tables
  alias the verifying ones' (32 x 32K of KV does not fit beside the weights).
Random weights of the model's real shape, bf16. Writes JSON with machine, versions and date.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from harness import emit, header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install (the GPU machine)


def copy_bandwidth(dev) -> float:
    n = 4 << 30
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize(dev)
    ts = []
    for _ in range(10):
        t0 = time.perf_counter()
        b.copy_(a)
        torch.cuda.synchronize(dev)
        ts.append(time.perf_counter() - t0)
    del a, b
    return 2 * n / statistics.median(ts) / 1e12  # read + write


def timed(fn, dev, repeat=10, warm=3) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize(dev)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def graphed(fn, dev):
    """`fn` captured once in a CUDA graph (after warm-up runs, which also build the attention
    plans and selections the capture then reuses); returns its replay."""
    fn()
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream(dev).wait_stream(side)
    torch.cuda.synchronize(dev)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def switches() -> dict:
    """The runtime's A/B switches this run had (environment, `--blas`), so results say which variant ran."""
    from spsim.gpu_runtime import gemv, kv_write, pdl

    return {"pdl": pdl.ENABLED, "rope_write": kv_write.ROPE_WRITE, "gemv": gemv.ENABLED,
            **({"gemv_table": os.environ["SPSIM_GEMV_TABLE"]} if os.environ.get("SPSIM_GEMV_TABLE") else {}),
            "blas": str(torch.backends.cuda.preferred_blas_library()).rsplit(".", 1)[-1].lower()}


def add_blas_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--blas", choices=("default", "cublas", "cublaslt"), default="default",
                    help="torch's BLAS library for the linear layers, a process-wide choice (cuBLASLt may pick "
                         "one-token GEMMs without split-K reduce kernels); SPSIM_PDL=0, SPSIM_ROPE_WRITE=0 and "
                         "SPSIM_GEMV=0 (or SPSIM_GEMV_TABLE) are the environment's switches; results record them")


def random_model(args):
    """(device, copy bandwidth TB/s, model config, random bf16 model, weight bytes) of `--model`,
    with the BLAS option applied: what the runtime benchmarks start from."""
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config

    dev = torch.device("cuda")
    apply_blas(args)
    bw = copy_bandwidth(dev)
    lc = get_config(args.model)
    model = Transformer.random(lc, seed=0, device=dev, dtype=torch.bfloat16)
    return dev, bw, lc, model, sum(p.numel() * p.element_size() for p in model.parameters())


def apply_blas(args) -> None:
    if args.blas != "default":
        torch.backends.cuda.preferred_blas_library(args.blas)


def main() -> None:
    from spsim.cost import make_cost_model
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention
    from spsim.gpu_runtime.selection import PageMeta
    from spsim.plan import DraftMethod, PassPlan

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--out", default=None)
    add_blas_option(ap)
    ap.add_argument("--points", default="1x32768,16x32768,8x65536,4x120000")
    ap.add_argument("--mixed-methods", default="static,verify-quest,step-layer", help="'' for none")
    ap.add_argument("--short-tile", default=None, help="BLOCK_N,warps,stages of the short (decode/draft) tile, "
                    "to time another tile than the runtime's SHORT_TILE")
    args = ap.parse_args()
    from spsim.gpu_runtime import attention as A
    if args.short_tile:
        A.SHORT_TILE = tuple(int(x) for x in args.short_tile.split(","))
    dev, bw, lc, model, wbytes = random_model(args)
    cm = make_cost_model(args.model, "h200")
    ps = 16
    points = [tuple(int(x) for x in p.split("x")) for p in args.points.split(",")]
    max_tokens = max(b * (c + 64) for b, c in points)
    pages = max_tokens // ps + 64
    cache = PagedKVCache(lc, pages, ps, device=dev, dtype=torch.bfloat16)
    cache.k.normal_()
    cache.v.normal_()
    kv_tok = PagedKVCache.bytes_per_page(lc, ps, torch.bfloat16) / ps
    out = {**header("runtime"),
           "model": args.model, "dtype": "bf16", "copy_tb_s": round(bw, 3), "weights_gib": round(wbytes / 2**30, 2),
           "method": "the model's forward as the runtime runs it today (eager PyTorch + Triton attention: `ms`) "
                     "and the same forward captured in one CUDA graph (`ms_graph`: as the runtime replays passes without "
                     "prefill); median of 10 after 3 warm-up",
           "short_tile": list(A.SHORT_TILE), "runtime_switches": switches(), "ar_step": [], "mixed": []}
    rng = np.random.default_rng(0)
    perm = rng.permutation(pages)

    def tables(b, ctx, extra):
        n = -(-(ctx + extra) // ps)
        return [perm[i * n:(i + 1) * n].tolist() for i in range(b)]

    for b, ctx in points:
        tabs = tables(b, ctx, 1)
        attn = PassAttention(cache, list(range(b)), tabs, [ctx] * b, [1] * b, 0, DraftRows(), int(DraftMethod.STATIC),
                             2048, {}, None)
        tok = torch.randint(0, lc.vocab, (b,), device=dev)
        ms = timed(lambda: model(tok, attn.positions, attn), dev)
        ms_g = timed(graphed(lambda: model(tok, attn.positions, attn), dev), dev)
        floor = (wbytes + b * ctx * kv_tok) / (bw * 1e12) * 1e3
        plan = PassPlan(verify_ids=np.arange(b), verify_query=np.ones(b, np.int64), verify_context=np.full(b, ctx))
        out["ar_step"].append({"batch": b, "context": ctx, "ms": round(ms, 3), "floor_ms": round(floor, 3),
                               "ratio": round(ms / floor, 3), "ms_graph": round(ms_g, 3),
                               "ratio_graph": round(ms_g / floor, 3), "roofline_ms": round(cm.time(plan) * 1e3, 3)})
        print(out["ar_step"][-1], flush=True)
    # mixed: 16 drafting (2K budget) + 16 verifying 9 tokens, 32K; static window (no selection cost)
    # and the selecting methods the policies use (verify-quest: a run's first draft ranks pages by
    # Quest bounds; step-layer: layer 0 attends in full and ranks them for the other layers)
    ctx, nd, nv, k = 32768, 16, 16, 8
    # 32 x 32K of KV (128 GiB) does not fit beside the weights: the drafting requests share the
    # verifying ones' pages (they read only their 2K budget; timing does not depend on values)
    tv = tables(nv, ctx, k + 1)
    tabs = tv[:nd] + tv
    drafts = DraftRows(list(range(nd)), [ctx + 1] * nd, [True] * nd, [ctx] * nd)
    meta = [PageMeta(cache.num_pages, lc.kv_heads, lc.head_dim, torch.bfloat16, dev) for _ in range(lc.layers)]
    for m_ in meta:  # bounds of random keys: any finite values time the same
        m_.kmin.normal_()
        m_.kmax.normal_()
    tok = torch.randint(0, lc.vocab, (nd + nv * (k + 1),), device=dev)
    byts = wbytes + (nv * (ctx + k + 1) + nd * 2048) * kv_tok
    quest = (DraftMethod.VERIFY_QUEST, DraftMethod.STEP_QUEST)  # Quest bounds kept only for these (as the runtime)
    for name in filter(None, args.mixed_methods.split(",")):
        method = DraftMethod.parse(name)
        attn = PassAttention(cache, list(range(nd + nv)), tabs, [ctx] * (nd + nv), [1] * nd + [k + 1] * nv, 0, drafts,
                             int(method), 2048, None, meta if method in quest else None, list(range(nd, nd + nv)))
        ms = timed(lambda: model(tok, attn.positions, attn), dev)
        ms_g = timed(graphed(lambda: model(tok, attn.positions, attn), dev), dev)
        plan = PassPlan(draft_ids=np.arange(nd), draft_context=np.full(nd, ctx), draft_budget=2048,
                        draft_method=int(method), draft_pos=np.zeros(nd, np.int64),
                        verify_ids=np.arange(nd, nd + nv), verify_query=np.full(nv, k + 1),
                        verify_context=np.full(nv, ctx))
        rl = cm.time(plan) * 1e3
        out["mixed"].append({"drafting": nd, "verifying": nv, "verify_query": k + 1, "context": ctx, "budget": 2048,
                             "method": method.label,
                             "first_draft": True, "ms": round(ms, 3), "ms_graph": round(ms_g, 3),
                             "roofline_ms": round(rl, 3), "ratio_graph_to_roofline": round(ms_g / rl, 3),
                             "bytes_floor_ms": round(byts / (bw * 1e12) * 1e3, 3)})
        print(out["mixed"][-1], flush=True)
        del attn
    emit(out, args.out)


if __name__ == "__main__":
    main()
