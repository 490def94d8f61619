"""Published acceptance/speedup figures against the acceptance presets (issue 4).

The figures and their sources: docs/anchors.md; as data: docs/published_figures.json (read here).

Simulates single requests directly with the acceptance model (fixed-k decoding and an entropy-
adaptive controller), vectorised over requests; costs are the papers' where stated below, not our
cost model. Writes benchmarks/results/paper_shapes.json (published vs simulated, machine, versions).

    python3 benchmarks/paper_shapes.py            # evaluate the committed presets
    python3 benchmarks/paper_shapes.py --refit    # refit the presets' parameters to the figures first

Settings (greedy decoding, temperature 0, unless the paper says otherwise; output 128 tokens):
- SparseSpec-L (Llama-3.1-8B, LongBench v2, A40, batch 1): acceptance = E[accepted / k] over
  verifications with k drafts. Costs: the paper's, in AR-step units. Inverting S = (a k + 1) /
  (k g + 1) with the published a and S gives the draft/verify ratio g(k) per k (0.31 -> 0.23); the
  fixed-k speedups use that g(k) (so they test acceptance only). The adaptive controller needs a
  cost for any k: a cycle costs k g_d + 1 + c0 (c0: per-verification overhead such as the sparse
  index rebuild), g_d and c0 least-squares fitted to the five published speedups.
- MagicDec per-context (Llama-3.1-8B, PG-19, StreamingLLM static window, budget 512): per-token
  acceptance = P(first draft after a verification is accepted), i.e. the i.i.d. alpha.
- MagicDec inversion (static SnapKV window on LongBench v2, context 64K: SparseSpec-L's truncation,
  where most LongBench v2 documents sit; budget 512): shape only. Cost ratio g = 0.1 (our choice:
  large batch and long context, where KV reads dominate a pass); acceptance = E[accepted / k].
- The static window's cliff (docs/acceptance.md): the draft-length slope of a static window is
  `static_stale` up to a knee and grows by `static_stale_ctx` per e-fold of context/budget beyond
  it. The knee is set at 32K / 512 (the longest context where MagicDec publishes best draft lengths
  of 3-4 for Llama-3.1-8B, which a cliff there would rule out); `static_stale` below it is the
  verify-refresh staleness (assumed); `static_offset` and `static_stale_ctx` are fitted to the
  LongBench inversion at 64K (`--refit-static` refits only these).
- ASPIRE: gap in E[accepted / k] at k = 10 between STEP_LAYER and VERIFY_QUEST, context 32K,
  budget 10 %.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares, minimize

from spsim.plan import DraftMethod
from spsim.policies import entropy_rule as er
from spsim.acceptance import LatentAcceptance, LatentParams, load_preset
from spsim.acceptance.curves import fixed_k_runs

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "simulator" / "acceptance" / "presets"
# the published figures, numbers as published: docs/published_figures.json (sources in docs/anchors.md)
PUB = json.loads((ROOT / "docs" / "published_figures.json").read_text())
SS = PUB["sparsespec_l_fixed_k"]
KS = np.array(SS["k"])
A_PUB, S_PUB = np.array(SS["acceptance_fraction"]), np.array(SS["speedup_vs_ar"])
G_PER_K = ((A_PUB * KS + 1) / S_PUB - 1) / KS  # the paper's implied draft/verify cost ratio per k
VR, ST, SR = int(DraftMethod.VERIFY_QUEST), int(DraftMethod.STATIC), int(DraftMethod.STEP_LAYER)
N_REQ, OUT = 1000, 128
SS_CTX, SS_BUD = 32768, 3277  # LongBench v2 up to 64K, budget ~10 %
MAGIC_G = 0.1
LB_CTX = 65536  # LongBench v2 under SparseSpec-L's 64K truncation
STATIC_KNEE = float(np.log(32768 / 512))  # MagicDec's longest context with published best draft lengths


def smooth_cost() -> tuple[float, float]:
    """(g_d, c0): cycle cost k g_d + 1 + c0 in AR steps, fitted to the published speedups."""
    res = least_squares(lambda x: ((A_PUB * KS + 1) / (KS * x[0] + 1 + x[1]) - S_PUB) / S_PUB, [0.2, 0.4])
    return float(res.x[0]), float(res.x[1])


def model(params: LatentParams, seed: int = 0) -> LatentAcceptance:
    return LatentAcceptance(params, seed=seed)


def acc_fractions(p, ks, n=N_REQ, **kw):
    return np.array([fixed_k_runs(model(p), int(k), n, OUT, **kw)["acceptance_fraction"] for k in ks])


def adaptive(p: LatentParams, gd: float, c0: float, n=N_REQ, ctx=SS_CTX, bud=SS_BUD, method=VR, kmax=32,
             ema=0.3, prior0=0.9) -> dict:
    """Entropy-adaptive decoding with the SparseSpec-L rule (policies/entropy_rule.py); the per-request
    prior is an EMA of the per-token acceptance estimated from each verification."""
    m = model(p)
    slope, thr = er.rule_from_auc(p.auc, p.entropy_sigma, p.entropy_median)
    rid = np.arange(n)
    for r in rid.tolist():
        m.begin(r, ctx, OUT)
    pos, nd = np.zeros(n, np.int64), np.zeros(n, np.int64)
    ph, prior = np.ones((n, kmax)), np.full(n, prior0)
    C = np.full(n, ctx)
    vcost = np.full(kmax + 1, 1.0 + c0)
    cost, drafted, accepted, frac = 0.0, 0, 0, []
    while (pos < OUT).any():
        live = pos < OUT
        more = er.draft_more(ph, nd, prior, gd, vcost, np.minimum(kmax, OUT - pos - 1)) & live
        i = np.flatnonzero(more)
        if len(i):
            e = m.draft_entropy(i, pos[i], nd[i], C[i], bud, method)
            ph[i, nd[i]] = er.token_acceptance(e, prior[i], slope, thr)
            nd[i] += 1
            cost += gd * len(i)
        i = np.flatnonzero(live & ~more)
        if len(i):
            k = nd[i]
            a = m.verify(i, pos[i], k, C[i], bud, method)
            cost += (1.0 + c0) * len(i)
            pos[i] += a + 1
            drafted, accepted = drafted + int(k.sum()), accepted + int(a.sum())
            h = k > 0
            frac += (a[h] / k[h]).tolist()
            est = np.clip(a / np.maximum(a + (a < k), 1), 0.05, 0.995)
            prior[i] = np.where(h, (1 - ema) * prior[i] + ema * est, prior[i])
            nd[i] = 0
            ph[i] = 1.0
    return {"speedup": n * OUT / cost, "acceptance_fraction": float(np.mean(frac)),
            "mean_drafts_per_verify": drafted / max(len(frac), 1)}


def per_token_static(p, contexts, budget=512, n=N_REQ):
    """P(first draft accepted) with a static window of `budget` at each context."""
    out = []
    for c in contexts:
        r = fixed_k_runs(model(p), 1, n, OUT, int(c), budget, ST)
        out.append(r["draft_acceptance_rate"])
    return np.array(out)


def magic_inversion(p, ks=(1, 2, 3, 4, 6, 8, 12, 16), n=N_REQ):
    a = acc_fractions(p, ks, n, context=LB_CTX, budget=512, method=ST)
    k = np.array(ks)
    return k, a, (a * k + 1) / (k * MAGIC_G + 1)


def aspire_gap(p, n=N_REQ):
    a_vr = acc_fractions(p, [10], n, context=SS_CTX, budget=SS_BUD, method=VR)[0]
    a_sr = acc_fractions(p, [10], n, context=SS_CTX, budget=SS_BUD, method=SR)[0]
    return a_sr, a_vr


# ---------------------------------------------------------------------------------------------
def refit() -> None:
    """Fit the presets' free parameters to the figures (Nelder-Mead on fixed-seed simulations).

    The spread parameters (sigma_req, sigma_span, rho) are not identified by the fixed-k curve; they
    were chosen by hand among (0.5, 1, 0.9), (0.8, 1, 0.9), (0.5, 1.5, 0.95), (1, 2, 0.97) as the
    one where the entropy-adaptive controller beats the best fixed k as SparseSpec-L reports
    (the others leave it 1-3 % below)."""
    n = 600
    het = dict(sigma_req=1.0, sigma_span=2.0, rho=0.97, ctx_slope=0.05, auc=SS["entropy_auc_for_acceptance"],
               step_residual=0.1)

    def ss_obj(x):
        p = LatentParams(mu=x[0], stale=x[1], **het)
        return float(((acc_fractions(p, KS, n, context=SS_CTX, budget=SS_BUD) - A_PUB) ** 2).sum() * 1e4)

    r = minimize(ss_obj, [5.84, 0.096], method="Nelder-Mead", options=dict(xatol=2e-3, fatol=1e-2, maxiter=60))
    base = dict(het, mu=float(r.x[0]), stale=float(r.x[1]))
    print("sparsespec", base, r.fun, flush=True)

    mc = PUB["magicdec_acceptance_vs_context"]

    def pg_obj(x):
        p = LatentParams(**base, static_offset=x[0], static_ctx_slope=x[1])
        return float(((per_token_static(p, mc["context"], n=n) - np.array(mc["per_token_acceptance"])) ** 2).sum() * 1e4)

    r = minimize(pg_obj, [-4.0, 0.1], method="Nelder-Mead", options=dict(xatol=2e-3, fatol=1e-2, maxiter=60))
    base.update(static_offset=float(r.x[0]), static_ctx_slope=float(r.x[1]))
    print("magicdec pg19", base, r.fun, flush=True)

    inv = fit_cliff(base, n)
    print("magicdec inversion", inv, flush=True)
    base.update({k: inv[k] for k in ("static_stale", "static_stale_ctx", "static_knee")})

    gap = PUB["aspire_headline"]["staleness_gap_pp_at_draft_length_10"] / 100

    def asp_obj(x):
        sr, vr = aspire_gap(LatentParams(**{**base, "stale": x[0]}), n=n)
        return float(((sr - vr) - gap) ** 2 * 1e4)

    r = minimize(asp_obj, [0.2], method="Nelder-Mead", options=dict(xatol=1e-3, fatol=1e-3, maxiter=40))
    asp = {**base, "stale": float(r.x[0])}
    print("aspire", asp, r.fun, flush=True)
    # PG-19's rolling window: MagicDec reports long drafts paying up to 100K; no cliff, verify-refresh staleness
    pg19 = {**base, "static_stale": base["stale"], "static_stale_ctx": 0.0, "static_knee": 0.0}
    for name, params in [("sparsespec-llama8b", base), ("magicdec-pg19-llama8b", pg19),
                         ("magicdec-longbench-llama8b", inv), ("aspire-llama8b", asp)]:
        f = PRESETS / f"{name}.json"
        d = json.loads(f.read_text())
        d["params"] = asdict(LatentParams(**{**d["params"], **params}))
        f.write_text(json.dumps(d, indent=1) + "\n")


def fit_cliff(base: dict, n: int = 600) -> dict:
    """static_offset and static_stale_ctx fitted to the LongBench inversion (1.74x at k=2, 6.3 % at
    k=16) at 64K with the knee at 32K / 512 and the verify-refresh staleness below it."""
    mi = PUB["magicdec_longbench_inversion"]
    fixed = {**base, "static_stale": base["stale"], "static_knee": STATIC_KNEE}

    def obj(x):
        p = LatentParams(**{**fixed, "static_offset": x[0], "static_stale_ctx": x[1]})
        k, a, s = magic_inversion(p, ks=(2, 16), n=n)
        return float(((s[0] - mi["best_speedup"]) / mi["best_speedup"]) ** 2 * 1e2
                     + ((a[1] - mi["acceptance_fraction_at_k16"]) * 10) ** 2)

    r = minimize(obj, [-1.5, 8.0], method="Nelder-Mead", options=dict(xatol=2e-3, fatol=1e-3, maxiter=80))
    return {**fixed, "static_offset": float(r.x[0]), "static_stale_ctx": float(r.x[1])}


def refit_static() -> None:
    """Refit only the static cliff: the LongBench preset takes the fitted offset and slope; the
    default and ASPIRE presets borrow the slope and knee (their static offset stays PG-19's)."""
    lb = LatentParams(**load_preset("magicdec-longbench-llama8b")["params"])
    inv = fit_cliff(asdict(lb))
    print("static cliff", {k: inv[k] for k in ("static_offset", "static_stale", "static_stale_ctx", "static_knee")})
    cliff = {k: inv[k] for k in ("static_stale", "static_stale_ctx", "static_knee")}
    for name, params in [("magicdec-longbench-llama8b", {**cliff, "static_offset": inv["static_offset"]}),
                         ("sparsespec-llama8b", cliff), ("aspire-llama8b", cliff)]:
        f = PRESETS / f"{name}.json"
        d = json.loads(f.read_text())
        d["params"] = asdict(LatentParams(**{**d["params"], **params}))
        if name == "magicdec-longbench-llama8b":
            d["reference"]["context"] = LB_CTX
        f.write_text(json.dumps(d, indent=1) + "\n")


def static_cliff(p: LatentParams, contexts=(3072, 8192, 32768, 65536, 100000), budget=512, n=N_REQ) -> dict:
    """Where the static window collapses: per context, conditional acceptance at draft positions
    1-4 and the best k under a cycle cost of k g + 1 (g = 0.1, 0.3: MagicDec-like large batches)."""
    from spsim.acceptance.curves import position_curve

    out = {"budget": budget, "contexts": list(contexts), "conditional_pos1_4": [], "best_k_g0.1": [], "best_k_g0.3": [],
           "acceptance_fraction_k1_8": []}
    ks = np.arange(1, 9)
    for c in contexts:
        pc = position_curve(model(p), 4, n, OUT, int(c), budget, ST)
        a = acc_fractions(p, ks, n, context=int(c), budget=budget, method=ST)
        out["conditional_pos1_4"].append([round(x, 3) for x in pc["conditional"]])
        out["acceptance_fraction_k1_8"].append(a.round(3).tolist())
        for g in (0.1, 0.3):
            out[f"best_k_g{g}"].append(int(ks[((a * ks + 1) / (ks * g + 1)).argmax()]))
    return out


def state_curves(n: int = 1000) -> None:
    """Write each preset's `stated` curve: E[accepted/k] at its reference setting, seed 0 (tests
    check that sampling with another seed reproduces it)."""
    ks = [1, 2, 4, 8, 12, 16, 20]
    for f in sorted(PRESETS.glob("*.json")):
        d = json.loads(f.read_text())
        ref = d["reference"]
        m = int(DraftMethod.parse(ref["method"]))
        p = LatentParams(**d["params"])
        a = [fixed_k_runs(model(p), k, n, ref["output_tokens"], ref["context"], ref["budget"], m)["acceptance_fraction"]
             for k in ks]
        d["stated"] = {"setting": "reference, fixed-k decoding, seed 0, %d requests" % n, "k": ks,
                       "acceptance_fraction": [round(x, 4) for x in a]}
        f.write_text(json.dumps(d, indent=1) + "\n")


def hot_loop_us(spec: str, r: int = 8, k: int = 8, calls: int = 20000) -> dict:
    """Median-of-5 microseconds per verify() and draft_entropy() call over r requests."""
    from spsim.acceptance import make_acceptance

    m = make_acceptance(spec, 0)
    rid = np.arange(r)
    for i in rid.tolist():
        m.begin(i, 32768, 4096)
    pos, d, c, b, me = np.full(r, 100), np.full(r, k), np.full(r, 32768), np.full(r, 3277), np.full(r, VR)
    out = {}
    for name, fn, arg in (("verify", m.verify, d), ("draft_entropy", m.draft_entropy, d - 1)):
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(calls // 5):
                fn(rid, pos, arg, c, b, me)
            ts.append((time.perf_counter() - t) / (calls // 5) * 1e6)
        out[name] = round(float(np.median(ts)), 2)
    return out


def evaluate() -> dict:
    t0 = time.time()
    gd, c0 = smooth_cost()
    from harness import header

    out = {**header("paper_shapes"), "requests_per_point": N_REQ, "output_tokens": OUT, "seed": 0}

    p = LatentParams(**load_preset("sparsespec-llama8b")["params"])
    a = acc_fractions(p, KS, context=SS_CTX, budget=SS_BUD)
    s_paper = (a * KS + 1) / (KS * G_PER_K + 1)
    s_smooth = (a * KS + 1) / (KS * gd + 1 + c0)
    ad = adaptive(p, gd, c0)
    out["sparsespec_l"] = {
        "preset": "sparsespec-llama8b", "setting": {"context": SS_CTX, "budget": SS_BUD, "method": "verify_refresh",
                                                     "temperature": 0, "batch": 1, "acceptance": "E[accepted/k]"},
        "cost": {"g_per_k_from_paper": G_PER_K.round(4).tolist(), "smooth": {"g_d": gd, "c0": c0}},
        "k": KS.tolist(),
        "acceptance_published": A_PUB.tolist(), "acceptance_simulated": a.round(4).tolist(),
        "acceptance_error_pp": ((a - A_PUB) * 100).round(2).tolist(),
        "speedup_published": S_PUB.tolist(), "speedup_simulated_paper_cost": s_paper.round(3).tolist(),
        "speedup_simulated_smooth_cost": s_smooth.round(3).tolist(),
        "speedup_rel_error_paper_cost": ((s_paper / S_PUB - 1)).round(4).tolist(),
        "best_k_published": int(KS[S_PUB.argmax()]), "best_k_simulated_paper_cost": int(KS[s_paper.argmax()]),
        "best_k_simulated_smooth_cost": int(KS[s_smooth.argmax()]),
        "adaptive_published": {"speedup": SS["adaptive_speedup_vs_ar"], "acceptance_fraction": SS["adaptive_acceptance_fraction"]},
        "adaptive_simulated_smooth_cost": {k: round(v, 4) for k, v in ad.items()},
        "adaptive_above_best_fixed": bool(ad["speedup"] > s_smooth.max()),
        "entropy_auc_published": SS["entropy_auc_for_acceptance"], "entropy_auc_param": p.auc,
    }

    mc = PUB["magicdec_acceptance_vs_context"]
    pm = LatentParams(**load_preset("magicdec-pg19-llama8b")["params"])
    at = per_token_static(pm, mc["context"])
    out["magicdec_per_context"] = {
        "preset": "magicdec-pg19-llama8b", "setting": {"method": "static", "budget": 512, "temperature": 0,
                                                        "acceptance": "P(first draft after a verification accepted)"},
        "context": mc["context"], "published": mc["per_token_acceptance"], "simulated": at.round(4).tolist(),
        "error_pp": ((at - np.array(mc["per_token_acceptance"])) * 100).round(2).tolist()}

    mi = PUB["magicdec_longbench_inversion"]
    pi_ = LatentParams(**load_preset("magicdec-longbench-llama8b")["params"])
    k, ai, si = magic_inversion(pi_)
    out["magicdec_inversion"] = {
        "preset": "magicdec-longbench-llama8b", "setting": {"method": "static", "context": 32768, "budget": 512,
                                                            "cost_ratio_g": MAGIC_G, "acceptance": "E[accepted/k]"},
        "published": mi, "k": k.tolist(), "acceptance_simulated": ai.round(4).tolist(),
        "speedup_simulated": si.round(3).tolist(), "best_k_simulated": int(k[si.argmax()]),
        "inversion_below_1x_at_k16": bool(si[list(k).index(16)] < 1.0)}

    pa = LatentParams(**load_preset("aspire-llama8b")["params"])
    sr, vr = aspire_gap(pa)
    out["aspire_gap"] = {"preset": "aspire-llama8b",
                         "setting": {"k": 10, "context": SS_CTX, "budget": SS_BUD, "acceptance": "E[accepted/k]"},
                         "published_pp": PUB["aspire_headline"]["staleness_gap_pp_at_draft_length_10"],
                         "simulated_pp": round((sr - vr) * 100, 2), "step_refresh": round(sr, 4), "verify_refresh": round(vr, 4)}
    md = PUB["magicdec_best_draft_length"]
    out["static_cliff"] = {
        "preset": "sparsespec-llama8b (static terms)", "params": {k: getattr(p, k) for k in (
            "static_offset", "static_ctx_slope", "static_stale", "static_stale_ctx", "static_knee")},
        "published_best_draft_length_32k": md["a100"], **static_cliff(p),
        "no_cliff_at_32k": None}
    sc = out["static_cliff"]
    sc["no_cliff_at_32k"] = bool(min(sc["best_k_g0.1"][2], sc["best_k_g0.3"][2]) >= 3)
    out["hot_loop_us_per_call_8_requests_k8"] = {s: hot_loop_us(s) for s in ("sparsespec-llama8b", "fixed:p=0.8")}
    out["seconds"] = round(time.time() - t0, 1)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--refit", action="store_true")
    ap.add_argument("--refit-static", action="store_true", help="refit only the static window's cliff")
    args = ap.parse_args()
    if args.refit:
        refit()
        state_curves()
    elif args.refit_static:
        refit_static()
        state_curves()
    res = evaluate()
    path = ROOT / "benchmarks" / "results" / "paper_shapes.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
