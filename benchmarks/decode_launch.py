"""Launch gaps in decode passes: programmatic dependent launch (PDL) on and off, A/B.

    python3 benchmarks/decode_launch.py [--model llama-3.1-8b] [--out FILE] [--variants 1] [--blas cublaslt]
    SPSIM_ROPE_WRITE=0 python3 benchmarks/decode_launch.py --variants 1     # RoPE, K/V write: two kernels
    SPSIM_GEMV=0 python3 benchmarks/decode_launch.py --variants 1           # one-token GEMMs on cuBLAS

A batch-1 decode of an 8B model at 32K is ~400 kernels of a few microseconds in one CUDA graph;
the gaps between them are a visible share of the pass. Each variant (`--variants`, PDL 0/1) is
captured as its own CUDA graph over the same model and cache and timed over `--rounds` rounds of
10 replays (median of the rounds' medians), with a check that the variants' logits agree bit for
bit. Random weights, bf16. Run one variant per process (`--variants 0`, then `--variants 1`): with
both in one process an H200 run stopped on an illegal memory access in the replays (not seen with
one variant per process, nor in the GPU tests, which switch PDL within a process; not understood).
Result of record: benchmarks/results/decode_launch_h200.json (the default variant).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
from harness import emit, header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    from runtime import add_blas_option, graphed, random_model, switches, timed

    from spsim.gpu_runtime import pdl
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention
    from spsim.plan import DraftMethod

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--out", default=None)
    ap.add_argument("--points", default="1x32768,1x4096,16x32768,4x120000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default="0,1", help="PDL 0/1, comma-separated (one per process: see above)")
    add_blas_option(ap)
    args = ap.parse_args()
    dev, bw, lc, model, wbytes = random_model(args)
    ps = 16
    points = [tuple(int(x) for x in p.split("x")) for p in args.points.split(",")]
    pages = max(b * (c + 64) for b, c in points) // ps + 64
    cache = PagedKVCache(lc, pages, ps, device=dev, dtype=torch.bfloat16)
    cache.k.normal_()
    cache.v.normal_()
    kv_tok = PagedKVCache.bytes_per_page(lc, ps, torch.bfloat16) / ps
    perm = np.random.default_rng(0).permutation(pages)
    variants = [dict(pdl=bool(int(v))) for v in args.variants.split(",")]
    rows = []
    for b, ctx in points:
        n = -(-(ctx + 1) // ps)
        tabs = [perm[i * n:(i + 1) * n].tolist() for i in range(b)]
        tok = torch.randint(0, lc.vocab, (b,), device=dev)
        replays, logits = [], []
        for v in variants:
            pdl.ENABLED = v["pdl"]
            attn = PassAttention(cache, list(range(b)), tabs, [ctx] * b, [1] * b, 0, DraftRows(),
                                 int(DraftMethod.STATIC), 2048, {}, None)
            logits.append(model(tok, attn.positions, attn).float().cpu())
            replays.append(graphed(lambda a=attn: model(tok, a.positions, a), dev))
        same = all(torch.equal(logits[0], x) for x in logits[1:])
        ms = [[] for _ in variants]
        for _ in range(args.rounds):
            for i, r in enumerate(replays):
                ms[i].append(timed(r, dev))
        floor = (wbytes + b * ctx * kv_tok) / (bw * 1e12) * 1e3
        for v, m in zip(variants, ms):
            rows.append({"batch": b, "context": ctx, **switches(), **v,  # the variant's PDL over the switch's
                         "ms_graph": round(statistics.median(m), 4),
                         "rounds": [round(x, 4) for x in m], "floor_ms": round(floor, 3),
                         "ratio_graph": round(statistics.median(m) / floor, 4), "same_logits": same})
            print(rows[-1], flush=True)
        del replays
        torch.cuda.empty_cache()
    out = {**header("decode_launch"),
           "model": args.model, "copy_tb_s": round(bw, 3), "weights_gib": round(wbytes / 2**30, 2),
           "method": "CUDA-graph replay of one decode pass per variant, median of 10 replays per round, "
                     f"{args.rounds} interleaved rounds; floor = (weights + KV) / copy bandwidth",
           "rows": rows}
    emit(out, args.out)


if __name__ == "__main__":
    main()
