"""The issue-5 grid of record, each point timed two ways in the same process.

    python3 benchmarks/attention_grid.py --out r.json [--parts decode,draft,select,mixed] [--quick]

- `flush`: `triton.testing.do_bench` over a CUDA-graph replay (the v1-v5 method of
  `benchmarks/attention.py`). Its L2 flush is a `zero_()` of 256 MiB, which leaves L2 full of dirty
  lines; their write-back lands inside the timed kernel (~9 us of a 50 us draft; gpu_runtime/NOTES.md, "How it is timed").
- `layers`: as a forward pass runs attention. R layers, each with its own KV cache (its own
  allocation, page table and selection), are launched back to back in one CUDA graph; time per
  layer = replay time / R. R is chosen so the layers together read at least 4x the L2 before any
  byte is read again, so every read is cold without a flush (the method note's "rotate among
  several input sets"). Launch gaps inside the graph count, as they do in a real forward.
SDPA (flash) and FlexAttention get exactly the same treatment as our kernels. Bandwidth = bytes
the kernel must read (K and V of the listed tokens) / time.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from attention import (D, DT, HKV, HQ, KV_BYTES_PER_TOKEN, Cache, _no_nan, flex_sparse, meta,  # noqa: E402
                       random_selection, sdpa, timed)

from spsim.gpu_runtime import attention as A  # noqa: E402
from spsim.gpu_runtime import selection as S  # noqa: E402
from spsim.gpu_runtime.pages import concat_page_lists, full_page_lists, selected_page_lists  # noqa: E402
from spsim.gpu_runtime.quest import quest_scores, topk_pages  # noqa: E402

GIB = 1 << 30
MEM_CAP = 96 * GIB  # KV of all layers alive at once (H200: 141 GB)
MAX_LAYERS = 32  # Llama-3.1-8B has 32
torch._dynamo.config.cache_size_limit = 64  # one Flex compile serves every layer's mask; never fall back to eager
DRAFT_VARIANTS = {"v6": {}, "merge-launch": dict(fused_merge=False), "bn64-w4": dict(block_n=64, num_warps=4)}
SINGLE = False  # set after an OOM: retry the point with one layer (flush timing only)


def l2_bytes() -> int:
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 << 20))


def n_layers(read_bytes: int, layer_bytes: int) -> int:
    """Layers so that R reads cover 4x the L2, within the memory cap; 0 if two do not fit."""
    r = min(MAX_LAYERS, max(2, math.ceil(4 * l2_bytes() / max(read_bytes, 1))))
    r = min(r, MEM_CAP // max(layer_bytes, 1))
    return int(r) if r >= 2 and not SINGLE else 0


def timed_layers(fns, reps: int = 40) -> float:
    """Median ms per layer of the layers' launches replayed back to back from one CUDA graph."""
    for f in fns:
        f()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    for _ in range(3):
        g.replay()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    return float(np.median([a.elapsed_time(b) for a, b in ev])) / len(fns)


def both(fns) -> dict:
    """{'flush': ms of layer 0 under do_bench, 'layers': ms per layer} (None where it failed)."""
    out = {"flush": None, "layers": None}
    try:
        out["flush"] = timed(fns[0])
        if len(fns) >= 2:
            out["layers"] = timed_layers(fns)
    except Exception as e:  # noqa: BLE001 (OOM, compile failure): recorded as null, printed
        print(f"  timing failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
    return out


def _ratio(a, b):
    return None if a is None or b is None else a / b


def _tbps(nbytes, t):
    return None if t is None else nbytes / t / 1e9


def point_full(batch, ctx, ps, rows, k1=9):
    nbytes = batch * ctx * KV_BYTES_PER_TOKEN
    R = n_layers(nbytes, 2 * nbytes)  # paged + dense copy
    caches = [Cache(batch, ctx, ps) for _ in range(max(R, 1))]
    q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
    q9 = torch.randn((batch * k1, HQ, D), device="cuda", dtype=DT)
    q9d = q9.view(batch, k1, HQ, D).transpose(1, 2)
    p1 = [A.plan_attention(np.ones(batch, np.int64), c.full_lists(), HQ) for c in caches]
    p9 = [A.plan_attention(np.full(batch, k1), c.full_lists(), HQ) for c in caches]
    p1m = [A.plan_attention(np.ones(batch, np.int64), c.full_lists(), HQ, fused_merge=False) for c in caches]
    t = {
        "ours_decode_merge_launch": both([lambda c=c, p=p: A.mixed_attention(q1, c.k, c.v, p) for c, p in zip(caches, p1m)]),
        "sdpa_decode": both([lambda c=c: sdpa(q1.view(batch, HQ, 1, D), c.kd, c.vd) for c in caches]),
        "ours_decode": both([lambda c=c, p=p: A.mixed_attention(q1, c.k, c.v, p) for c, p in zip(caches, p1)]),
        "ours_verify": both([lambda c=c, p=p: A.mixed_attention(q9, c.k, c.v, p) for c, p in zip(caches, p9)]),
        "sdpa_verify": both([lambda c=c: sdpa(q9d, c.kd, c.vd, causal_q=k1) for c in caches]),
    }
    for m in ("flush", "layers"):
        sd, od, ov, sv = (t[n][m] for n in ("sdpa_decode", "ours_decode", "ours_verify", "sdpa_verify"))
        rows.append({"part": "decode", "timing": m, "layers": R if m == "layers" else 1, "batch": batch, "ctx": ctx,
                     "page_size": ps, "bytes": nbytes, "sdpa_ms": sd, "ours_ms": od, "sdpa_tbps": _tbps(nbytes, sd),
                     "ours_tbps": _tbps(nbytes, od), "ratio_to_sdpa_bw": _ratio(sd, od), "items": int(p1[0].work.shape[0]),
                     "merges": int(p1[0].merge.shape[0]), "ours_merge_launch_ms": t["ours_decode_merge_launch"][m]})
        rows.append({"part": "verify", "timing": m, "layers": R if m == "layers" else 1, "batch": batch, "ctx": ctx,
                     "page_size": ps, "query": k1, "bytes": nbytes, "ours_ms": ov, "ours_decode_ms": od,
                     "verify_over_decode": _ratio(ov, od), "sdpa_ms": sv, "sdpa_verify_over_sdpa_decode": _ratio(sv, sd)})
        if od is not None:
            print(f"{m:6s} R={R:2d} b={batch:3d} ctx={ctx:6d} decode {od*1e3:8.1f}us "
                  f"(merge launch {(t['ours_decode_merge_launch'][m] or float('nan'))*1e3:.1f}) {nbytes/od/1e9:.2f}TB/s = "
                  f"{(_ratio(sd, od) or float('nan'))*100:.0f}% of sdpa; verify {(_ratio(ov, od) or float('nan')):.2f}x "
                  f"(sdpa {(_ratio(sv, sd) or float('nan')):.2f}x)", flush=True)
    del caches


def point_draft(batch, ctx, ps, rows, budget=2048, flex=True):
    nbytes = batch * budget * KV_BYTES_PER_TOKEN
    full = batch * ctx * KV_BYTES_PER_TOKEN
    dense = flex and 2 * full * 2 <= MEM_CAP
    R = n_layers(nbytes, full * (2 if dense else 1))
    bp = budget // ps
    layers = []
    for i in range(max(R, 1)):
        c = Cache(batch, ctx, ps, dense=dense)
        gen = torch.Generator(device="cuda").manual_seed(ctx + batch + 1000 * i)
        sel = random_selection(batch, c.npg, bp, gen)
        lists = selected_page_lists(c.page_table, sel, np.full(batch * HKV, bp), np.full(batch, ctx), HKV, ps)
        layers.append((c, sel, lists))
    q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
    t = {}
    for name, kw in DRAFT_VARIANTS.items():
        plans = [A.plan_attention(np.ones(batch, np.int64), lists, HQ, **kw) for _, _, lists in layers]
        t[name] = both([lambda c=c, p=p: A.mixed_attention(q1, c.k, c.v, p) for (c, _, _), p in zip(layers, plans)])
    t["flex"] = t["flex_shared"] = {"flush": None, "layers": None}
    if dense:
        t["flex"] = both([flex_sparse(c, sel, bp) for c, sel, _ in layers])
        t["flex_shared"] = both([flex_sparse(c, sel, bp, shared=True) for c, sel, _ in layers])
    for m in ("flush", "layers"):
        ours = t["v6"][m]
        rows.append({"part": "draft", "timing": m, "layers": R if m == "layers" else 1, "batch": batch, "ctx": ctx,
                     "page_size": ps, "budget": budget, "bytes": nbytes, "ours_ms": ours, "ours_tbps": _tbps(nbytes, ours),
                     "flex_ms": t["flex"][m], "speedup_vs_flex": _ratio(t["flex"][m], ours),
                     "flex_shared_lists_ms": t["flex_shared"][m],
                     "speedup_vs_flex_shared_lists": _ratio(t["flex_shared"][m], ours),
                     "variants_ms": {n: t[n][m] for n in DRAFT_VARIANTS}})
        if ours is not None:
            print(f"{m:6s} R={R:2d} b={batch:3d} ctx={ctx:6d} draft {ours*1e3:7.1f}us {nbytes/ours/1e9:.2f}TB/s "
                  f"vs flex {(_ratio(t['flex'][m], ours) or float('nan')):.2f}x; variants "
                  + " ".join(f"{n} {(t[n][m] or float('nan'))*1e3:.1f}" for n in DRAFT_VARIANTS), flush=True)
    del layers


def point_select(batch, ctx, ps, rows, budget=2048):
    full = batch * ctx * KV_BYTES_PER_TOKEN
    R = n_layers(full, full + full // ps)
    kv = np.full(batch, ctx)
    counts = S.selection_counts(kv, np.full(batch, budget), ps, 1, 1, HKV)
    cnt = torch.as_tensor(counts, dtype=torch.int32, device="cuda")
    k = int(counts.max())
    q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
    layers = []
    for _ in range(max(R, 1)):
        c = Cache(batch, ctx, ps, dense=False)
        m = S.PageMeta(c.k.shape[0], HKV, D, DT, "cuda")
        m.kmin.copy_(c.k.amin(2))  # what append maintains, set here in one go
        m.kmax.copy_(c.k.amax(2))
        npg = torch.full((batch,), c.npg, dtype=torch.int32, device="cuda")
        layers.append((c, m, npg, A.plan_attention(np.ones(batch, np.int64), c.full_lists(), HQ)))
    t_sel = both([lambda m=m, c=c, n=n: topk_pages(quest_scores(q1, m, c.page_table, n, 1, 1), cnt, k)
                  for c, m, n, _ in layers])
    t_dec = both([lambda c=c, p=p: A.mixed_attention(q1, c.k, c.v, p) for c, _, _, p in layers])
    for mth in ("flush", "layers"):
        rows.append({"part": "select", "timing": mth, "layers": R if mth == "layers" else 1, "batch": batch, "ctx": ctx,
                     "page_size": ps, "budget": budget, "score_topk_ms": t_sel[mth], "decode_ms": t_dec[mth],
                     "fraction_of_decode": _ratio(t_sel[mth], t_dec[mth])})
        if t_sel[mth] is not None:
            print(f"{mth:6s} R={R:2d} b={batch:3d} ctx={ctx:6d} score+topk {t_sel[mth]*1e3:7.1f}us = "
                  f"{(_ratio(t_sel[mth], t_dec[mth]) or float('nan'))*100:.1f}% of decode", flush=True)
    del layers


def point_mixed(batch, ctx, ps, rows, budget=2048, k1=9):
    """Half the batch drafts (2K budget), half verifies (k+1 = 9), one launch; against the time
    its bytes take at the decode bandwidth SDPA and ours reach on the same batch."""
    half = batch // 2
    bp = budget // ps
    nbytes = (half * budget + (batch - half) * ctx) * KV_BYTES_PER_TOKEN
    full = batch * ctx * KV_BYTES_PER_TOKEN
    R = n_layers(nbytes, 2 * full)
    q_len = np.array([1] * half + [k1] * (batch - half))
    q = torch.randn((int(q_len.sum()), HQ, D), device="cuda", dtype=DT)
    qd = torch.randn((batch, HQ, 1, D), device="cuda", dtype=DT)
    layers = []
    for i in range(max(R, 1)):
        c = Cache(batch, ctx, ps)
        gen = torch.Generator(device="cuda").manual_seed(ctx + 1000 * i)
        sel = random_selection(half, c.npg, bp, gen)
        dl = selected_page_lists(c.page_table[:half], sel, np.full(half * HKV, bp), np.full(half, ctx), HKV, ps)
        fl = full_page_lists(list(c.tables[half:]), np.full(batch - half, ctx), HKV, ps, "cuda")
        layers.append((c, A.plan_attention(q_len, concat_page_lists([dl, fl]), HQ),
                       A.plan_attention(np.ones(batch, np.int64), c.full_lists(), HQ)))
    t = {"mixed": both([lambda c=c, p=p: A.mixed_attention(q, c.k, c.v, p) for c, p, _ in layers]),
         "sdpa_decode": both([lambda c=c: sdpa(qd, c.kd, c.vd) for c, _, _ in layers]),
         "ours_decode": both([lambda c=c, p=p: A.mixed_attention(qd.view(batch, HQ, D), c.k, c.v, p) for c, _, p in layers])}
    for m in ("flush", "layers"):
        tm, sd, od = t["mixed"][m], t["sdpa_decode"][m], t["ours_decode"][m]
        ideal_sdpa = None if sd is None else nbytes / (full / sd)
        ideal_ours = None if od is None else nbytes / (full / od)
        rows.append({"part": "mixed", "timing": m, "layers": R if m == "layers" else 1, "batch": batch, "ctx": ctx,
                     "page_size": ps, "budget": budget, "query": k1, "bytes": nbytes, "ours_ms": tm,
                     "sdpa_decode_tbps": _tbps(full, sd), "ours_decode_tbps": _tbps(full, od),
                     "over_ideal": _ratio(tm, ideal_sdpa), "over_ideal_at_ours_decode_bw": _ratio(tm, ideal_ours)})
        if tm is not None:
            print(f"{m:6s} R={R:2d} b={batch:3d} ctx={ctx:6d} mixed {tm*1e3:8.1f}us = {(_ratio(tm, ideal_sdpa) or float('nan')):.2f}x "
                  f"its bytes at sdpa decode bw, {(_ratio(tm, ideal_ours) or float('nan')):.2f}x at ours", flush=True)
    del layers


GRID = {
    "decode": [(b, c) for c in (32768, 65536, 131072) for b in (1, 2, 4, 8, 16, 32, 64)],
    "draft": [(b, c) for c in (32768, 131072) for b in (1, 4, 16, 32, 64)],
    "select": [(b, 32768) for b in (8, 16, 32, 64)],
    "mixed": [(b, 32768) for b in (8, 16, 32, 64)],
}
QUICK = {"decode": [(1, 32768), (16, 32768)], "draft": [(16, 32768)], "select": [(8, 32768)], "mixed": [(32, 32768)]}
POINT = {"decode": point_full, "draft": point_draft, "select": point_select, "mixed": point_mixed}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="draft,mixed,select,decode")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="one or two points per part")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--contexts", default="", help="comma list: replaces the decode and draft contexts")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    rows: list[dict] = []
    t0 = time.time()
    grid = QUICK if a.quick else dict(GRID)
    if a.contexts:
        ctxs = [int(c) for c in a.contexts.split(",")]
        grid["decode"] = [(b, c) for c in ctxs for b in (1, 2, 4, 8, 16, 32, 64)]
        grid["draft"] = [(b, c) for c in ctxs for b in (1, 4, 16, 32, 64)]
    global SINGLE
    for part in a.parts.split(","):
        for b, ctx in grid[part]:
            for single in (False, True):  # after an OOM, once more with one layer
                SINGLE = single
                try:
                    if part == "draft":
                        point_draft(b, ctx, a.page_size, rows, flex=not a.no_flex)
                    else:
                        POINT[part](b, ctx, a.page_size, rows)
                    break
                except torch.OutOfMemoryError as e:
                    print(f"OOM at {part} b={b} ctx={ctx} (single layer: {single}): {str(e)[:100]}", flush=True)
                    gc.collect()
                    torch.cuda.empty_cache()
            torch.cuda.empty_cache()
            doc = {**meta(), "l2_bytes": l2_bytes(), "argv": sys.argv[1:], "wall_s": round(time.time() - t0, 1),
                   "method": __doc__, "rows": rows}
            with open(a.out, "w") as f:  # after every point, so a timeout keeps what was measured
                json.dump(_no_nan(doc), f, indent=1)
    return rows


if __name__ == "__main__":
    main()
