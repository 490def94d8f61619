"""Where a decode pass's GPU time goes: torch.profiler over one eager pass of the runtime's forward
(Llama-3.1-8B shape, random bf16 weights, KV of random values), kernels grouped by name.

    python3 benchmarks/runtime_profile.py [--batch 16] [--context 32768] [--out FILE.json]
    python3 benchmarks/runtime_profile.py --mixed [--method verify-quest] [--out FILE.json]

`--mixed`: the issue's mixed pass instead: `batch` drafting requests (first drafts of their runs
at a 2K budget, so page selection is included; `--draft-pos 1` for later drafts) + `--verifiers`
(default `batch`) verifying 9 tokens, `context` each (the drafting rows alias the verifying ones'
pages); kernels grouped into attention, page selection, linear layers, sampling/logits and small
ops, beside the host's input preparation for the pass and the pass replayed from a CUDA graph.
`--mixed --verifiers 0 --draft-pos 1` is a drafting pass of later drafts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/runtime.py (graph timing)


def main() -> None:
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--out", default=None)
    ap.add_argument("--mixed", action="store_true")
    ap.add_argument("--method", default="verify-quest")
    ap.add_argument("--verifiers", type=int, default=None, help="--mixed: verifying requests (default: --batch)")
    ap.add_argument("--draft-pos", type=int, default=0, help="--mixed: the drafts' position in their run (0: first)")
    a = ap.parse_args()
    if a.mixed:
        return mixed(a)
    dev = torch.device("cuda")
    lc = get_config(a.model)
    model = Transformer.random(lc, seed=0, device=dev, dtype=torch.bfloat16)
    ps, b, ctx = 16, a.batch, a.context
    n = -(-(ctx + 1) // ps)
    cache = PagedKVCache(lc, b * n + 8, ps, device=dev, dtype=torch.bfloat16)
    perm = np.random.default_rng(0).permutation(b * n)
    tabs = [perm[i * n:(i + 1) * n].tolist() for i in range(b)]
    attn = PassAttention(cache, list(range(b)), tabs, [ctx] * b, [1] * b, 0, DraftRows(), 0, 2048, {}, None)
    tok = torch.randint(0, lc.vocab, (b,), device=dev)
    for _ in range(3):
        model(tok, attn.positions, attn)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            model(tok, attn.positions, attn)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        dt = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if dt > 0 and e.device_type.name == "CUDA":
            rows.append({"kernel": e.key[:90], "calls_per_pass": e.count / 5, "us_per_pass": round(dt / 5, 1)})
    rows.sort(key=lambda r: -r["us_per_pass"])
    total = sum(r["us_per_pass"] for r in rows)
    for r in rows[:25]:
        print(f"{r['us_per_pass']:9.1f} us  {r['calls_per_pass']:6.1f}x  {r['kernel']}")
    print(f"total GPU kernel time per pass: {total / 1e3:.2f} ms")
    if a.out:
        Path(a.out).write_text(json.dumps({"batch": b, "context": ctx, "model": a.model, "total_ms": round(total / 1e3, 3),
                                           "kernels": rows}, indent=1) + "\n")


GROUPS = (("attention", ("_mixed_attn", "_merge", "attn")), ("page selection", ("quest", "topk", "gather", "index",
                                                                                   "masked_fill", "where")),
          ("linear layers", ("gemm", "sm90", "cutlass", "nvjet", "matmul", "xmma")),
          ("sampling and logits", ("softmax", "argmax", "scatter", "cumsum", "searchsorted")))


def group_of(name: str) -> str:
    n = name.lower()
    for g, keys in GROUPS:
        if any(k in n for k in keys):
            return g
    return "small ops (norms, rope, activations, copies)"


def mixed(a) -> None:
    import time

    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention
    from spsim.gpu_runtime.selection import PageMeta
    from spsim.plan import DraftMethod

    dev = torch.device("cuda")
    lc = get_config(a.model)
    model = Transformer.random(lc, seed=0, device=dev, dtype=torch.bfloat16)
    ps, b, ctx, k = 16, a.batch, a.context, 8
    method = int(DraftMethod.parse(a.method))
    n = -(-(ctx + k + 1) // ps)
    m = max(b, a.batch if a.verifiers is None else a.verifiers)
    cache = PagedKVCache(lc, m * n + 8, ps, device=dev, dtype=torch.bfloat16)
    cache.k.normal_()
    cache.v.normal_()
    meta = [PageMeta(cache.num_pages, lc.kv_heads, lc.head_dim, torch.bfloat16, dev) for _ in range(lc.layers)]
    for m_ in meta:  # bounds of random keys: any finite values time the same
        m_.kmin.normal_()
        m_.kmax.normal_()
    nv = b if a.verifiers is None else a.verifiers
    pos = a.draft_pos
    perm = np.random.default_rng(0).permutation(m * n)
    tv = [perm[i * n:(i + 1) * n].tolist() for i in range(m)]
    # a run's draft at position `pos` holds its context + pos drafts + itself
    drafts = DraftRows(list(range(b)), [ctx + pos + 1] * b, [pos == 0] * b, [ctx] * b)
    quest = method in (int(DraftMethod.VERIFY_QUEST), int(DraftMethod.STEP_QUEST))

    def build():
        return PassAttention(cache, list(range(b + nv)), tv[:b] + tv[:nv], [ctx + pos] * b + [ctx] * nv,
                             [1] * b + [k + 1] * nv, 0, drafts, method, 2048, None, meta if quest else None,
                             list(range(b, b + nv)))

    t0 = time.perf_counter()
    for _ in range(10):
        attn = build()
    prep_ms = (time.perf_counter() - t0) / 10 * 1e3
    tok = torch.randint(0, lc.vocab, (b + nv * (k + 1),), device=dev)
    rows = torch.arange(tok.shape[0], device=dev)
    for _ in range(3):
        model(tok, attn.positions, attn, logit_rows=rows)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            model(tok, attn.positions, attn, logit_rows=rows)
        torch.cuda.synchronize()
    groups: dict[str, float] = {}
    kernels = []
    for e in prof.key_averages():
        dt = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if dt > 0 and e.device_type.name == "CUDA":
            g = group_of(e.key)
            groups[g] = groups.get(g, 0.0) + dt / 5
            kernels.append({"kernel": e.key[:90], "group": g, "us_per_pass": round(dt / 5, 1)})
    kernels.sort(key=lambda r: -r["us_per_pass"])
    total = sum(groups.values())
    from runtime import graphed, timed  # noqa: E402  (benchmarks/runtime.py: the pass replayed from a graph)

    graph_ms = timed(graphed(lambda: model(tok, attn.positions, attn, logit_rows=rows), dev), dev)
    res = {"pass": f"{b} drafting ({a.method}, draft position {pos}, 2K budget) + {nv} verifying {k + 1} tokens, "
                   f"{ctx} context", "graph_ms": round(graph_ms, 3),
           "model": a.model, "gpu_kernel_ms": round(total / 1e3, 3), "host_prep_ms": round(prep_ms, 3),
           "by_group_ms": {g: round(v / 1e3, 3) for g, v in sorted(groups.items(), key=lambda x: -x[1])},
           "kernels": kernels[:40],
           "note": "GPU kernel time of an eager pass (torch.profiler, 5 passes); the runtime replays such passes "
                   "from a CUDA graph, which removes launch gaps but not kernel time. host_prep_ms: building the "
                   "pass's inputs (page lists, work plan, selection indices) on the host, median of 10"}
    print(json.dumps(res, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
