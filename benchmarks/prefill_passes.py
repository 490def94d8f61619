"""Passes with prefill chunks on the real runtime: wall time, GPU time (CUDA events) and the sum of
the kernels' own times (torch.profiler), so a pass's host-bound share shows; each point with the
prefill chunks in an attention launch of their own (the runtime's default) and in the pass's one
launch, and optionally replayed from a CUDA graph (`--graphed`: the pass captured the way decode
passes are, an experiment: the runtime runs prefill passes eagerly). `--rule`: also as the shape
rule runs them (padded, graphed), once with the decode rows in the tallest tile a verification of
a 16-token run needs (what the rule does beside a chunk: a drafting policy's prefill passes) and
once in their own tile (`ar`'s): on the H100 sweep a 381-token chunk took 12.3 ms alone and
18.8-20.5 ms beside 3-9 one-token rows at 0.3-1.4K.

    python3 benchmarks/prefill_passes.py [--model llama-3.1-8b] [--out FILE.json] [--graphed] [--rule]

Llama-3.1-8B shape, random weights, KV of random values; timed as calibration times a point
(`calibration.measure.Bench`). Runs on the GPU machine (no simpy needed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from harness import header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install

V = 1  # verify-quest's enum value (spsim.plan.DraftMethod.VERIFY_QUEST)


def points():
    from spsim.calibration.design import Point

    dec = lambda n, c: tuple((c, 1) for _ in range(n))  # noqa: E731
    return {
        "pre 0+128": Point("prefill", V, prefill=((0, 128),)),
        "pre 0+256": Point("prefill", V, prefill=((0, 256),)),
        "pre 0+512": Point("prefill", V, prefill=((0, 512),)),
        "pre 0+2048": Point("prefill", V, prefill=((0, 2048),)),
        "pre 16K+128": Point("prefill", V, prefill=((16384, 128),)),
        "pre 64K+256": Point("prefill", V, prefill=((65536, 256),)),
        "ar 16x16K": Point("ar", V, verifies=dec(16, 16384)),
        "pre 0+128 + ar 16x16K": Point("prefill", V, prefill=((0, 128),), verifies=dec(16, 16384)),
        "pre 16K+512 + ar 16x16K": Point("prefill", V, prefill=((16384, 512),), verifies=dec(16, 16384)),
        "pre 0+2048 + ar 16x16K": Point("prefill", V, prefill=((0, 2048),), verifies=dec(16, 16384)),
        "pre 0+381": Point("prefill", V, prefill=((0, 381),)),
        "pre 0+381 + ar 9x1300": Point("prefill", V, prefill=((0, 381),), verifies=dec(9, 1300)),
        "pre 0+440": Point("prefill", V, prefill=((0, 440),)),  # the rule's 448-token class (381 + 9 rows pad to it)
        "pre 0+500": Point("prefill", V, prefill=((0, 500),)),  # its 512-token class
        "pre 0+128 + ar 16x4K": Point("prefill", V, prefill=((0, 128),), verifies=dec(16, 4096)),
        "pre 0+256 + 16 drafts 16K": Point("prefill", V, prefill=((0, 256),),
                                           drafts=tuple((16384, 1) for _ in range(16))),
        "pre 0+512 + 12 drafts + 3 verify5 16K": Point("prefill", 2, prefill=((0, 512),),
                                                       drafts=tuple((16384, 2) for _ in range(12)),
                                                       verifies=tuple((16384, 5) for _ in range(3))),
    }


def kernel_time(bench, point) -> list:
    """The GPU kernels of the point's passes (profiled), per pass executed (warm-up passes
    included: they are the same pass, but for a priming pass of later drafts), largest first:
    (name, seconds, launches)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from spsim.gpu_runtime.executor import RuntimeExecutor

    calls = [0]
    execute = RuntimeExecutor.execute

    def counted(self, plan):
        calls[0] += 1
        return execute(self, plan)

    bench.max_reps = bench.min_reps = 1
    RuntimeExecutor.execute = counted
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            bench.run(point)
    finally:
        RuntimeExecutor.execute = execute
    n = max(1, calls[0])
    rows = []
    for e in prof.key_averages():
        if e.device_type != DeviceType.CUDA:
            continue
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0.0)
        if t:
            rows.append((e.key, float(t) / 1e6 / n, int(e.count) // n))
    rows.sort(key=lambda r: -r[1])
    return rows


def main() -> None:
    import torch

    from spsim.calibration.measure import Bench
    from spsim.gpu_runtime import graphs as G
    from spsim.gpu_runtime import pass_attention as PA
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.padding import SCRATCH_PAGES

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--out", default=None)
    ap.add_argument("--graphed", action="store_true", help="also replay the prefill passes from CUDA graphs")
    ap.add_argument("--rule", action="store_true", help="also under the shape rule: the decode rows beside a "
                    "chunk in the tallest tile (max draft 16) and in their own (max draft 0)")
    ap.add_argument("--only", default=None, help="points whose name contains this (comma-separated: any of these)")
    a = ap.parse_args()
    dev = torch.device("cuda")
    cfg = get_config(a.model)
    model = Transformer.random(cfg, seed=0, device=dev, dtype=torch.bfloat16)
    pts = {k: p for k, p in points().items() if a.only is None or any(x in k for x in a.only.split(","))}
    need = 0
    for p in pts.values():
        need = max(need, sum(-(-(c + n + 1) // 16) for c, n in p.prefill + p.verifies) + 16 * 1100)
    cache = PagedKVCache(cfg, need + SCRATCH_PAGES, 16, device=dev, dtype=torch.bfloat16)
    cache.k.normal_()
    cache.v.normal_()
    eligible0 = G.GraphedPasses.__dict__["eligible"]  # the staticmethod itself (restored as is)
    variants = [("split", True, False, None), ("one launch", False, False, None)]
    if a.graphed:
        variants.append(("split, graphed", True, True, None))
    if a.rule:  # (max draft: the rule's tallest verification; 0: the rows' own tile, as `ar` runs)
        variants += [("rule, tall tile", True, False, 16), ("rule, own tile", True, False, 0)]
    rows = []
    for name, p in pts.items():
        for vname, split, graphed, rule_draft in variants:
            if not p.prefill and vname != "split":
                continue
            PA.SPLIT_PREFILL = split
            G.GraphedPasses.eligible = staticmethod(lambda attn: True) if graphed else eligible0
            try:
                kw = {} if rule_draft is None else dict(pad=True, shape_rule=True, max_draft=rule_draft)
                b = Bench(model, cache, graphs=True, **kw)
                r = b.run(p)
                top = kernel_time(Bench(model, cache, graphs=True, **kw), p) if not graphed else []
            except Exception as e:  # noqa: BLE001  (a failed variant is reported, the rest still run)
                rows.append({"point": name, "variant": vname, "error": f"{type(e).__name__}: {e}"[:300]})
                print(f"{name:42s} {vname:15s} FAILED {e}", flush=True)
                continue
            finally:
                G.GraphedPasses.eligible = eligible0
                PA.SPLIT_PREFILL = True
            kern = sum(t for _, t, _ in top) if top else None
            row = {"point": name, "variant": vname, "wall_ms": r["seconds"] * 1e3,
                   "gpu_ms": statistics.median(r.get("gpu_s") or [float("nan")]) * 1e3,
                   "prep_ms": statistics.median(r["prep_s"]) * 1e3, "graphed": r["graphed"],
                   "kernels_ms": None if kern is None else kern * 1e3,
                   "top_kernels": [{"name": k[:80], "ms": t * 1e3, "count": c} for k, t, c in top[:8]],
                   "point_spec": p.to_dict()}
            rows.append(row)
            ks = "" if kern is None else f"kernels {kern * 1e3:7.2f}"
            print(f"{name:42s} {vname:15s} wall {row['wall_ms']:8.2f} gpu {row['gpu_ms']:8.2f} {ks} "
                  f"graphed {r['graphed']}", flush=True)
    out = {**header("prefill_passes"),
           "model": cfg.name, "rows": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
