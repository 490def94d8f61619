"""Skinny GEMMs of the 8B decode step (1-16 tokens): which way of running them reaches the copy
bandwidth. Batch 1 spends most of its step in these (issue 11: the 1 x 32K step is 1.20x its
floor; the profile showed cuBLAS split-K kernels at ~3.1 TB/s for QKV and the output projection,
each followed by a reduce kernel).

Variants per shape (N outputs, K inputs, bf16):
  linear     F.linear(x, W), W [N, K] (what the model runs)
  nn         x @ Wt, Wt = W.T contiguous [K, N] (another cuBLAS layout, other kernels)
  triton     a Triton GEMV over W [N, K]: each program BLOCK_N outputs, the whole K, no split-K
  spsim      the runtime's one-token kernel (`gpu_runtime/gemv.py`: weights read before the PDL
             wait), one token only, over a grid of tiles (BLOCK_N, BLOCK_K, warps)

Each op is captured 20 times in one CUDA graph (as the runtime replays a pass) and timed over
replays with CUDA events; TB/s = weight bytes / time. With `--copies-mb` the ops cycle through
copies of the weight totalling at least that much, so that they read HBM, not the L2 (the 2026-12-01
results predate it). The copy bandwidth is measured in the same run (a 2 GiB device-to-device copy).
`--table FILE` writes the best `spsim` tile per shape, which `SPSIM_GEMV_TABLE` feeds to the runtime.

    python3 benchmarks/gemv.py --out benchmarks/results/gemv_h200.json
    python3 benchmarks/gemv.py --tokens 1 --variants linear,spsim --copies-mb 256 \
        --out gemv.json --table gemv_table.json
    python3 benchmarks/gemv.py --tokens 128,192,256,320,384,448,512,576,640,704,768,832,896,960,1024 \
        --variants linear --copies-mb 256 --out benchmarks/results/gemv_tokens_h100.json

The last: the same layers at a prefill pass's row counts (the shape rule's token classes and
those between), which is where the rule's skipped classes come from (`spsim/buckets.py` RULE_SKIP).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from harness import header  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}


@triton.jit
def _gemv(X, W, Y, M, N, stride_xm, stride_wn, stride_ym, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(W + rn[:, None].to(tl.int64) * stride_wn + rk[None, :], mask=(rn[:, None] < N) & (rk[None, :] < K),
                    other=0.0)
        x = tl.load(X + rm[:, None] * stride_xm + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        if BLOCK_M >= 16:
            acc += tl.dot(x, tl.trans(w))
        else:
            acc += tl.sum(x[:, None, :].to(tl.float32) * w[None, :, :].to(tl.float32), axis=2)
    tl.store(Y + rm[:, None] * stride_ym + rn[None, :], acc.to(Y.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def triton_gemv(x, w, out, block_n=16, block_k=512, num_warps=4, num_stages=4):
    M, K = x.shape
    N = w.shape[0]
    bm = max(1, triton.next_power_of_2(M))
    if bm > 1 and bm < 16:
        bm = bm if bm <= 4 else 16
    _gemv[(triton.cdiv(N, block_n),)](x, w, out, M, N, x.stride(0), w.stride(0), out.stride(0), K=K, BLOCK_M=bm,
                                      BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps, num_stages=num_stages)
    return out


def time_graph(fn, reps=20, replays=10) -> float:
    """Seconds per call of `fn(i)` (i: the call's index in the graph)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / reps)
    ts.sort()
    return ts[len(ts) // 2]


def copy_bw() -> float:
    n = 1 << 30
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    t = time_graph(lambda i: b.copy_(a), reps=5, replays=5)
    return 2 * a.numel() * 2 / t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--tokens", default="1,8,16")
    ap.add_argument("--variants", default="linear,nn,triton,spsim", help="families to time, comma-separated")
    ap.add_argument("--copies-mb", type=float, default=0.0, help="cycle through weight copies of at least this size")
    ap.add_argument("--table", default=None, help="write the best spsim tile per shape (SPSIM_GEMV_TABLE)")
    a = ap.parse_args()
    fam = set(a.variants.split(","))
    from spsim.gpu_runtime import gemv as G
    torch.manual_seed(0)
    dev = "cuda"
    bw = copy_bw()
    rows = []
    for name, (N, K) in SHAPES.items():
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02
        copies = max(1, int(-(-a.copies_mb * 1e6 // (N * K * 2))))
        ws = [w] + [w.clone() for _ in range(copies - 1)]
        wts = [v.t().contiguous() for v in ws] if "nn" in fam else []
        for M in [int(x) for x in a.tokens.split(",")]:
            x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
            out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
            ref = torch.nn.functional.linear(x, w).float()
            variants = {}
            if "linear" in fam:
                variants["linear"] = lambda i: torch.nn.functional.linear(x, ws[i % copies])
            if "nn" in fam:
                variants["nn"] = lambda i: x @ wts[i % copies]
            if "triton" in fam:
                for bn, bk, nw, ns in ((16, 256, 4, 4), (32, 256, 4, 4), (16, 512, 4, 3), (8, 512, 4, 4),
                                       (64, 128, 4, 4)):
                    variants[f"triton_n{bn}_k{bk}_w{nw}_s{ns}"] = (
                        lambda i, bn=bn, bk=bk, nw=nw, ns=ns: triton_gemv(x, ws[i % copies], out, bn, bk, nw, ns))
            if "spsim" in fam and M == 1:
                for bn in (1, 2, 4, 8, 16):
                    for bk in (1024, 2048, 4096):
                        if K % bk or not 4096 <= bn * bk <= 32768:
                            continue
                        for nw in (4, 8):
                            variants[f"spsim_n{bn}_k{bk}_w{nw}"] = (
                                lambda i, c=(bn, bk, nw): G.gemv(x, ws[i % copies], None, c))
            for vname, fn in variants.items():
                try:
                    y = fn(0).float()
                    err = float((y - ref).abs().max() / ref.abs().max())
                    t = time_graph(fn)
                except Exception as e:  # noqa: BLE001  (a variant that does not compile is reported)
                    rows.append({"shape": name, "N": N, "K": K, "tokens": M, "variant": vname, "error": str(e)[:200]})
                    continue
                rows.append({"shape": name, "N": N, "K": K, "tokens": M, "variant": vname, "copies": copies,
                             "us": round(t * 1e6, 2),
                             "tb_s": round(N * K * 2 / t / 1e12, 3), "x_copy_bw": round(N * K * 2 / t / bw, 3),
                             "max_rel_err": round(err, 5)})
                print(rows[-1], flush=True)
        del w, ws, wts
    res = {**header("gemv"), "copy_tb_s": round(bw / 1e12, 3), "rows": rows}
    best = {}
    for r in rows:
        if "us" in r:
            k = (r["shape"], r["tokens"])
            if k not in best or r["us"] < best[k]["us"]:
                best[k] = r
    res["best"] = [{"shape": k[0], "tokens": k[1], "variant": v["variant"], "us": v["us"], "x_copy_bw": v["x_copy_bw"],
                    "linear_us": next((r["us"] for r in rows if r["shape"] == k[0] and r["tokens"] == k[1]
                                       and r["variant"] == "linear" and "us" in r), None)} for k, v in best.items()]
    print(json.dumps(res["best"], indent=1))
    if a.table:
        table = {}
        for r in rows:
            if r.get("variant", "").startswith("spsim_") and "us" in r:
                k = (r["N"], r["K"])
                if k not in table or r["us"] < table[k]["us"]:
                    bn, bk, nw = (int(p[1:]) for p in r["variant"].split("_")[1:])
                    table[k] = {"N": r["N"], "K": r["K"], "block_n": bn, "block_k": bk, "warps": nw, "us": r["us"],
                                "linear_us": next((q["us"] for q in rows if q["shape"] == r["shape"] and q["tokens"] == 1
                                                   and q["variant"] == "linear" and "us" in q), None)}
        with open(a.table, "w") as f:
            json.dump(list(table.values()), f, indent=1)
        print(json.dumps(list(table.values()), indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
