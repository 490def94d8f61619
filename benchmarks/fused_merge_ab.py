"""Attention alone at batch-1 and small-batch decode shapes: the split units merged in the
attention kernel (`fused`, the last split to finish merges) or by the merge launch, with programmatic
dependent launch (PDL) on and off; R layers per CUDA graph (`attention_grid.timed_layers`).
Outputs must agree bit for bit.

    OUT=dir python3 benchmarks/fused_merge_ab.py       # writes dir/merge_ab.json

benchmarks/results/fused_merge_ab_h200.json was measured at commit 221e620, whose fused merge read
64/BLOCK_M partials per step after a global max (since reverted: it slowed the main loop).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

POINTS = [(1, 32768), (1, 65536), (1, 131072), (4, 32768), (16, 32768)]


def main() -> None:
    from attention import DT, HQ, D, KV_BYTES_PER_TOKEN, Cache
    from attention_grid import n_layers, timed_layers

    from spsim.gpu_runtime import attention as A
    from spsim.gpu_runtime import pdl

    rows = []
    for b, ctx in POINTS:
        nbytes = b * ctx * KV_BYTES_PER_TOKEN
        R = max(2, n_layers(nbytes, nbytes))
        caches = [Cache(b, ctx, 16, dense=False) for _ in range(R)]
        q1 = torch.randn((b, HQ, D), device="cuda", dtype=DT)
        outs = {}
        for fused in (False, True):
            for on in (False, True):
                pdl.ENABLED = on
                plans = [A.plan_attention(np.ones(b, np.int64), c.full_lists(), HQ, fused_merge=fused) for c in caches]
                o = A.mixed_attention(q1, caches[0].k, caches[0].v, plans[0])
                outs[(fused, on)] = o.float().cpu()
                ms = timed_layers([lambda c=c, p=p: A.mixed_attention(q1, c.k, c.v, p) for c, p in zip(caches, plans)])
                p = plans[0]
                r = dict(batch=b, ctx=ctx, fused=fused, pdl=on, items=int(p.work.shape[0]),
                         splits=int(p.merge[:, 4].max()) if p.merge.shape[0] else 1, block_n=p.block_n,
                         us=round(ms * 1e3, 2), tb_s=round(nbytes / ms / 1e9, 3))
                rows.append(r)
                print(r, flush=True)
        base = outs[(False, False)]
        print("max diff vs separate merge:", {str(k): float((v - base).abs().max()) for k, v in outs.items()}, flush=True)
        del caches
        torch.cuda.empty_cache()
    Path(os.environ.get("OUT", "."), "merge_ab.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
