"""MagicDec's own autoregressive step times on 8 x A100 against the roofline (issue 13).

MagicDec publishes one set of absolute per-step times of its engine: Figure 1(a) of the paper
(arXiv 2408.11049, "Throughput vs. Latency for TinyLLama-1.1B speculating LLaMA-2-7B-32K ... (a)
Throughput of autoregressive and SD against per-token latency for prefill 8000"; 8 x A100, TP 8),
whose data are in the blog's source, github.com/Infini-AI-Lab/MagicDec `static/js/plots/
throughput_latency.js`, series '(AutoReg) Prefill 8000': (tokenwise latency ms, throughput tokens/s)
= (16.53, 1936), (21.45, 2237), (31.49, 2237), (49.89, 2565). Batch = throughput x latency: 32.0,
48.0, 70.4, 128.0 (the third is not an integer batch: its throughput repeats the second's, so it is
reported but left out of the fit). The autoregressive loop is the same `tests/baseline_benchmark.py`
that the blog's Llama-3.1-8B speedup tables divide by.

The roofline prices the same step: LLaMA-2-7B-32K's shape (togethercomputer/LLaMA-2-7B-32K
config.json: 32 layers, hidden 4096, 32 query and 32 KV heads of 128, MLP 11008, vocabulary 32000),
A100-80GB, TP 8, bf16, one decode token per request at 8,000 + 32 tokens of context (the generated
length is not published; 32 is the middle of a 64-token run, 0.4 % of the context). Variants:
`roofline` (the catalog as is) and `magicdec-2024-09` (the LM head replicated on every GPU, as
MagicDec's code did until 2024-09-27: benchmarks/magicdec_batch.py `MagicDecSep2024`).

A straight line through the published points (batch 32, 48, 128) splits the step into a per-pass
part (intercept) and a per-request part (slope), which the roofline's own split is compared with.
This is a check: nothing is fitted into the cost model from it.

    python3 benchmarks/magicdec_ar_check.py   # writes benchmarks/results/magicdec_ar_check.json (1 s, no GPU)
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from magicdec_batch import MagicDecSep2024  # noqa: E402

from spsim.cost.roofline import RooflineCostModel  # noqa: E402
from spsim.models import ModelConfig  # noqa: E402

SOURCE = ("MagicDec paper (arXiv 2408.11049) Figure 1(a), AutoReg, prefill 8000, LLaMA-2-7B-32K, 8 x A100 TP 8; "
          "data: github.com/Infini-AI-Lab/MagicDec static/js/plots/throughput_latency.js '(AutoReg) Prefill 8000'")
POINTS = [(16.53, 1936), (21.45, 2237), (31.49, 2237), (49.89, 2565)]  # (ms per step, tokens/s)
LLAMA2_7B_32K = ModelConfig("llama-2-7b-32k", layers=32, hidden=4096, q_heads=32, kv_heads=32, head_dim=128,
                            intermediate=11008, vocab=32000, max_context=32768)
CONTEXT = 8000 + 32


def step_ms(cm: RooflineCostModel, batch: int) -> dict:
    ctx = np.full(batch, CONTEXT, np.int64)
    attn = float(cm.full_attn(ctx, np.ones(batch, np.int64)).sum())
    lin = cm.pass_overhead(batch)
    return {"step_ms": round((lin + attn) * 1e3, 3), "per_pass_ms": round(lin * 1e3, 3),
            "attention_ms": round(attn * 1e3, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "magicdec_ar_check.json"))
    a = ap.parse_args()
    models = {"roofline": RooflineCostModel(LLAMA2_7B_32K, "a100-80gb", tp=8, check_memory=False),
              "magicdec-2024-09": MagicDecSep2024(LLAMA2_7B_32K, "a100-80gb", tp=8, check_memory=False)}
    rows = []
    for lat, thr in POINTS:
        b_exact = lat * thr / 1e3
        b = int(round(b_exact))
        row = {"published_ms": lat, "published_tokens_per_s": thr, "batch": b, "batch_exact": round(b_exact, 2),
               "in_fit": abs(b_exact - b) < 0.1}
        for name, cm in models.items():
            r = step_ms(cm, b)
            r["rel"] = round(r["step_ms"] / lat - 1, 4)
            row[name] = r
        rows.append(row)
    fit_rows = [r for r in rows if r["in_fit"]]
    bx = np.array([r["batch"] for r in fit_rows], float)
    slope, icpt = np.polyfit(bx, [r["published_ms"] for r in fit_rows], 1)
    lines = {"published": {"per_pass_ms": round(float(icpt), 3), "per_request_ms": round(float(slope), 4)}}
    for name in models:
        s, i = np.polyfit(bx, [r[name]["step_ms"] for r in fit_rows], 1)
        lines[name] = {"per_pass_ms": round(float(i), 3), "per_request_ms": round(float(s), 4)}
    kv_bytes = CONTEXT * 2 * LLAMA2_7B_32K.layers * LLAMA2_7B_32K.kv_heads * LLAMA2_7B_32K.head_dim * 2 / 8
    lines["published"]["kv_bytes_per_s_per_gpu"] = round(kv_bytes / (slope * 1e-3) / 1e12, 3)
    lines["published"]["kv_rate_of_datasheet"] = round(kv_bytes / (slope * 1e-3) / 2.039e12, 3)
    out = {
        "about": "MagicDec's autoregressive step times (8 x A100, TP 8, LLaMA-2-7B-32K, prefill 8000) against the "
                 "roofline's; a check, nothing fitted (issue 13)",
        "source": SOURCE, "context_tokens": CONTEXT, "points": rows,
        "max_abs_rel": {n: max(abs(r[n]["rel"]) for r in fit_rows) for n in models},
        "straight_lines": lines,
        "reading": (f"per pass (intercept) the published steps carry {icpt / lines['roofline']['per_pass_ms']:.2f}x "
                    f"the roofline's fixed cost (+{icpt - lines['roofline']['per_pass_ms']:.2f} ms); per request "
                    f"(slope) {slope / lines['roofline']['per_request_ms'] - 1:+.1%} against the roofline's KV "
                    "reads at 89 % of the A100's datasheet bandwidth"),
        "date": datetime.date.today().isoformat(),
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(f"batch {r['batch']:4d}{'' if r['in_fit'] else ' (not an integer batch)'}: published "
              f"{r['published_ms']:.2f} ms, roofline {r['roofline']['step_ms']:.2f} ({r['roofline']['rel']:+.1%}), "
              f"magicdec-2024-09 {r['magicdec-2024-09']['step_ms']:.2f} ({r['magicdec-2024-09']['rel']:+.1%})")
    print("lines (ms per pass + ms per request):", json.dumps(lines))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
