"""What `spsim validate` reports: the simulator's prediction against the runtime's measurement.

Errors are relative, `(predicted - measured) / measured`: positive means the simulator predicts
more (a longer pass, a higher throughput). Pass-by-pass statistics leave out the passes that
captured a CUDA graph (their time is mostly the capture, a one-off the simulator does not price);
how many and how long they took is reported beside them. Plain data in, plain data out: the
terminal table (rich) and the GPU script's text both render `rows()`.
"""

from __future__ import annotations

import numpy as np

CATEGORIES = ("prefill", "mixed", "draft", "verify")
REQUEST_COLUMNS = ["drafts", "verifies", "spec_verifies", "accepted", "preemptions", "recomputes", "prefix_hit_tokens"]
PASS_FIELDS = ("category", "prefill_tokens", "drafts", "verifies", "verify_tokens")
LATENCY = ("ttft_ms", "tpot_ms", "e2el_ms")
STATS = ("mean", "median", "p90", "p99")  # `median` is p50 in the summary's keys
# The targets, as |relative error| bounds (see docs/validation.md).
TARGETS = {"output_throughput": 0.03, "request_throughput": 0.03, "mean_tpot_ms": 0.03,
           "p99_tpot_ms": 0.08, "mean_e2el_ms": 0.08, "p99_e2el_ms": 0.08, "mean_ttft_ms": 0.08}
PASS_TARGETS = {"median_abs_rel": 0.03, "p95_abs_rel": 0.08}


def pass_clocked(cfg) -> bool:
    """Offline or closed loop: no decision reads the clock, so both worlds plan alike."""
    return bool(cfg.offline or cfg.concurrency)


def _rel(pred, meas):
    if pred is None or meas is None or not np.isfinite(meas) or meas == 0:
        return None
    return float((pred - meas) / meas)


def same_plans(run, sim, sim_passes, clocked: bool) -> dict:
    """Per request: drafts, verifies, accepted, preemptions ... equal; per pass (pass-clocked
    modes): the same composition in the same order."""
    a, b = run.result.requests, sim.requests
    diff = np.zeros(len(a), bool)
    for c in REQUEST_COLUMNS:
        diff |= a[c].to_numpy() != b[c].to_numpy()
    first = []
    for i in np.flatnonzero(diff)[:5].tolist():
        first.append({"id": str(a["id"].iloc[i]),
                      **{c: [int(a[c].iloc[i]), int(b[c].iloc[i])] for c in REQUEST_COLUMNS
                         if a[c].iloc[i] != b[c].iloc[i]}})
    d = {"expected": clocked, "requests_equal": not diff.any(), "requests_differing": int(diff.sum()),
         "first_differing": first, "passes_equal": None, "passes_measured": len(run.passes),
         "passes_predicted": int(sum(sim.summary["passes"].values()))}
    if sim_passes is not None:
        n = min(len(run.passes), len(sim_passes))
        bad = next((i for i in range(n) if any(run.passes[i][f] != sim_passes[i][f] for f in PASS_FIELDS)), None)
        if bad is None and len(run.passes) != len(sim_passes):
            bad = n
        d["passes_equal"] = bad is None
        if bad is not None:
            pick = lambda ps: {f: ps[bad][f] for f in PASS_FIELDS} if bad < len(ps) else None  # noqa: E731
            d["first_differing_pass"] = {"pass": bad, "measured": pick(run.passes), "predicted": pick(sim_passes)}
    d["equal"] = d["requests_equal"] and d["passes_equal"] is not False
    return d


def _pass_stats(meas_ms: np.ndarray, pred_ms: np.ndarray) -> dict:
    if len(meas_ms) == 0:
        return {"passes": 0}
    rel = (pred_ms - meas_ms) / meas_ms
    a = np.abs(rel)
    return {"passes": int(len(meas_ms)), "measured_mean_ms": float(meas_ms.mean()),
            "predicted_mean_ms": float(pred_ms.mean()), "median_abs_rel": float(np.median(a)),
            "p95_abs_rel": float(np.percentile(a, 95)), "mean_rel": float(rel.mean()),
            "measured_s": float(meas_ms.sum() / 1e3), "predicted_s": float(pred_ms.sum() / 1e3)}


def per_pass(run, sim_passes, n: int | None = None) -> dict:
    """Error pass by pass over the first `n` passes (the plans' common prefix), by category."""
    ps = run.passes[:n] if n is not None else run.passes
    meas = np.array([p["gpu_ms"] for p in ps], float)
    pred = np.array([q["predicted_ms"] for q in sim_passes[:len(ps)]], float)
    cap = np.array([bool(p.get("captured")) for p in ps], bool)
    cat = np.array([p["category"] for p in ps], object)
    ok = ~cap & (meas > 0)
    d = {"all": _pass_stats(meas[ok], pred[ok])}
    for c in CATEGORIES:
        m = ok & (cat == c)
        if m.any():
            d[c] = _pass_stats(meas[m], pred[m])
    d["captures"] = {"passes": int(cap.sum()), "measured_s": float(meas[cap].sum() / 1e3),
                     "predicted_s": float(pred[cap].sum() / 1e3)}
    all_ = d["all"]
    d["targets"] = {k: {"target": t, "within": all_.get(k) is not None and all_[k] <= t} for k, t in PASS_TARGETS.items()}
    return d


def metrics(run_s: dict, sim_s: dict, repeats: list[dict] | None = None) -> dict:
    """Predicted against measured per metric. With several measured runs (`--repeat`), measured is
    their mean, and each run's value, their range and the prediction's place in it come along."""
    keys = ["output_throughput", "request_throughput", "duration"]
    keys += [f"{s}_{m}" for m in LATENCY for s in STATS]
    out = {}
    for k in keys:
        m, p = run_s.get(k), sim_s.get(k)
        runs = None
        if repeats:
            runs = [r.get(k) for r in repeats]
            if all(isinstance(x, (int, float)) and np.isfinite(x) for x in runs):
                m = float(np.mean(runs))
            else:
                runs = None
        e = _rel(p, m)
        t = TARGETS.get(k)
        out[k] = {"measured": m, "predicted": p, "rel_error": e, "target": t,
                  "within": None if t is None or e is None else abs(e) <= t}
        if runs is not None:
            lo, hi = min(runs), max(runs)
            inside = None if p is None else bool(lo <= p <= hi)
            out[k].update(measured_runs=runs, measured_spread=_rel(hi, lo) if lo else None,
                          in_measured_range=inside)
            if inside and out[k]["within"] is False:  # the prediction is as close as the GPU to itself
                out[k].update(within=True, met_by="measured range")
    return out


def categories(run_s: dict, sim_s: dict) -> dict:
    out = {}
    for c in CATEGORIES:
        nm, np_ = run_s["passes"][c], sim_s["passes"][c]
        if not (nm or np_):
            continue
        tm, tp = run_s["pass_time_s"][c], sim_s["pass_time_s"][c]
        out[c] = {"passes_measured": nm, "passes_predicted": np_, "time_measured_s": tm, "time_predicted_s": tp,
                  "mean_measured_ms": tm / nm * 1e3 if nm else None,
                  "mean_predicted_ms": tp / np_ * 1e3 if np_ else None, "time_rel_error": _rel(tp, tm)}
    return out


def compare(trace, cfg, run, sim, sim_passes, cost) -> dict:
    rs, ss = run.result.summary, sim.summary
    rt = rs["runtime"]
    clocked = pass_clocked(cfg)
    plans = same_plans(run, sim, sim_passes, clocked)
    pp = None
    if sim_passes is not None:
        common = plans.get("first_differing_pass", {}).get("pass") if not plans["passes_equal"] else None
        pp = per_pass(run, sim_passes, common)
        pp["over_passes"] = "all" if common is None else f"the first {common} (the plans part there)"
    passes = run.passes
    cap = [p for p in passes if p.get("captured")]
    reps = rt.get("repeats")
    met = metrics(rs, ss, reps)
    checked = [v["within"] for v in met.values() if v["within"] is not None]
    meta = cost.metadata()
    return {
        "spsim_validate": 1,
        "trace": trace.meta.get("name") or trace.meta.get("source") or None,
        "requests": len(trace),
        "first_id": str(trace.ids[0]), "last_id": str(trace.ids[-1]),
        "arrival_span_s": float(trace.arrival_s[-1] - trace.arrival_s[0]) if len(trace) else 0.0,
        "policy": rs["config"]["policy"], "load": cfg.load, "pass_clocked": clocked,
        "acceptance": cfg.acceptance, "seed": cfg.seed, "kv_pages": int(cfg.kv_pages),
        "cost_model": cost.name,
        "profile": cfg.profile or cost.source,
        "cost_metadata": {k: meta.get(k) for k in ("kind", "gpu", "model", "date", "heldout_error") if k in meta},
        "device": rt["device_name"], "model": rt["model"], "dtype": rt["dtype"],
        "same_plans": plans,
        "per_pass": pp,
        "metrics": met,
        "targets_met": all(checked) if checked else None,
        "pass_categories": categories(rs, ss),
        "runtime": {"passes": len(passes), "captures": len(cap),
                    "capture_time_s": sum(p["gpu_ms"] for p in cap) / 1e3,
                    "gpu_time_s": sum(p["gpu_ms"] for p in passes) / 1e3,
                    "host_time_s": sum(p["host_ms"] for p in passes) / 1e3,
                    "prep_time_s": sum(p.get("prep_ms", 0.0) for p in passes) / 1e3,
                    "mean_host_ms": rt["mean_host_ms"], "stopped_early": rt["stopped_early"],
                    "completed": rs["completed"], "rejected": rs["rejected"], "incomplete": rs.get("incomplete"),
                    # graph counts: the measured run's, and the untimed rehearsal's (--rehearse)
                    "cuda_graphs": rt.get("cuda_graphs"), "rehearsal": rt.get("rehearsal"),
                    "padding": rt.get("padding"),
                    # Triton specialisations first launched while measured (each stalled a pass)
                    "kernel_compiles": rt.get("kernel_compiles"),
                    # --repeat: every measured run's numbers (the pass log above is the first's)
                    "repeats": reps},
        "simulator": {"completed": ss["completed"], "rejected": ss["rejected"], "incomplete": ss.get("incomplete")},
    }


# ------------------------------------------------------------------------------------- rendering

def _pct(e) -> str:
    return "-" if e is None else f"{100 * e:+.1f}%"


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"


LABELS = {"output_throughput": "output throughput (tok/s)", "request_throughput": "request throughput (req/s)",
          "duration": "duration (s)"}


def foreign_device(r: dict) -> str | None:
    """A warning where the run's device is not the GPU the cost model prices (a CPU smoke test, or
    another GPU's profile): then the errors compare two machines and say nothing of fidelity."""
    meta = r.get("cost_metadata") or {}
    gpu = meta.get("gpu") if isinstance(meta, dict) else None
    name = gpu.get("name") if isinstance(gpu, dict) else gpu
    dev = str(r.get("device") or "")
    if not name or not dev:
        return None
    flat = "".join(ch for ch in dev.lower() if ch.isalnum())
    if dev.lower() != "cpu" and str(name).split("-")[0].lower() in flat:
        return None
    return (f"measured on {dev}, priced as {name} ({r['cost_model']}): the errors compare two machines; "
            "on a CPU this is a smoke test of the plumbing (check that both worlds built the same plans)")


def other_kernels(r: dict) -> str | None:
    """A warning where the profile timed other versions of the runtime's kernels than the run's
    (`calibration.measure.kernel_version`, a hash of the sources that decide a pass's time)."""
    meta = r.get("cost_metadata") or {}
    was = meta.get("kernel_version") if isinstance(meta, dict) else None
    now = r.get("kernel_version")
    if not was or not now or was == now or str(r.get("device") or "").lower() == "cpu":
        return None
    return (f"the profile timed the runtime's kernels at version {was}, this run's are {now}: the errors include "
            "what the kernels changed since (measure the profile again: spsim calibrate --gpu)")


def notes(r: dict) -> list[str]:
    """Lines worth a warning: plans that should match and do not, a run cut short, rejections."""
    out = []
    sp = r["same_plans"]
    if sp["expected"] and not sp["equal"]:
        what = []
        if not sp["requests_equal"]:
            what.append(f"{sp['requests_differing']:,} requests differ in drafts/verifies/accepted/preemptions "
                        f"(first: {sp['first_differing'][0]})")
        if sp["passes_equal"] is False:
            fp = sp["first_differing_pass"]
            what.append(f"pass {fp['pass']:,} differs: measured {fp['measured']}, simulated {fp['predicted']}")
        out.append("the two worlds did not build the same plans: " + "; ".join(what))
    if (m := other_kernels(r)) is not None:
        out.append(m)
    if (m := foreign_device(r)) is not None:
        out.append(m)
    if r["runtime"]["stopped_early"]:
        out.append("the runtime stopped early (--max-passes): its figures cover part of the trace")
    for w in ("runtime", "simulator"):
        if r[w]["rejected"] or r[w]["incomplete"]:
            out.append(f"{w}: {r[w]['rejected']:,} rejected, {r[w]['incomplete'] or 0:,} incomplete")
    return out


def rows(r: dict) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Tables as (header, rows) by title: metrics, pass by pass (pass-clocked modes), categories."""
    t = {}
    mrows = []
    repeated = "measured_runs" in r["metrics"].get("output_throughput", {})
    for k, v in r["metrics"].items():
        label = LABELS.get(k) or f"{k.split('_', 1)[1].replace('_ms', '').upper()} {k.split('_')[0].replace('median', 'p50')} (ms)"
        tgt = "" if v["target"] is None else (f"±{100 * v['target']:.0f}% " + ("ok" if v["within"] else "MISSED")
                                                 + (" (in the runs' range)" if v.get("met_by") else ""))
        row = [label, _num(v["measured"]), _num(v["predicted"]), _pct(v["rel_error"]), tgt]
        if repeated:
            runs = v.get("measured_runs")
            row.insert(2, "" if not runs else f"{_num(min(runs))} .. {_num(max(runs))}")
        mrows.append(row)
    head = ["metric", "measured", "predicted", "error", "target"]
    if repeated:
        n = len(r["metrics"]["output_throughput"]["measured_runs"])
        head = ["metric", f"measured (mean of {n})", "range", "predicted", "error", "target"]
    t["predicted vs measured"] = (head, mrows)
    pp = r["per_pass"]
    if pp is not None:
        prow = []
        for c in ("all", *CATEGORIES):
            s = pp.get(c)
            if not s or not s["passes"]:
                continue
            prow.append([c, f"{s['passes']:,}", f"{s['measured_mean_ms']:.2f}", f"{s['predicted_mean_ms']:.2f}",
                         f"{100 * s['median_abs_rel']:.1f}%", f"{100 * s['p95_abs_rel']:.1f}%", _pct(s["mean_rel"])])
        cap = pp["captures"]
        if cap["passes"]:
            prow.append(["graph captures (left out)", f"{cap['passes']:,}", f"{cap['measured_s'] * 1e3 / cap['passes']:.2f}",
                         f"{cap['predicted_s'] * 1e3 / cap['passes']:.2f}", "", "", ""])
        t[f"pass by pass ({pp['over_passes']} passes)"] = (
            ["passes", "n", "measured mean ms", "predicted mean ms", "median |err|", "p95 |err|", "bias"], prow)
    crow = []
    for c, v in r["pass_categories"].items():
        crow.append([c, f"{v['passes_measured']:,} / {v['passes_predicted']:,}", _num(v["time_measured_s"]),
                     _num(v["time_predicted_s"]), _pct(v["time_rel_error"])])
    t["time per pass category"] = (["category", "passes meas. / pred.", "measured s", "predicted s", "error"], crow)
    return t


def plans_line(r: dict) -> str:
    sp = r["same_plans"]
    if not sp["expected"]:
        return (f"plans: not expected to match with arrivals ({sp['requests_differing']:,} of {r['requests']:,} "
                f"requests differ in drafts/verifies/accepted)")
    if sp["equal"]:
        n = sp["passes_measured"]
        return f"plans: the same in both worlds ({n:,} passes, every request's drafts/verifies/accepted equal)"
    return "plans: DIFFER (see the warning)"


def runtime_line(r: dict) -> str:
    """Where measured time went beyond what the simulator prices: graph captures, host planning."""
    rt = r["runtime"]
    gpu = rt["gpu_time_s"] or 1.0
    return (f"runtime: {rt['passes']:,} passes, {rt['gpu_time_s']:.2f} s measured pass time (input preparation "
            f"{rt['prep_time_s']:.2f} s of it); {rt['captures']:,} graph captures took {rt['capture_time_s']:.2f} s "
            f"({rt['capture_time_s'] / gpu:.0%}); host planning {rt['host_time_s']:.2f} s "
            f"({rt['mean_host_ms']:.2f} ms per pass)"
            + ("" if not rt.get("rehearsal") else f"; after a rehearsal of {rt['rehearsal']['passes']:,} passes"
               f" ({rt['rehearsal'].get('captures', 0):,} graphs captured)")
            + ("" if not rt.get("cuda_graphs") else f"; {rt['cuda_graphs']['eager']:,} decode-like passes ran eager"
               + (f" ({rt['cuda_graphs']['eager_prefill']:,} passes past the graph's prefill limit, eager by design)"
                  if rt["cuda_graphs"].get("eager_prefill") else ""))
            + ("" if not rt.get("kernel_compiles") else f"; {rt['kernel_compiles']['count']:,} kernel compiles"))


def text(r: dict) -> str:
    """Plain-text tables, for a terminal without rich (the GPU machine)."""
    lines = [f"{r['policy']} on {r['trace']} ({r['requests']:,} requests, {r['load']}), {r['model']} on {r['device']}, "
             f"cost {r['cost_model']}", plans_line(r), runtime_line(r)]
    for title, (head, body) in rows(r).items():
        w = [max(len(x) for x in col) for col in zip(head, *body)]
        lines += ["", title, "  ".join(h.ljust(n) for h, n in zip(head, w))]
        lines += ["  ".join(x.ljust(n) if i == 0 else x.rjust(n) for i, (x, n) in enumerate(zip(row, w))) for row in body]
    adj = r.get("machine_adjusted")
    if adj:  # the same prices on this machine (calibration/machine.py), beside the plain errors
        lines += ["", f"priced for this machine (its anchor pass {100 * (adj['factor'] - 1):+.1f} % against the "
                  "profile's): " + ", ".join(f"{k} {100 * e:+.1f} %" for k, e in adj["rel_error"].items())]
    lines += [f"warning: {n}" for n in notes(r)]
    return "\n".join(lines)
