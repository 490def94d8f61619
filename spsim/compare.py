"""Compare policies on one trace: several seeds each, ratios against the first policy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from rich.table import Table

from spsim.policies.draftlog import DEFAULT_SAMPLE as DRAFT_SAMPLE

from spsim.simulator.engine import SimConfig, simulate
from spsim.simulator.positions import simulate_with_positions

from spsim.compare_figures import FIGURES, best_row


def _seed_free(spec: str) -> bool:
    """A policy whose results do not depend on the acceptance seed (no speculation: `ar`)."""
    from spsim.policies.registry import parse_policy

    return not parse_policy(spec).cls.speculative


def _positions_here(spec: str, requests: int) -> bool:
    """Seed 0 of `spec` is the report's step-path run of acceptance by draft position."""
    from spsim.compare_report import POSITION_REQUESTS
    from spsim.policies.registry import parse_policy

    cls = parse_policy(spec).cls
    return cls.speculative and not cls.oracle and requests <= POSITION_REQUESTS


def _count(vals):
    """Counts stay ints (the same in every seed's run); a mean only where runs differ."""
    if len(set(vals)) == 1:
        return int(vals[0])
    return float(np.mean(vals))


def compare_policies(trace, base: SimConfig, specs: list[str], seeds: int, console=None, lines=None,
                     details: dict | None = None) -> list[dict]:
    """Run every policy with seeds 0..seeds-1 (once for policies the seed cannot change) and
    give one row per policy: means, spreads and ratios against the first. Progress: a live bar
    on `console`, or `lines(fraction, text)` (plain progress lines), or none. `details`, if given,
    is filled per policy with its seed-0 run for a report: summary, per-request TTFT and TPOT (s),
    and a sample of requests' draft lengths (policies/draftlog.py; recording changes no result)."""
    from rich.progress import Progress

    rows = []
    runs = [(spec, s) for spec in specs for s in range(1 if _seed_free(spec) else seeds)]
    results: dict[str, list[dict]] = {spec: [] for spec in specs}
    prog = Progress(console=console, transient=True) if console else None
    if prog:
        prog.start()
        task = prog.add_task("comparing", total=len(runs))
    try:
        for i, (spec, seed) in enumerate(runs):
            if prog:
                prog.update(task, description=f"{spec} seed {seed}")
            cb = None
            if lines is not None:
                what = f"run {i + 1}/{len(runs)} {spec} seed {seed}"
                cb = (lambda done, total, i=i, what=what:
                      lines((i + done / total) / len(runs), f"{what}: {done:,}/{total:,} requests", "of all runs"))
            keep = details is not None and seed == 0
            # the report's acceptance by draft position reruns each speculative policy on the step
            # path over the trace's first POSITION_REQUESTS requests; where that is the whole trace,
            # seed 0 itself runs there (same results, tested) and the rerun is not needed: 10 of
            # the README compare's 20 s of report
            run = simulate_with_positions if keep and _positions_here(spec, len(trace)) else simulate
            res = run(trace, base.with_(policy=spec, seed=seed), progress=cb, draft_sample=DRAFT_SAMPLE if keep else 0)
            results[spec].append(res.summary)
            if keep:
                from spsim.slo import Latencies

                lat = Latencies.from_requests(res.requests)
                details[spec] = {"summary": res.summary, "ttft": lat.ttft, "tpot": lat.tpot,
                                 "draft_lengths": res.extra.get("draft_lengths")}
                if run is simulate_with_positions:
                    details[spec]["positions"] = (res.summary["num_accepted_tokens_per_pos"],
                                                  res.summary["num_drafted_per_pos"])
            if prog:
                prog.advance(task)
    finally:
        if prog:
            prog.stop()
    ref = specs[0]
    ref_mean = {k: _mean([s[k] for s in results[ref]]) for k, *_ in FIGURES}
    for spec in specs:
        ss = results[spec]
        row = {"policy": spec, "seeds": seeds, "runs": len(ss), "clairvoyant": spec.split(":")[0] == "oracle",
               "completed": _count([s["completed"] for s in ss]),
               "rejected": _count([s["rejected"] for s in ss])}
        for key, *_ in FIGURES:
            vals = [s[key] for s in ss]
            m = _mean(vals)
            row[key] = m
            row[key + "_std"] = _std(vals)
            r = ref_mean[key]
            row[key + "_vs_" + "ref"] = (m / r) if (m is not None and r not in (None, 0)) else None
        row["peak_running"] = _count([s["peak_running"] for s in ss])
        row["cost_model"], row["profile"] = ss[0]["config"]["cost_model"], ss[0]["config"]["profile"]
        row["cost_heldout_error"] = ss[0]["config"].get("cost_heldout_error")
        row["overlapped_runtime"] = ss[0]["config"].get("overlapped_runtime")
        row["padded_passes"] = ss[0]["config"].get("padded_passes")
        row["memory_note"] = ss[0]["memory_note"]
        row["overload_note"] = ss[0]["overload_note"]
        _acceptance_spread(row, ss, base.with_(policy=spec))
        rows.append(row)
    return rows


def _acceptance_spread(row: dict, ss: list[dict], cfg) -> None:
    """With a fitted preset carrying an interval: the spread of mean accepted per verification its
    interval and the seeds imply (`acceptance_spread`; the seeds' part needs --seeds >= 2)."""
    from spsim.build import draft_method
    from spsim.plan import DraftMethod
    from spsim.policies.registry import parse_policy

    from spsim.acceptance.spread import preset_interval, spread

    block = preset_interval(cfg.acceptance)
    vals = [s["mean_accepted_per_verify"] for s in ss if s.get("verifications")]
    if not block or not vals or not parse_policy(cfg.policy).cls.speculative:
        return
    sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan")
    row["acceptance_spread"] = spread(block, DraftMethod(draft_method(cfg, parse_policy(cfg.policy))).label,
                                      int(cfg.draft_budget), float(np.mean(vals)),
                                      float(np.mean([s.get("drafts_per_verify") or 0.0 for s in ss])), sd, len(vals))


def _mean(vals):
    v = [x for x in vals if x is not None]
    return float(np.mean(v)) if v else None


def _std(vals):
    v = [x for x in vals if x is not None]
    return float(np.std(v)) if len(v) > 1 else 0.0 if v else None


def _fmt(m, sd, ratio, show_ratio=True):
    if m is None:
        return "-"
    if abs(m) < 10:
        s = f"{m:,.3g}"
        unit = 10.0 ** (np.floor(np.log10(abs(m))) - 2) if m else 1e-3
    else:
        s, unit = (f"{m:,.0f}", 1.0) if abs(m) >= 1000 else (f"{m:,.1f}", 0.1)
    if sd and sd >= unit / 2:  # a spread below the shown precision is rounding, not a spread
        s += f" ±{sd:,.0f}" if unit >= 1 else f" ±{sd:.1f}" if unit >= 0.1 else f" ±{sd:.2g}"
    if show_ratio and ratio is not None:
        s += f"\n[dim]{ratio:.2f}x[/]"
    return s


def _best(cell: str) -> str:
    """The best figure: green, and starred on its first line, which shows without colour too (piped)."""
    first, _, rest = cell.partition("\n")
    return f"[bold green]*{first}[/]" + (f"\n{rest}" if rest else "")


def compare_table(rows: list[dict], title: str) -> Table:
    """Metrics as rows, policies as columns (stays readable with many metrics)."""
    t = Table(title=title, header_style="bold", show_lines=True)
    t.add_column("metric", no_wrap=True)
    for r in rows:  # folded, not cut with an ellipsis, where the terminal is narrow
        t.add_column(r["policy"] + ("\n[dim](clairvoyant reference)[/]" if r["clairvoyant"] else ""), justify="right",
                     overflow="fold")
    for key, label, hi, ratio in FIGURES:
        best = best_row(rows, key, hi)
        cells = []
        for i, r in enumerate(rows):
            c = _fmt(r[key], r[key + "_std"], r[key + "_vs_ref"], ratio)
            cells.append(_best(c) if best == i else c)
        t.add_row(label, *cells)
    t.caption = (f"ratios against {rows[0]['policy']}; * best figure"
                 + ("; oracle knows each verification's outcome in advance: a clairvoyant reference, "
                    "not a strict bound, never marked best" if any(r["clairvoyant"] for r in rows) else ""))
    return t


def write_report(out: Path, rows: list[dict], base: SimConfig, trace_skipped: dict | None = None) -> None:
    """compare.json and compare.csv (every field of every row); the report beside them is
    spsim/compare_report.py's, the one `--report` writes."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        doc = {"config": base.__dict__, "rows": rows}
        if trace_skipped is not None:
            doc["trace_skipped"] = trace_skipped
        (out / "compare.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
        pd.DataFrame(rows).to_csv(out / "compare.csv", index=False)
    except OSError as e:  # checked before the runs; the disk can still fill up
        from spsim.errors import SpsimError

        raise SpsimError(f"--out {out}: cannot write ({e.strerror or e})") from None
