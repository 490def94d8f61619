"""Where a decode pass's GPU time goes: torch.profiler over one eager pass of the runtime's forward
(Llama-3.1-8B shape, random bf16 weights, KV of random values), kernels grouped by name.

    python3 benchmarks/runtime_profile.py [--batch 16] [--context 32768] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install


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
    a = ap.parse_args()
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


if __name__ == "__main__":
    main()
