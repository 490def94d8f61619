"""Recording half of the held-out acceptance benchmark (`benchmarks/acceptance_heldout.py`): real
accept events from `spsim run` on SmolLM2-135M (CPU), one run per (text, policy, method, budget).

Every run is the real runtime (`spsim run --out`), not a teacher-forced imitation: prompts are cut
from the text keyed by (seed, request), so the same prompts meet every method and budget of a text.
Runs whose events already exist in the work folder are not repeated (a stopped recording resumes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STDLIB = Path(sysconfig.get_paths()["stdlib"])

# six texts of three kinds; all ship with CPython or Debian (no download)
TEXTS = {
    "argparse": ("code", STDLIB / "argparse.py"),
    "pydecimal": ("code", STDLIB / "_pydecimal.py"),
    "pydoc_topics": ("documentation", STDLIB / "pydoc_data" / "topics.py"),
    "idle_news": ("documentation", STDLIB / "idlelib" / "NEWS.txt"),
    "gpl3": ("prose (legal)", Path("/usr/share/common-licenses/GPL-3")),
    "python_license": ("prose (history, legal)", STDLIB / "LICENSE.txt"),
}
# (policy, draft-KV method, budget): fixed-k:k=4 under three methods, aspire with its own (step-layer)
# (recorded in this order, every text per configuration, so a cut-short recording still has whole
# leave-one-text-out splits for the configurations it reached)
CONFIGS = [(p, m, b) for b in (128, 64) for p, m in (("fixed-k:k=4", "verify-quest"), ("aspire", "auto"),
                                                      ("fixed-k:k=4", "step-layer"), ("fixed-k:k=4", "static"))]


def write_trace(path: Path, prompt_tokens: list[int], output_tokens: int) -> Path:
    with open(path, "w") as f:
        f.write(json.dumps({"spsim_trace": 1}) + "\n")
        for i, p in enumerate(prompt_tokens):
            f.write(json.dumps({"id": f"q{i}", "arrival_s": 0.0, "prompt_tokens": int(p),
                                "output_tokens": int(output_tokens)}) + "\n")
    return path


def run_dir(work: Path, text: str, policy: str, method: str, budget: int) -> Path:
    return work / text / f"{policy.split(':')[0]}_{method}_{budget}"


def record(trace: Path, text_path: Path | None, out: Path, policy: str, method: str, budget: int,
           weights: str | None = "smollm2-135m", seed: int = 0, say=print) -> Path:
    """`spsim run` once (unless its events exist); returns the events file. `weights` None: the
    runtime's `tiny` model (random weights, token ids keyed by `seed`: CI's small version)."""
    ev = out / "events.jsonl"
    if ev.exists() and (out / "summary.json").exists():
        return ev
    cmd = [sys.executable, "-m", "spsim.cli", "run", str(trace), "--device", "cpu", "--offline",
           "--policy", policy, "--draft-kv", method, "--draft-budget", str(budget), "--kv-pages", "3000",
           "--out", str(out), "--seed", str(seed)]
    cmd += ["--weights", weights, "--text", str(text_path)] if weights else ["--model", "tiny"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if p.returncode:
        raise SystemExit(f"spsim run failed ({' '.join(cmd)}):\n{p.stderr[-2000:]}")
    say(f"recorded {out.relative_to(out.parent.parent)} in {time.time() - t0:.0f} s")
    return ev


def record_all(work: Path, texts: dict, configs: list, prompts: int, prompt_tokens: int, output: int,
               weights: str | None = "smollm2-135m", say=print, stop_at: float | None = None) -> dict:
    """{(text, policy, method, budget): events path} for every text and configuration (`stop_at`:
    a time.time() after which no new run starts)."""
    work.mkdir(parents=True, exist_ok=True)
    trace = write_trace(work / "trace.jsonl", [prompt_tokens] * prompts, output)
    out = {}
    for text, (_, path) in texts.items():
        if weights and not Path(path).exists():
            raise SystemExit(f"{path}: text {text!r} not found on this machine")
    for policy, method, budget in configs:
        for i, (text, (_, path)) in enumerate(texts.items()):
            out[(text, policy, method, budget)] = record(trace, path, run_dir(work, text, policy, method, budget),
                                                         policy, method, budget, weights, seed=0 if weights else i,
                                                         say=say)
            if stop_at and time.time() > stop_at:
                return out
    return out


if __name__ == "__main__":  # record only (the analysis: acceptance_heldout.py)
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/spsim_acceptance_heldout")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--output", type=int, default=48)
    ap.add_argument("--ab", action="store_true", help="also the two-text new-user case (8 requests, 1.5-2.5K)")
    a = ap.parse_args()
    if a.ab:
        from heldout_ab import record_ab

        record_ab(Path(a.work) / "ab")
    record_all(Path(a.work), TEXTS, CONFIGS, a.prompts, a.prompt_tokens, a.output)
