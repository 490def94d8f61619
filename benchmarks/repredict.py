"""Re-predict the validation index's measured runs with another cost profile, on the CPU.

    python3 benchmarks/repredict.py --profile benchmarks/results/validate/profile-h100-llama-3.1-8b-refit.json

A GPU validation run (`benchmarks/validate_gpu.py`) keeps what it measured; the prediction is the
simulator's, which needs no GPU. So a change to the cost model (a new form, a refit of the same
measurements) is judged against the live runs already measured: each run of the index's archive
(`validate_runs.tar.gz`) is simulated again over its window and settings (trace, rate, policy,
acceptance, seed, KV pages; passes priced padded by the shape rule, as the run padded them) and
compared with its measurement (the mean of its repeats). Also the mean time per decode pass by
batch size, measured against predicted (the simulator's own passes), where the cost model's shape
across batch sizes shows. Writes `repredict.json` beside the index.

A run measured on a machine slower than the profile's (`machine_speed.slower` in its validate.json,
timed by validate_gpu.py; or `--slower RUN=X` for runs from before that) is also predicted with every
price scaled by 1 + X (`spsim.cost.scaled`): the error left is the model's, not the machine's.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # a checkout without an install

import numpy as np  # noqa: E402
from harness import header, write  # noqa: E402  (benchmarks/, the script's own folder)

METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "p99_e2el_ms")


def runs(archive: Path) -> dict[str, dict]:
    """Each run's validate.json and passes.jsonl lines, by run name."""
    out: dict[str, dict] = {}
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if len(parts) == 3 and parts[2] in ("validate.json", "passes.jsonl"):
                text = tar.extractfile(m).read().decode()
                run = out.setdefault(parts[1], {})
                if parts[2] == "validate.json":
                    run["validate"] = json.loads(text)
                else:
                    run["passes"] = [json.loads(x) for x in io.StringIO(text) if x.strip()]
    return out


def decode_by_batch(passes: list[dict], key: str) -> dict[int, list[float]]:
    """Pass times (`key`) of decode-like passes without prefill or drafts, by request count."""
    g: dict[int, list[float]] = {}
    for p in passes:
        if p["prefill_tokens"] == 0 and p["drafts"] == 0:
            g.setdefault(int(p["verifies"]), []).append(float(p[key]))
    return g


def repredict(v: dict, passes: list[dict], profile: str, slower: float | None = None) -> dict:
    from revalidate import as_run  # (benchmarks/: the run's window, settings and padding)

    from spsim.cost.recording import RecordingCost
    from spsim.validate import simulate_like

    tr, cfg, cost = as_run(v, profile)
    res, _ = simulate_like(tr, cfg, cost)  # as `spsim validate` predicts
    adjusted = None
    if slower:  # the same prices on this run's machine (one factor)
        from spsim.cost.scaled import ScaledCost

        adjusted, _ = simulate_like(tr, cfg, ScaledCost(cost, 1.0 + slower))
    # the passes, recorded in a run of their own: the recorder prices each pass alone, where the
    # simulator prices a segment's passes together (equal within ~0.1 %, but under arrivals a
    # small change moves later batches)
    rec = RecordingCost(cost)
    simulate_like(tr, cfg, rec)
    errors = {}
    for k in METRICS:
        m = float(v["metrics"][k]["measured"])
        errors[k] = {"measured": m, "recorded": round(100 * v["metrics"][k]["rel_error"], 2),
                     "repredicted": round(100 * (float(res.summary[k]) - m) / m, 2)}
        if adjusted is not None:
            errors[k]["machine_adjusted"] = round(100 * (float(adjusted.summary[k]) - m) / m, 2)
    gm, gp = decode_by_batch(passes, "gpu_ms"), decode_by_batch(rec.passes, "predicted_ms")
    by_batch = [{"requests": r, "passes_measured": len(gm[r]), "measured_ms": round(float(np.mean(gm[r])), 3),
                 "passes_predicted": len(gp[r]), "predicted_ms": round(float(np.mean(gp[r])), 3),
                 "error_pct": round(100 * (np.mean(gp[r]) / np.mean(gm[r]) - 1), 1)}
                for r in sorted(set(gm) & set(gp))]
    return {"policy": v["policy"], "trace": v["trace"], "window": v["window"], "machine_slower": slower,
            "errors_pct": errors, "decode_by_batch": by_batch}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--index", default=str(ROOT / "benchmarks/results/validate"),
                    help="folder of validate_index.json and validate_runs.tar.gz")
    ap.add_argument("--profile", required=True, help="cost profile JSON to predict with")
    ap.add_argument("--out", default=None, help="result JSON (default: repredict.json in --index)")
    ap.add_argument("--slower", action="append", default=[], metavar="RUN=X",
                    help="run RUN's machine ran the profile's anchor 100*X %% slower (e.g. 0.03); "
                    "repeat per run; default: the run's own `machine_speed`")
    a = ap.parse_args()
    given: dict[str, float] = {}
    for x in a.slower:
        name, _, val = x.partition("=")
        try:
            given[name] = float(val)
        except ValueError:
            print(f"error: --slower {x!r}: expected RUN=X with X a number", file=sys.stderr)
            sys.exit(2)
    idx = Path(a.index)
    archive = idx / "validate_runs.tar.gz"
    missing = next((p for p in (archive, Path(a.profile)) if not p.is_file()), None)
    if missing is not None:
        print(f"error: {missing}: no such file", file=sys.stderr)
        sys.exit(2)
    index = json.loads((idx / "validate_index.json").read_text()) if (idx / "validate_index.json").is_file() else {}
    from spsim.calibration.measure import kernel_version
    ran, here = index.get("kernel_version"), kernel_version()
    if ran and ran != here:  # the simulator pads passes by this checkout's shape rule, not theirs
        print(f"warning: {idx}: the runs ran kernels {ran}, this checkout's are {here}; where the shape "
              "rule changed between them (buckets.py), re-predict at the runs' commit", file=sys.stderr)
    found = runs(archive)
    unknown = sorted(set(given) - set(found))
    if unknown:
        print(f"error: --slower names runs {archive} does not hold: {', '.join(unknown)}", file=sys.stderr)
        sys.exit(2)
    out = []
    for name, r in sorted(found.items()):
        if "validate" not in r or "passes" not in r:
            print(f"{name}: skipped (no validate.json or passes.jsonl)")
            continue
        slower = given.pop(name, (r["validate"].get("machine_speed") or {}).get("slower"))
        row = {"run": name, **repredict(r["validate"], r["passes"], a.profile, slower)}
        e = row["errors_pct"]
        print(f"{name}: " + ", ".join(f"{k} {e[k]['recorded']:+.1f} -> {e[k]['repredicted']:+.1f} %"
                                      + (f" ({e[k]['machine_adjusted']:+.1f} % at {100 * slower:+.1f} % machine)"
                                         if slower else "") for k in METRICS))
        out.append(row)
    doc = {**header("repredict"), "index": str(idx.relative_to(ROOT) if idx.is_relative_to(ROOT) else idx),
           "profile": Path(a.profile).name, "runs_kernel_version": ran, "kernel_version": here, "runs": out}
    path = write(a.out or idx / "repredict.json", doc)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
