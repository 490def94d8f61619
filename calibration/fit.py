"""Fit a `CalibratedCostModel` to measured pass times (scipy least squares on log error).

The model's structure is fixed (spsim/cost/calibrated.py); what is fitted is its constants:
the roofline's (per-layer fixed cost, GEMM efficiency and knee, sampling bytes per logit,
attention flop efficiency, per-request and per-split attention costs), the two bandwidth scales
(weights, attention KV), and the runtime's extra terms (eager pass, per verifying request, per
drafting request, per context page and per pass of drafting, by draft-KV method; eager launches
of prefill passes). Structural
integers (page size, split size, MMA tiles, attention floor) stay the roofline's.

What is fitted is each point's device time (CUDA events around the forward) where the sweep ran
the overlapped runtime (each pass prepared while the previous one ran, as `spsim run` serves), else
its wall time. Residuals are log(predicted / measured) on the points not held out, with a soft-L1 loss (a few
noisy points cannot drag the fit), plus a weak pull of every constant towards its starting value
(the roofline's, or a small positive guess) so constants the data cannot tell apart stay put
instead of wandering (weights' read time and the per-layer fixed cost are both per-pass constants
at small batches). Errors are reported as fractions, |predicted / measured - 1|.

Host planning time is not in the measured passes (the runtime's timer starts after planning):
it comes from the per-pass logs of `spsim run` (`host_ms` in passes.jsonl) when given, else it is
the roofline's assumption, and the profile says which.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from spsim.config import ServingConfig
from spsim.cost.batch import PlanBatch
from spsim.cost.calibrated import N_METHODS, CalibratedCostModel, CalibratedParams
from spsim.cost.roofline import RooflineParams
from spsim.errors import InputError, SpsimError
from spsim.plan import DraftMethod

from .records import Measurement, json_lines

PRIOR_WEIGHT = 0.001  # per constant, in units of its scale: ~0.1 % of one point's log error
LOSS_SCALE = 0.03  # soft-L1 knee: residuals beyond ~3 % count linearly
WEIGHT_SCALE_MAX = 1.2  # see Fitter: the weights' read time at most 1.2x the copy bandwidth's
TAIL_BW_START = 2.0  # attn_tail_bw's starting value (1: the pure makespan)
SEARCH_TOL = 1e-4  # the search's tolerance (ftol, xtol, gtol) per value of attn_item_tokens
ITEM_TOKENS = (128,)  # attn_item_tokens tried (several: an outer search, the fit at each, the lowest loss
#                      kept). One by default: searching 128-768 chose 256 on the older H100 and 3B sweeps,
#                      the 3B's held-out p95 6.9 -> 8.2 % at the lower loss (docs/calibration.md)
ATTN_SMS = 132  # SMs the runtime's attention plans its work items for (plan_attention's num_sms: the
#                 H200's 132; spsim/cost/calibrated.py work_ratio). Assumed, not fitted


SELECTING = {m.label for m in DraftMethod if m != DraftMethod.STATIC}  # methods whose drafts select pages


class Fitter:
    """Maps a vector of free constants to `CalibratedParams` (tied where the data cannot tell
    two apart: methods that select at every step have no first/later difference)."""

    def __init__(self, labels: set[str], base: CalibratedCostModel, host_overhead_s: float = 0.0,
                 spec_pass: bool = True, ties: dict | None = None, keeps_scores: bool = False):
        """`base`: the model with neutral constants (the roofline's), for starting values. `spec`,
        `spec_pass`: whether the points verify drafts (a query > 1) and so show the acceptance
        path. `ties`: {method: like method} for draft-KV methods with
        no usable points whose draft terms are taken from a method running the same code.
        `keeps_scores`: some points keep page scores (verify-attn passes that verify or prefill)."""
        d = RooflineParams()
        # physical limits: nothing streams faster than the HBM's peak (the scales multiply read
        # times at the copy bandwidth, bw_eff of the peak) or computes faster than the tensor
        # cores' peak (the efficiencies are of the achievable GEMM rate, flops_eff of the peak)
        g = base.gpu
        bw_lo, fl_hi = g.bw_eff, 1.0 / g.flops_eff
        # and the weights stream in at most 1.2x the copy bandwidth's time: the whole linear part of
        # an 8B pass (weights, launches, norms) took 4.1 ms at 1-64 tokens on our H200, 1.17x its
        # weights at 4.27 TB/s (docs/anchors.md); the fit cannot tell a slower read from a larger
        # per-pass constant (both are flat at small batches) and drifted to 2.1x on the 3B sweep
        # (name, index or None, start, lower, upper, scale)
        spec = [("layer_fixed_s", None, d.layer_fixed_s, 0.0, 1e-3, 1e-5),
                ("gemm_eff", None, d.gemm_eff, 0.05, fl_hi, 0.1),
                ("smooth_p", None, d.smooth_p, 1.0, 12.0, 0.5),
                ("weight_scale", None, 1.0, bw_lo, WEIGHT_SCALE_MAX, 0.1),
                ("sample_bytes_per_logit", None, float(d.sample_bytes_per_logit), 0.0, 200.0, 5.0),
                ("attn_bw_scale", None, 1.0, bw_lo, 5.0, 0.1),
                ("attn_flops_eff", None, d.attn_flops_eff, 0.02, fl_hi, 0.1),
                ("attn_split_s", None, d.attn_split_s, 0.0, 1e-4, 1e-6)]
        if "prefill" in labels:  # eager passes: launches overlap the GPU's work (smoothmax) plus a rest
            spec.append(("eager_pass_s", None, 1e-4, 0.0, 1.0, 1e-3))
            spec.append(("eager_launch_s", None, 10e-3, 0.0, 1.0, 1e-3))
            spec.append(("eager_p", None, 4.0, 1.0, 30.0, 1.0))
        if labels & {"ar", "verify"} or any(x.startswith("mixed") for x in labels):
            spec.append(("verify_req_s", None, 1e-5, 0.0, 1e-2, 1e-5))
        if spec_pass:
            spec.append(("spec_pass_s", None, 1e-3, 0.0, 0.1, 1e-3))
        if any(x.startswith("mixed") for x in labels):  # passes that draft and verify: both sampling paths
            spec.append(("mixed_pass_s", None, 1e-4, 0.0, 0.1, 1e-3))
        if keeps_scores:  # the attention kernel writing page scores (measured ~1.3-1.5x on the H200)
            spec.append(("score_attn_frac", None, 0.1, 0.0, 3.0, 0.1))
        # the attention tiles' flop rates (32, 64, 128 rows; 16 rows: attn_flops_eff) and the overlap
        # of a request's KV read with its flops; prefill chunks run 128-row tiles
        for i in range(3):
            spec.append(("attn_tile_eff", (i,), d.attn_flops_eff, 0.02, fl_hi, 0.1))
        spec.append(("attn_p", None, 2.0, 1.0, 16.0, 0.5))
        # the work-item tail's bandwidth share: an SM alone streams KV faster than 1/SMs of the HBM,
        # so a short-tile launch's last items (fewer than SMs) end sooner than the makespan says
        spec.append(("attn_tail_bw", None, TAIL_BW_START, 1.0, 16.0, 0.5))
        self.page0 = [[float(base.score_tbl[m, j]) for j in (0, 1)] for m in range(N_METHODS)]
        if any(x.split(":")[-1] in SELECTING for x in labels):  # a selection's latency (top-k of a row)
            spec.append(("select_base_req", None, 1.0, 0.0, 64.0, 1.0))
        for m in DraftMethod:
            if f"draft:{m.label}" not in labels and f"mixed:{m.label}" not in labels:
                continue
            spec.append(("draft_pass_s", (int(m),), 1e-3, 0.0, 1.0, 1e-3))
            if m != DraftMethod.STATIC:  # top-k per selecting request per padded column (static: none)
                spec.append(("select_col_s", (int(m),), 5e-9, 0.0, 1e-6, 5e-9))
            if m == DraftMethod.VERIFY_ATTN and (f"mixed:{m.label}" in labels or "prefill" in labels):
                spec.append(("score_col_s", None, 5e-9, 0.0, 1e-6, 5e-9))  # its passes keep page scores
            later = (1,) if m.refresh == "verify" else ()
            if later:  # selection runs at a run's first draft only
                spec.append(("first_pass_s", (int(m),), 1e-3, 0.0, 1.0, 1e-3))
            for j in (0,) + later:
                spec.append(("draft_req_s", (int(m), j), 1e-5, 0.0, 1e-2, 1e-5))
                spec.append(("draft_page_s", (int(m), j), max(self.page0[m][j], 1e-9), 0.0, 1e-4, 1e-7))
        self.spec = spec
        self.ties = dict(ties or {})
        self.host_overhead_s = host_overhead_s
        self.x0 = np.array([s[2] for s in spec])
        self.lo = np.array([s[3] for s in spec])
        self.hi = np.array([s[4] for s in spec])
        self.scale = np.array([s[5] for s in spec])

    def params(self, x) -> CalibratedParams:
        flat = {"host_overhead_s": self.host_overhead_s, "attn_sms": ATTN_SMS}
        dpass = [0.0] * N_METHODS
        fpass = [0.0] * N_METHODS
        select = [0.0] * N_METHODS
        tile = [RooflineParams().attn_flops_eff] * 3
        dreq = [[0.0, 0.0] for _ in range(N_METHODS)]
        dpage = [list(r) for r in self.page0]
        tied = {int(m) for m in DraftMethod if m.refresh != "verify"}
        for (name, idx, *_), v in zip(self.spec, np.asarray(x, float).tolist()):
            if idx is None:
                flat[name] = v
            elif name == "draft_pass_s":
                dpass[idx[0]] = v
            elif name == "first_pass_s":
                fpass[idx[0]] = v
            elif name == "select_col_s":
                select[idx[0]] = v
            elif name == "attn_tile_eff":
                tile[idx[0]] = v
            else:
                tbl = dreq if name == "draft_req_s" else dpage
                m, j = idx
                tbl[m][j] = v
                if m in tied:
                    tbl[m][1] = v
        for m, like in self.ties.items():
            dpass[m], fpass[m], select[m] = dpass[like], fpass[like], select[like]
            dreq[m], dpage[m] = list(dreq[like]), list(dpage[like])
        return CalibratedParams(**flat, draft_pass_s=tuple(dpass), draft_req_s=tuple(map(tuple, dreq)),
                                draft_page_s=tuple(map(tuple, dpage)), first_pass_s=tuple(fpass),
                                attn_tile_eff=tuple(tile), select_col_s=tuple(select))


def errors(pred: np.ndarray, meas: np.ndarray) -> dict:
    r = np.abs(pred / meas - 1)
    if not len(r):
        return {"n": 0}
    return {"n": int(len(r)), "median_abs_rel": float(np.median(r)), "p95_abs_rel": float(np.percentile(r, 95)),
            "max_abs_rel": float(r.max()), "mean_rel": float(np.mean(pred / meas - 1))}


def group_errors(pred, meas, labels) -> dict:
    labels = np.asarray(labels)
    return {g: errors(pred[labels == g], meas[labels == g]) for g in sorted(set(labels.tolist()))}


def fit(measurements: list[Measurement], model, gpu=ServingConfig.gpu, tp: int = ServingConfig.tp,
        weight_dtype: str = ServingConfig.weight_dtype, kv_dtype: str = ServingConfig.kv_dtype,
        page_size: int = ServingConfig.page_size, host_overhead_s: float | None = None, info: dict | None = None,
        max_nfev: int = 400, runtime: dict | None = None,
        items: tuple = ITEM_TOKENS) -> tuple[CalibratedCostModel, dict]:
    """Fit on the measured points not held out; returns the model (host overhead set) and a report
    with `fit_error`, `heldout_error` (each overall and per group) and the points' predictions.
    `runtime`: what the measured runtime did (CalibratedParams' prefill_graph_tokens,
    prefill_split; `calibrate.runtime_of`), fixed, not fitted. `items`: the work item's fixed costs
    (`attn_item_tokens`) the fit tries, keeping the lowest loss's."""
    from scipy.optimize import least_squares

    ok = [m for m in measurements if m.ok]
    if not ok:
        raise SpsimError("no successful measurements to fit")
    # a point measured twice (resumed sweeps never do this, merged files may): keep the last
    by_key = {m.point.key: m for m in ok}
    ok = list(by_key.values())
    ok, excluded = _current(ok)
    train = [m for m in ok if not m.point.heldout]
    test = [m for m in ok if m.point.heldout]
    if len(train) < 10:
        raise SpsimError(f"only {len(train)} measured points to fit on (need 10 or more)")
    labels = {m.point.label for m in train}
    shape = dict(model=model, gpu=gpu, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, page_size=page_size,
                 check_memory=False)
    spec_pass = any(q > 1 for m in train for _, q in m.point.verifies)
    ties = {}
    for m in DraftMethod:  # a method without drafting points takes the terms of one running its code
        like = _SAME_CODE.get(m)
        if like is not None and f"draft:{m.label}" not in labels and f"draft:{like.label}" in labels:
            ties[int(m)] = int(like)
    b_train = PlanBatch.of([m.point.plan() for m in train])
    # the score terms' constant only where some pass pays it (the rule that prices it: PlanBatch.keeps)
    fitter = Fitter(labels, CalibratedCostModel(params=CalibratedParams(), **shape), spec_pass=spec_pass,
                    ties=ties, keeps_scores=bool(b_train.keeps().any()))
    rt = dict(runtime or {})

    def solve1(y: np.ndarray, item: float, x0=None, tol: float = 1e-12, nfev: int = max_nfev):
        log_y = np.log(y)
        fixed = {**rt, "attn_item_tokens": float(item)}

        def resid(x):
            cm = CalibratedCostModel(params=replace(fitter.params(x), **fixed), **shape)
            r = np.log(np.maximum(cm.times(b_train), 1e-12)) - log_y
            return np.concatenate([r, PRIOR_WEIGHT * (x - fitter.x0) / fitter.scale])

        sol = least_squares(resid, fitter.x0 if x0 is None else x0, bounds=(fitter.lo, fitter.hi),
                            x_scale=fitter.scale, loss="soft_l1", f_scale=LOSS_SCALE, max_nfev=nfev, method="trf",
                            ftol=tol, xtol=tol, gtol=tol)
        return sol, replace(fitter.params(sol.x), **fixed)

    searched = {}

    def solve(y: np.ndarray, item: float | None = None, x0=None):
        """The fit at `item` (attn_item_tokens), or at the one of `items` whose fit has the lowest
        loss (the work item's fixed cost: the fit cannot move it smoothly, each value reschedules
        the plans). The search fits each to a loose tolerance (SEARCH_TOL: the loss to ~1e-4 of
        itself, a few seconds each), then the chosen one fully."""
        if item is None and len(items) > 1:
            for c in items:
                sol, _ = solve1(y, c, tol=SEARCH_TOL)
                searched[float(c)] = float(sol.cost)
            item = min(searched, key=searched.get)
        return solve1(y, items[0] if item is None else item, x0)

    allm = train + test
    n_tr = len(train)
    b_all = PlanBatch.of([m.point.plan() for m in allm])
    lab = [m.point.label for m in allm]

    def split_errors(pred, meas):
        return ({**errors(pred[:n_tr], meas[:n_tr]), "groups": group_errors(pred[:n_tr], meas[:n_tr], lab[:n_tr])},
                {**errors(pred[n_tr:], meas[n_tr:]), "groups": group_errors(pred[n_tr:], meas[n_tr:], lab[n_tr:])})

    wall = np.array([m.seconds for m in allm])
    gpu = _gpu_times(allm)
    # An overlapped runtime prepares each pass while the previous one runs, and its passes last
    # their device time (the pass interval runs on the GPU's clock): fit that. The sweep's wall time
    # also holds the host's serial part of a back-to-back loop (~1 % of a pass, ~65 us at batch 1 on
    # the H200), which the serving loop hides: fitted to wall time, the 8B profile predicted Azure
    # batch-1..4 decodes' mean TPOT 3.3 % high, to device time 2.0 %.
    on_device = gpu is not None and bool(rt.get("overlap"))
    meas = gpu if on_device else wall
    sol, params = solve(meas[:n_tr])
    cm = CalibratedCostModel(params=params, **shape)
    pred = cm.times(b_all)
    fit_err, held_err = split_errors(pred, meas)
    report = {
        "target": "device" if on_device else "wall",
        "fit_error": fit_err,
        "heldout_error": held_err,
        "points": {"measured": len(ok) + len(excluded), "fit": n_tr, "heldout": len(test),
                   "failed": sum(1 for m in measurements if not m.ok), "excluded": len(excluded)},
        "excluded": excluded,
        "tied": {DraftMethod(m).label: DraftMethod(like).label for m, like in ties.items()},
        "optimizer": {"status": int(sol.status), "message": str(sol.message), "nfev": int(sol.nfev)},
        "attn_item_tokens": {"chosen": float(params.attn_item_tokens), "loss": searched},
        "predictions": [{"id": m.point.key, "label": m.point.label, "heldout": m.point.heldout,
                         "measured_s": float(y), "predicted_s": float(p)} for m, y, p in zip(allm, wall, pred)],
    }
    if gpu is not None:
        # the other time fitted too: the device's alone (CUDA events around the forward) beside a
        # wall-time profile, or the wall beside a device-time one; their gap is the host's serial
        # share of each pass (input preparation, sampling, bookkeeping) and its episodes of slowness
        other = wall if on_device else gpu
        # (the item cost the main fit chose; from its constants: the two fits lie close)
        _, oparams = solve(other[:n_tr], params.attn_item_tokens, sol.x)
        opred = CalibratedCostModel(params=oparams, **shape).times(b_all)
        o_fit, o_held = split_errors(opred, other)
        dev_pred = pred if on_device else opred
        for row, y, p in zip(report["predictions"], gpu, dev_pred):
            row["measured_gpu_s"], row["predicted_gpu_s"] = float(y), float(p)
        host = {}
        for g in sorted(set(lab)):
            sel = np.array([x == g for x in lab])
            host[g] = round(float(np.median(wall[sel] - gpu[sel])) * 1e3, 3)
        share = round(float(np.median(1 - gpu / wall)), 4)
        report["wall_time" if on_device else "gpu_time"] = {"fit_error": o_fit, "heldout_error": o_held,
                                                            "host_ms_median": host, "host_share_median": share}
    host = RooflineParams().host_overhead_s if host_overhead_s is None else float(host_overhead_s)
    final = CalibratedCostModel(params=replace(params, host_overhead_s=host), **shape,
                                info=_profile_info(info or {}, report, host, host_overhead_s is not None))
    return final, report


# Draft-KV methods whose drafts run the same runtime code as another's, but for what they read at a
# run's first draft (verify-attn: stored attention scores; verify-quest: Quest bounds): pass_attention.py
_SAME_CODE = {DraftMethod.VERIFY_ATTN: DraftMethod.VERIFY_QUEST}


def _gpu_times(ms: list[Measurement]) -> np.ndarray | None:
    """Each point's median device time (`gpu_s`: CUDA events around the forward), where every
    point has one (GPU sweeps); None otherwise (CPU sweeps, older files)."""
    out = []
    for m in ms:
        g = [x for x in (m.record.get("gpu_s") or []) if isinstance(x, (int, float)) and np.isfinite(x) and x > 0]
        if not g:
            return None
        out.append(float(np.median(g)))
    return np.array(out)


def _current(ok: list[Measurement]) -> tuple[list[Measurement], list[dict]]:
    """The points that time what the runtime does now, and the others with the reason. A pass
    without prefill recorded as run eagerly in a sweep that replayed graphs was measured when the
    runtime did not graph its method (verify-attn, before f48e375): launch-bound, 28-70 ms for
    passes the graphed runtime runs in ~10-20 ms, and bimodal (62 vs 28-38 ms at the same
    composition), so it says nothing about today's cost."""
    graphs = any(m.record.get("graphed") for m in ok)
    keep, out = [], []
    for m in ok:
        reason = None
        if graphs and m.record.get("graphed") is False and not m.point.prefill:
            reason = "run eager (no CUDA graph) where the runtime now replays a graph"
        elif m.record.get("shared_pages"):
            # more KV than the sweep's cache: drafting requests read each other's pages, and with
            # one query they select the same ones, from L2 (measured 9-29 % faster than the fit
            # of the rest); no server of this GPU runs such a pass, its KV would not fit
            reason = "requests shared KV pages (more KV than the GPU holds; L2 hits)"
        if reason:
            out.append({"id": m.point.key, "label": m.point.label, "measured_s": m.seconds, "reason": reason})
        else:
            keep.append(m)
    return keep, out


def _profile_info(info: dict, report: dict, host: float, measured_host: bool) -> dict:
    out = dict(info)
    out["fit_error"] = _round(report["fit_error"])
    out["heldout_error"] = _round(report["heldout_error"])
    out["fit_target"] = report.get("target", "wall")
    if "wall_time" in report:
        w = report["wall_time"]
        held = {k: v for k, v in w["heldout_error"].items() if k != "groups"}
        out["wall_time_error"] = {"heldout_error": _round(held), "host_share_median": w["host_share_median"]}
    if "gpu_time" in report:
        g = report["gpu_time"]
        out["gpu_time_error"] = {"heldout_error": _round({k: v for k, v in g["heldout_error"].items() if k != "groups"}),
                                 "host_share_median": g["host_share_median"]}
    out["points"] = report["points"]
    if report.get("tied"):
        out["tied_draft_terms"] = report["tied"]
    out["host_overhead"] = {"seconds": host, "source": out.pop("host_source", None) if measured_host else
                            "assumption (the roofline's); give --host-log passes.jsonl from `spsim run`"}
    return out


def _round(d):
    if isinstance(d, dict):
        return {k: _round(v) for k, v in d.items()}
    return round(d, 5) if isinstance(d, float) else d


def host_overhead_from_log(path: str | Path) -> float:
    """Mean host planning seconds per pass from `spsim run --out DIR`'s passes.jsonl."""
    path = Path(path)
    vals = []
    for i, rec in json_lines(path, "the pass log"):
        v = rec.get("host_ms") if isinstance(rec, dict) else None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise InputError(path, i, "host_ms", f"must be a number >= 0, got {v!r}")
        vals.append(float(v))
    if not vals:
        raise SpsimError(f"{path}: no passes in the pass log")
    return float(np.mean(vals)) / 1e3


def params_dict(p: CalibratedParams) -> dict:
    return asdict(p)
