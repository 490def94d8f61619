"""Attention kernels on the GPU against torch SDPA (flash) and FlexAttention, Llama-3.1-8B layer shape.

    python3 benchmarks/attention.py --part decode,verify --batches 1,8,64 --contexts 32768 --out r.json

Parts: decode (full, 1 query), verify (k+1 = 9 queries), draft (sparse, 2K-token budget, random
page lists per KV head; FlexAttention on the same pages), select (Quest scoring + top pages),
mixed (half drafting, half verifying in one launch), v5 (the draft at b=16/32/64 and decode at b=1/16
with each V5_VARIANTS short-tile loop; `--batches` is ignored for it). Every time is the median of
`triton.testing.do_bench` (L2 flushed before each run) over a CUDA-graph replay, so host launch
overhead is out. Bandwidth = bytes the kernel must read (K and V of the listed tokens) / time.

Arms dropped with the kernel variants they timed (removed 2026-11-30 in commit 4fdc60a;
gpu_runtime/NOTES.md): the `--sweep` "v3" arm (page ids loaded in-iteration, v3 merge and split
policy) and the v5 register-loop arms r1, r1ev, r2ev, r2ev-bn64 (K/V of the next blocks in
registers, L2 evict_first hint). Their results (in git history) were measured with the code before
that commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time

import numpy as np
import torch
import triton

from spsim.gpu_runtime import attention as A
from spsim.gpu_runtime import selection as S
from spsim.gpu_runtime.pages import PageLists, full_page_lists, pages_for, selected_page_lists

HQ, HKV, D = 32, 8, 128
DT = torch.bfloat16
KV_BYTES_PER_TOKEN = HKV * D * 2 * 2  # K and V, bf16


def timed(fn, graph=True) -> float:
    """Median ms; the function replayed from a CUDA graph when it can be captured."""
    fn()
    fn()
    torch.cuda.synchronize()
    run = fn
    if graph:
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            run = g.replay
        except Exception as e:  # noqa: BLE001
            print(f"  (no graph: {type(e).__name__}: {str(e)[:80]})")
            torch.cuda.synchronize()
    return triton.testing.do_bench(run, warmup=20, rep=100, return_mode="median")


class Cache:
    """B requests of `ctx` tokens: a dense copy for SDPA/Flex, a paged copy on shuffled pages."""

    def __init__(self, batch: int, ctx: int, ps: int, dense=True):
        self.batch, self.ctx, self.ps = batch, ctx, ps
        npg = pages_for(ctx, ps)
        self.npg = int(npg)
        n_phys = batch * self.npg
        gen = torch.Generator(device="cuda").manual_seed(batch * 7919 + ctx)
        self.k = torch.randn((n_phys, HKV, ps, D), device="cuda", dtype=DT, generator=gen)
        self.v = torch.randn((n_phys, HKV, ps, D), device="cuda", dtype=DT, generator=gen)
        perm = torch.randperm(n_phys, device="cuda", generator=gen)
        self.page_table = perm.view(batch, self.npg).to(torch.int32)
        self.tables = self.page_table.cpu().numpy()
        self.kd = self.vd = None
        if dense:  # [B, HKV, S, D], the same values in token order
            self.kd = self._dense(self.k)
            self.vd = self._dense(self.v)

    def _dense(self, c):
        x = c[self.page_table.long().view(-1)].view(self.batch, self.npg, HKV, self.ps, D)
        return x.permute(0, 2, 1, 3, 4).reshape(self.batch, HKV, self.npg * self.ps, D)[:, :, : self.ctx]

    def full_lists(self) -> PageLists:
        return full_page_lists(list(self.tables), np.full(self.batch, self.ctx), HKV, self.ps, "cuda")

    def free(self):
        del self.k, self.v, self.kd, self.vd


def sdpa(q, k, v, causal_q=0):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as f

    mask = None
    if causal_q > 1:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(causal_q, k.shape[2])
    backends = [SDPBackend.FLASH_ATTENTION] if mask is None else [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION]
    with sdpa_kernel(backends):
        return f(q, k, v, attn_mask=mask, enable_gqa=True)


def meta() -> dict:
    p = torch.cuda.get_device_properties(0)
    return {"machine": p.name, "sms": p.multi_processor_count, "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "shape": {"q_heads": HQ, "kv_heads": HKV, "head_dim": D, "dtype": "bf16"}}


def bench_full(batch, ctx, ps, rows, parts):
    c = Cache(batch, ctx, ps)
    lists = c.full_lists()
    nbytes = batch * ctx * KV_BYTES_PER_TOKEN
    q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
    t_sdpa = timed(lambda: sdpa(q1.view(batch, HQ, 1, D), c.kd, c.vd))
    p1 = A.plan_attention(np.ones(batch, np.int64), lists, HQ)
    t_dec = timed(lambda: A.mixed_attention(q1, c.k, c.v, p1))
    row = {"part": "decode", "batch": batch, "ctx": ctx, "page_size": ps, "bytes": nbytes,
           "sdpa_ms": t_sdpa, "ours_ms": t_dec, "sdpa_tbps": nbytes / t_sdpa / 1e9, "ours_tbps": nbytes / t_dec / 1e9,
           "ratio_to_sdpa_bw": t_sdpa / t_dec, "items": int(p1.work.shape[0]), "split_tokens": p1.tokens_per_split}
    rows.append(row)
    print(f"decode  b={batch:3d} ctx={ctx:6d} ps={ps:3d} sdpa {t_sdpa*1e3:8.1f}us {row['sdpa_tbps']:.2f}TB/s  "
          f"ours {t_dec*1e3:8.1f}us {row['ours_tbps']:.2f}TB/s  ({row['ratio_to_sdpa_bw']*100:.0f}% of sdpa bw)", flush=True)
    if "verify" in parts:
        k1 = 9
        q9 = torch.randn((batch * k1, HQ, D), device="cuda", dtype=DT)
        p9 = A.plan_attention(np.full(batch, k1), lists, HQ)
        t_ver = timed(lambda: A.mixed_attention(q9, c.k, c.v, p9))
        q9d = q9.view(batch, k1, HQ, D).transpose(1, 2)
        try:
            t_sv = timed(lambda: sdpa(q9d, c.kd, c.vd, causal_q=k1))
        except Exception as e:  # noqa: BLE001
            print(f"  sdpa verify failed: {e}")
            t_sv = float("nan")
        rows.append({"part": "verify", "batch": batch, "ctx": ctx, "page_size": ps, "query": k1, "bytes": nbytes,
                     "ours_ms": t_ver, "ours_decode_ms": t_dec, "verify_over_decode": t_ver / t_dec,
                     "sdpa_ms": t_sv, "sdpa_verify_over_sdpa_decode": t_sv / t_sdpa, "block_m": p9.block_m})
        print(f"verify  b={batch:3d} ctx={ctx:6d} ours {t_ver*1e3:8.1f}us = {t_ver/t_dec:.2f}x decode;  "
              f"sdpa {t_sv*1e3:8.1f}us = {t_sv/t_sdpa:.2f}x sdpa decode", flush=True)
    c.free()


def bench_tune(batch, ctx, ps, rows):
    """Sweep launch settings for decode and verify at one point (picks the planner's defaults)."""
    c = Cache(batch, ctx, ps, dense=True)
    lists = c.full_lists()
    nbytes = batch * ctx * KV_BYTES_PER_TOKEN
    q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
    t_sdpa = timed(lambda: sdpa(q1.view(batch, HQ, 1, D), c.kd, c.vd))
    for k1 in (1, 9):
        q = torch.randn((batch * k1, HQ, D), device="cuda", dtype=DT)
        best = None
        for bn in (32, 64, 128):
            for waves in (1.0, 2.0, 4.0, 8.0):
                for nw, st in ((4, 2), (4, 3), (8, 3)):
                    if bn < ps:
                        continue
                    plan = A.plan_attention(np.full(batch, k1), lists, HQ, block_n=bn, waves=waves, min_split_tokens=1)
                    try:
                        t = timed(lambda: A.mixed_attention(q, c.k, c.v, plan, num_warps=nw, num_stages=st))
                    except Exception as e:  # noqa: BLE001 (e.g. out of shared memory)
                        print(f"  bn={bn} nw={nw} st={st}: {type(e).__name__}")
                        continue
                    r = {"part": "tune", "batch": batch, "ctx": ctx, "page_size": ps, "query": k1, "block_n": bn,
                         "waves": waves, "num_warps": nw, "num_stages": st, "items": int(plan.work.shape[0]),
                         "ours_ms": t, "sdpa_decode_ms": t_sdpa, "ours_tbps": nbytes / t / 1e9}
                    rows.append(r)
                    if best is None or t < best["ours_ms"]:
                        best = r
        print(f"tune    b={batch:3d} ctx={ctx:6d} q={k1}: best {best['ours_ms']*1e3:.1f}us {best['ours_tbps']:.2f}TB/s "
              f"(sdpa decode {t_sdpa*1e3:.1f}us {nbytes/t_sdpa/1e9:.2f}TB/s) bn={best['block_n']} waves={best['waves']} "
              f"nw={best['num_warps']} st={best['num_stages']} items={best['items']}", flush=True)
    c.free()


# v4 sweep 1 (in git history) tried (128, 8, 4), (64, 4, 4) short and (64, 4, 4), (32, 4, 5),
# (64, 8, 3) tall too: never best.
SWEEP_TILES = {"short": [(128, 8, 3), (64, 4, 3), (64, 8, 4)], "tall": [(64, 4, 3), (32, 4, 4)]}


def bench_sweep(kind, batch, ctx, ps, rows, splits=(256, 512, 1024, 2048, 4096), budget=2048):
    """v4 tuning at one point: (BLOCK_N, warps, stages) x split size, against the planner's default
    ("v4-auto"). (Its "v3" arm is gone with the v3 loop: module docstring.)"""
    c = Cache(batch, ctx, ps, dense=False)
    k1 = 9 if kind == "verify" else 1
    if kind == "draft":
        gen = torch.Generator(device="cuda").manual_seed(ctx + batch)
        bp = budget // ps
        sel = random_selection(batch, c.npg, bp, gen)
        lists = selected_page_lists(c.page_table, sel, np.full(batch * HKV, bp), np.full(batch, ctx), HKV, ps)
        nbytes = batch * budget * KV_BYTES_PER_TOKEN
        span = budget
    else:
        lists = c.full_lists()
        nbytes = batch * ctx * KV_BYTES_PER_TOKEN
        span = ctx
    q_len = np.full(batch, k1)
    q = torch.randn((batch * k1, HQ, D), device="cuda", dtype=DT)
    cands = [("v4-auto", {})]
    for bn, nw, st in SWEEP_TILES["short" if k1 == 1 else "tall"]:
        for sp in splits:
            if sp < bn or sp > span or (span // sp) * batch * HKV > 8192:
                continue
            cands.append((f"bn{bn}/w{nw}/s{st}/split{sp}", dict(block_n=bn, num_warps=nw, num_stages=st, tokens_per_split=sp)))
    best = None
    res = {}
    for name, kw in cands:
        try:
            plan = A.plan_attention(q_len, lists, HQ, **kw)
            t = timed(lambda: A.mixed_attention(q, c.k, c.v, plan))
        except Exception as e:  # noqa: BLE001 (e.g. out of shared memory)
            print(f"  {kind} b={batch} {name}: {type(e).__name__}: {str(e)[:100]}", flush=True)
            continue
        r = {"part": "sweep", "kind": kind, "batch": batch, "ctx": ctx, "page_size": ps, "query": k1, "variant": name,
             "block_n": plan.block_n, "num_warps": plan.num_warps, "num_stages": plan.num_stages,
             "tokens_per_split": plan.tokens_per_split, "items": int(plan.work.shape[0]),
             "bytes": nbytes, "ours_ms": t, "ours_tbps": nbytes / t / 1e9}
        rows.append(r)
        res[name] = r
        if name.startswith("bn") and (best is None or t < best["ours_ms"]):
            best = r
    auto = res.get("v4-auto")
    top = sorted((r for r in res.values() if r["variant"].startswith("bn")), key=lambda r: r["ours_ms"])[:3]
    us = lambda r: f"{r['ours_ms']*1e3:7.1f}us items {r['items']:5d}" if r else "failed"  # noqa: E731
    print(f"sweep {kind:6s} b={batch:3d} ctx={ctx:6d}: auto {us(auto)}  best " + "; ".join(f"{r['variant']} {r['ours_ms']*1e3:.1f}us items {r['items']}" for r in top),
          flush=True)
    c.free()


def random_selection(batch, npg, budget_pages, gen):
    """Per (request, KV head): sink page, last page and random middle pages, ascending."""
    rows = batch * HKV
    mid = torch.rand((rows, npg - 2), device="cuda", generator=gen).topk(budget_pages - 2, dim=1).indices + 1
    sel = torch.cat([torch.zeros((rows, 1), device="cuda", dtype=torch.long), mid,
                     torch.full((rows, 1), npg - 1, device="cuda", dtype=torch.long)], 1)
    return sel.sort(dim=1).values


_FLEX = None


def _compiled_flex():
    """One compiled FlexAttention for the process (many layers' masks would otherwise each wrap it anew)."""
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention
        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX


def flex_sparse(c: Cache, sel, budget_pages, shared=False):
    """FlexAttention decode over the same pages: a BlockMask with page-sized KV blocks.

    Per-KV-head lists (ours) force Flex's main kernel (its decode kernel takes one list for all
    heads under GQA) with BLOCK_N = page size; `shared` gives every head request's head-0 list so
    Flex can use its decode kernel."""
    from torch.nn.attention.flex_attention import BlockMask

    fa = _compiled_flex()
    b, npg = c.batch, c.npg
    h = 1 if shared else HQ
    lists = sel.view(b, HKV, 1, budget_pages)
    lists = lists[:, :1] if shared else lists.repeat_interleave(HQ // HKV, dim=1)
    kv_idx = torch.zeros((b, h, 1, npg), device="cuda", dtype=torch.int32)  # spans every KV block
    kv_idx[..., :budget_pages] = lists.to(torch.int32)
    kv_num = torch.full((b, h, 1), budget_pages, device="cuda", dtype=torch.int32)
    bm = BlockMask.from_kv_blocks(kv_num, kv_idx, BLOCK_SIZE=(128, c.ps), seq_lengths=(1, npg * c.ps))
    q = torch.randn((b, HQ, 1, D), device="cuda", dtype=DT)
    opts = None if shared else {"BLOCK_M": 16, "BLOCK_N": c.ps}
    return lambda: fa(q, c.kd, c.vd, block_mask=bm, enable_gqa=True, kernel_options=opts)


def bench_draft(batch, ctx, ps, rows, budget=2048, flex=True):
    c = Cache(batch, ctx, ps, dense=flex)
    bp = budget // ps
    gen = torch.Generator(device="cuda").manual_seed(ctx + batch)
    sel = random_selection(batch, c.npg, bp, gen)
    counts = np.full(batch * HKV, bp)
    lists = selected_page_lists(c.page_table, sel, counts, np.full(batch, ctx), HKV, ps)
    nbytes = batch * budget * KV_BYTES_PER_TOKEN  # last page is full (ctx a multiple of ps)
    q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
    plan = A.plan_attention(np.ones(batch, np.int64), lists, HQ)
    t = timed(lambda: A.mixed_attention(q1, c.k, c.v, plan))
    t_flex = t_flex_shared = float("nan")
    if flex:
        for shared in (False, True):
            try:
                t_f = timed(flex_sparse(c, sel, bp, shared=shared))
            except Exception as e:  # noqa: BLE001
                print(f"  flex (shared={shared}) failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            if shared:
                t_flex_shared = t_f
            else:
                t_flex = t_f
    rows.append({"part": "draft", "batch": batch, "ctx": ctx, "page_size": ps, "budget": budget, "bytes": nbytes,
                 "ours_ms": t, "ours_tbps": nbytes / t / 1e9, "flex_ms": t_flex, "flex_tbps": nbytes / t_flex / 1e9,
                 "speedup_vs_flex": t_flex / t, "flex_shared_lists_ms": t_flex_shared,
                 "speedup_vs_flex_shared_lists": t_flex_shared / t})
    print(f"draft   b={batch:3d} ctx={ctx:6d} ours {t*1e3:8.1f}us {nbytes/t/1e9:.2f}TB/s  flex {t_flex*1e3:8.1f}us "
          f"({t_flex/t:.1f}x)  flex, one list per request {t_flex_shared*1e3:8.1f}us ({t_flex_shared/t:.1f}x)", flush=True)
    c.free()


def bench_select(batch, ctx, ps, rows, budget=2048):
    c = Cache(batch, ctx, ps, dense=False)
    kv = np.full(batch, ctx)
    m = S.PageMeta(c.k.shape[0], HKV, D, DT, "cuda")
    m.kmin.copy_(c.k.amin(2))  # what append maintains, set here in one go
    m.kmax.copy_(c.k.amax(2))
    q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
    npg = torch.full((batch,), c.npg, dtype=torch.int32, device="cuda")
    from spsim.gpu_runtime.quest import quest_scores
    from spsim.gpu_runtime.quest import topk_pages
    counts = S.selection_counts(kv, np.full(batch, budget), ps, 1, 1, HKV)
    cnt = torch.as_tensor(counts, dtype=torch.int32, device="cuda")
    k = int(counts.max())
    t_score = timed(lambda: quest_scores(q1, m, c.page_table, npg, 1, 1))
    t_sel = timed(lambda: topk_pages(quest_scores(q1, m, c.page_table, npg, 1, 1), cnt, k))
    sel = topk_pages(quest_scores(q1, m, c.page_table, npg, 1, 1), cnt, k)
    ref = S.top_pages_torch(quest_scores(q1, m, c.page_table, npg, 1, 1), counts)
    same = bool(torch.equal(sel, ref))  # ties could differ; recorded, not asserted
    plan = A.plan_attention(np.ones(batch, np.int64), c.full_lists(), HQ)
    t_dec = timed(lambda: A.mixed_attention(q1, c.k, c.v, plan))
    meta_bytes = batch * c.npg * HKV * D * 2 * 2
    rows.append({"part": "select", "batch": batch, "ctx": ctx, "page_size": ps, "budget": budget,
                 "score_ms": t_score, "score_topk_ms": t_sel, "decode_ms": t_dec, "fraction_of_decode": t_sel / t_dec,
                 "score_tbps": meta_bytes / t_score / 1e9, "select_matches_torch_topk": same})
    print(f"select  b={batch:3d} ctx={ctx:6d} ps={ps} score {t_score*1e3:7.1f}us ({meta_bytes/t_score/1e9:.2f}TB/s) "
          f"+topk {t_sel*1e3:7.1f}us = {t_sel/t_dec*100:.1f}% of decode {t_dec*1e3:.1f}us", flush=True)
    c.free()


def bench_mixed(batch, ctx, ps, rows, budget=2048, k1=9):
    """Half the batch drafts (2K budget), half verifies (k+1 = 9), one launch; vs SDPA decode bw."""
    c = Cache(batch, ctx, ps)
    half = batch // 2
    gen = torch.Generator(device="cuda").manual_seed(ctx)
    bp = budget // ps
    sel = random_selection(half, c.npg, bp, gen)
    dl = selected_page_lists(c.page_table[:half], sel, np.full(half * HKV, bp), np.full(half, ctx), HKV, ps)
    fl = full_page_lists(list(c.tables[half:]), np.full(batch - half, ctx), HKV, ps, "cuda")
    from spsim.gpu_runtime.pages import concat_page_lists
    lists = concat_page_lists([dl, fl])
    q_len = np.array([1] * half + [k1] * (batch - half))
    q = torch.randn((int(q_len.sum()), HQ, D), device="cuda", dtype=DT)
    plan = A.plan_attention(q_len, lists, HQ)
    t = timed(lambda: A.mixed_attention(q, c.k, c.v, plan))
    qd = torch.randn((batch, HQ, 1, D), device="cuda", dtype=DT)
    t_sdpa = timed(lambda: sdpa(qd, c.kd, c.vd))
    bw = batch * ctx * KV_BYTES_PER_TOKEN / t_sdpa / 1e9  # TB/s SDPA decode reaches on this batch
    nbytes = (half * budget + (batch - half) * ctx) * KV_BYTES_PER_TOKEN
    ideal = nbytes / bw / 1e9
    pd = A.plan_attention(np.ones(batch, np.int64), c.full_lists(), HQ)
    t_dec = timed(lambda: A.mixed_attention(qd.view(batch, HQ, D), c.k, c.v, pd))
    bw_ours = batch * ctx * KV_BYTES_PER_TOKEN / t_dec / 1e9
    ideal_ours = nbytes / bw_ours / 1e9
    rows.append({"part": "mixed", "batch": batch, "ctx": ctx, "page_size": ps, "budget": budget, "query": k1,
                 "bytes": nbytes, "ours_ms": t, "sdpa_decode_tbps": bw, "ideal_ms": ideal, "over_ideal": t / ideal,
                 "ours_decode_tbps": bw_ours, "over_ideal_at_ours_decode_bw": t / ideal_ours, "block_m": plan.block_m})
    print(f"mixed   b={batch:3d} ctx={ctx:6d} ours {t*1e3:8.1f}us, bytes at sdpa decode bw {ideal*1e3:8.1f}us "
          f"({bw:.2f}TB/s): {t/ideal:.2f}x; at our decode bw ({bw_ours:.2f}TB/s): {t/ideal_ours:.2f}x", flush=True)
    c.free()


# v5 candidates for short tiles (decode, draft): plan keyword arguments. "v4" is the planner's default
# (cp.async, 2 K/V buffers); the register-loop arms went with the loop (module docstring).
V5_VARIANTS = {"v4": {}}


def timed_clean_l2(fn, reps=50) -> float:
    """Median ms with L2 emptied by a 256 MiB READ before each run (clean lines, nothing to write
    back), against do_bench's zero_() flush, which leaves L2 full of dirty lines. Diagnostic only."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        fn()
    buf = torch.ones(64 * 1024 * 1024, device="cuda", dtype=torch.int32)
    acc = torch.zeros((), device="cuda", dtype=torch.int64)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        acc += buf.sum()
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    return float(np.median([a.elapsed_time(b) for a, b in ev]))


def bench_v5(ctx, ps, rows, batches_draft=(16, 32, 64), batches_full=(1, 16), budget=2048, flex=True, save=None):
    """v5: the draft at b=16/32/64 and decode/verify at b=1/16 with each short-tile variant, in one process."""
    for batch in batches_draft:
        c = Cache(batch, ctx, ps, dense=flex and batch <= 64)
        bp = budget // ps
        gen = torch.Generator(device="cuda").manual_seed(ctx + batch)
        sel = random_selection(batch, c.npg, bp, gen)
        lists = selected_page_lists(c.page_table, sel, np.full(batch * HKV, bp), np.full(batch, ctx), HKV, ps)
        nbytes = batch * budget * KV_BYTES_PER_TOKEN
        q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
        t_flex = float("nan")
        if flex:
            try:
                t_flex = timed(flex_sparse(c, sel, bp))
            except Exception as e:  # noqa: BLE001
                print(f"  flex failed: {type(e).__name__}: {str(e)[:200]}")
        for name, kw in V5_VARIANTS.items():
            try:
                plan = A.plan_attention(np.ones(batch, np.int64), lists, HQ, **kw)
                fn = lambda: A.mixed_attention(q1, c.k, c.v, plan)  # noqa: E731
                t = timed(fn)
                t_clean = timed_clean_l2(fn) if batch == 16 and name == "v4" else float("nan")
            except Exception as e:  # noqa: BLE001
                print(f"  draft b={batch} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            rows.append({"part": "draft", "variant": name, "batch": batch, "ctx": ctx, "page_size": ps, "budget": budget,
                         "bytes": nbytes, "ours_ms": t, "ours_tbps": nbytes / t / 1e9, "flex_ms": t_flex,
                         "speedup_vs_flex": t_flex / t, "clean_l2_ms": t_clean, "block_n": plan.block_n,
                         "num_warps": plan.num_warps, "items": int(plan.work.shape[0]), "split_tokens": plan.tokens_per_split})
            print(f"draft   b={batch:3d} {name:10s} {t*1e3:7.1f}us {nbytes/t/1e9:.2f}TB/s  flex {t_flex*1e3:7.1f}us "
                  f"({t_flex/t:.2f}x)  clean-L2 {t_clean*1e3:7.1f}us", flush=True)
        _release(c, save)
    for batch in batches_full:
        c = Cache(batch, ctx, ps)
        lists = c.full_lists()
        nbytes = batch * ctx * KV_BYTES_PER_TOKEN
        q1 = torch.randn((batch, HQ, D), device="cuda", dtype=DT)
        t_sdpa = timed(lambda: sdpa(q1.view(batch, HQ, 1, D), c.kd, c.vd))
        k1 = 9
        q9 = torch.randn((batch * k1, HQ, D), device="cuda", dtype=DT)
        p9 = A.plan_attention(np.full(batch, k1), lists, HQ)
        t_ver = timed(lambda: A.mixed_attention(q9, c.k, c.v, p9))
        for name, kw in V5_VARIANTS.items():
            try:
                p1 = A.plan_attention(np.ones(batch, np.int64), lists, HQ, **kw)
                t = timed(lambda: A.mixed_attention(q1, c.k, c.v, p1))
            except Exception as e:  # noqa: BLE001
                print(f"  decode b={batch} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            rows.append({"part": "decode", "variant": name, "batch": batch, "ctx": ctx, "page_size": ps, "bytes": nbytes,
                         "sdpa_ms": t_sdpa, "ours_ms": t, "ratio_to_sdpa_bw": t_sdpa / t, "ours_tbps": nbytes / t / 1e9,
                         "verify_ms": t_ver, "verify_over_decode": t_ver / t, "items": int(p1.work.shape[0]),
                         "split_tokens": p1.tokens_per_split})
            print(f"decode  b={batch:3d} {name:10s} {t*1e3:7.1f}us = {t_sdpa/t*100:.0f}% of sdpa ({t_sdpa*1e3:.1f}us); "
                  f"verify {t_ver*1e3:.1f}us = {t_ver/t:.2f}x", flush=True)
        _release(c, save)


def _release(c, save):
    """A cache's memory back before the next batch size; what was measured so far saved."""
    c.free()
    torch.cuda.empty_cache()
    if save:
        save()


def _no_nan(x):
    """JSON has no NaN: a failed comparison is written as null."""
    if isinstance(x, dict):
        return {k: _no_nan(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_no_nan(v) for v in x]
    return None if isinstance(x, float) and math.isnan(x) else x


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="decode,verify")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--contexts", default="32768")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--sweep", default="", help="kind:batch:ctx,... points for the v4 sweep (kind: decode, verify, draft)")
    ap.add_argument("--max-tokens", type=int, default=64 * 131072, help="skip points with batch * ctx above this")
    a = ap.parse_args(argv)
    parts = a.part.split(",")
    rows: list[dict] = []
    t0 = time.time()
    for pt in filter(None, a.sweep.split(",")):
        kind, b, ctx = pt.split(":")
        bench_sweep(kind, int(b), int(ctx), a.page_size, rows)
        torch.cuda.empty_cache()
        if a.out:
            with open(a.out, "w") as f:
                json.dump(_no_nan({**meta(), "argv": sys.argv[1:], "wall_s": time.time() - t0, "rows": rows}), f, indent=1)
    def save():
        if a.out:
            with open(a.out, "w") as f:
                json.dump(_no_nan({**meta(), "argv": sys.argv[1:], "wall_s": time.time() - t0, "rows": rows}), f, indent=1)

    if "v5" in parts:
        for ctx in [int(x) for x in a.contexts.split(",")]:
            bench_v5(ctx, a.page_size, rows, flex=not a.no_flex, save=save)
    for ctx in [int(x) for x in a.contexts.split(",")]:
        for b in [int(x) for x in a.batches.split(",")]:
            if b * ctx > a.max_tokens:
                continue
            try:
                if "tune" in parts:
                    bench_tune(b, ctx, a.page_size, rows)
                if "decode" in parts or "verify" in parts:
                    bench_full(b, ctx, a.page_size, rows, parts)
                if "draft" in parts:
                    bench_draft(b, ctx, a.page_size, rows, flex=not a.no_flex)
                if "select" in parts:
                    bench_select(b, ctx, a.page_size, rows)
                if "mixed" in parts and b >= 2:
                    bench_mixed(b, ctx, a.page_size, rows)
            except torch.OutOfMemoryError as e:
                print(f"OOM at b={b} ctx={ctx}: {e}")
            torch.cuda.empty_cache()
            res = {**meta(), "argv": sys.argv[1:], "wall_s": time.time() - t0, "rows": rows}
            if a.out:  # after every point, so a crash or timeout keeps what was measured
                with open(a.out, "w") as f:
                    json.dump(_no_nan(res), f, indent=1)
    return rows


if __name__ == "__main__":
    main()
