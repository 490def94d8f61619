"""Full-attention decode tiles, timed as a forward pass runs them (the `layers` method of
`attention_grid.py`: R layers with their own KV, back to back in one CUDA graph).

    python3 benchmarks/decode_tiles.py --out r.json [--points 1x32768,16x32768,8x65536,4x120000]

Why: the short tile (BLOCK_N 128, 8 warps) was chosen for sparse drafts; NOTES.md measured
BLOCK_N 64 / 4 warps faster on full decode at b=16 32K (518 vs 548 us) and b=1 128K under
do_bench. A plain decode step reads all of its KV through this tile, so its choice decides how
close the `ar` step gets to the memory floor. Per point: every tile x split size, us per layer and
TB/s of the K+V bytes read. Sparse draft points (2K budget) keep both tiles honest.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from attention import DT, HKV, HQ, D, KV_BYTES_PER_TOKEN, Cache, meta, random_selection  # noqa: E402
from attention_grid import n_layers, timed_layers  # noqa: E402

from spsim.gpu_runtime import attention as A  # noqa: E402
from spsim.gpu_runtime.pages import selected_page_lists  # noqa: E402

TILES = [(128, 8, 3), (64, 4, 3), (64, 4, 4), (64, 4, 2), (128, 4, 3), (64, 8, 3), (32, 4, 3)]


def decode_point(batch: int, ctx: int, ps: int, splits: list[int | None], rows: list) -> None:
    nbytes = batch * ctx * KV_BYTES_PER_TOKEN
    R = max(2, n_layers(nbytes, nbytes))
    caches = [Cache(batch, ctx, ps, dense=False) for _ in range(R)]
    q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
    for bn, nw, st in TILES:
        for tps in splits:
            if tps is not None and tps % bn:
                continue
            try:
                plans = [A.plan_attention(np.ones(batch, np.int64), c.full_lists(), HQ, block_n=bn, num_warps=nw,
                                          num_stages=st, tokens_per_split=tps) for c in caches]
                ms = timed_layers([lambda c=c, p=p: A.mixed_attention(q1, c.k, c.v, p) for c, p in zip(caches, plans)])
            except Exception as e:  # noqa: BLE001 (shared-memory overflow of a tile): recorded
                print(f"  b={batch} ctx={ctx} {bn}/{nw}/{st} split {tps}: {type(e).__name__} {str(e)[:120]}", flush=True)
                ms = None
            p = plans[0] if ms is not None else None
            rows.append({"part": "decode", "batch": batch, "ctx": ctx, "block_n": bn, "num_warps": nw, "num_stages": st,
                         "tokens_per_split": p.tokens_per_split if p else tps, "items": int(p.work.shape[0]) if p else None,
                         "fused_merge": bool(p.fused_merge) if p else None, "layers": R,
                         "us": None if ms is None else round(ms * 1e3, 2),
                         "tb_s": None if ms is None else round(nbytes / ms / 1e9, 3)})
            if ms is not None:
                print(f"decode b={batch:3d} ctx={ctx:6d} {bn:3d}/{nw}/{st} split {p.tokens_per_split:6d} items {p.work.shape[0]:4d} "
                      f"{ms*1e3:8.1f} us {nbytes/ms/1e9:5.2f} TB/s", flush=True)
    del caches
    torch.cuda.empty_cache()


def draft_point(batch: int, ctx: int, ps: int, rows: list, budget: int = 2048) -> None:
    nbytes = batch * budget * KV_BYTES_PER_TOKEN
    R = max(2, min(32, n_layers(nbytes, batch * ctx * KV_BYTES_PER_TOKEN)))
    caches = [Cache(batch, ctx, ps, dense=False) for _ in range(R)]
    q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
    kp = budget // ps
    gen = torch.Generator(device="cuda").manual_seed(0)
    lists = []
    for c in caches:
        sel = random_selection(batch, c.npg, kp, gen)
        lists.append(selected_page_lists(c.page_table, sel, np.full(batch * HKV, kp), np.full(batch, ctx), HKV, ps))
    for bn, nw, st in TILES:
        try:
            plans = [A.plan_attention(np.ones(batch, np.int64), li, HQ, block_n=bn, num_warps=nw, num_stages=st)
                     for li in lists]
            ms = timed_layers([lambda c=c, p=p: A.mixed_attention(q1, c.k, c.v, p) for c, p in zip(caches, plans)])
        except Exception as e:  # noqa: BLE001
            print(f"  draft b={batch} {bn}/{nw}/{st}: {type(e).__name__} {str(e)[:120]}", flush=True)
            ms = None
        rows.append({"part": "draft", "batch": batch, "ctx": ctx, "budget": budget, "block_n": bn, "num_warps": nw,
                     "num_stages": st, "layers": R, "us": None if ms is None else round(ms * 1e3, 2),
                     "tb_s": None if ms is None else round(nbytes / ms / 1e9, 3)})
        if ms is not None:
            print(f"draft  b={batch:3d} ctx={ctx:6d} {bn:3d}/{nw}/{st} {ms*1e3:8.1f} us {nbytes/ms/1e9:5.2f} TB/s", flush=True)
    del caches
    torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1x32768,16x32768,8x65536,4x120000")
    ap.add_argument("--drafts", default="1x32768,16x32768")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows: list = []
    for pt in filter(None, a.points.split(",")):
        b, c = map(int, pt.split("x"))
        splits = [None, 1024, 2048, 4096] if b == 1 else [None]
        decode_point(b, c, a.page_size, splits, rows)
    for pt in filter(None, a.drafts.split(",")):
        b, c = map(int, pt.split("x"))
        draft_point(b, c, a.page_size, rows)
    out = {"benchmark": "decode_tiles", **meta(), "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
