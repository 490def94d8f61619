"""This GPU's speed against the machine a profile was measured on: the sweep's drift control
(`design.anchor_points`: a decode step of 8 requests at 16K) timed here and there.

Lent GPUs of one model differ: two H100 80GB HBM3 machines ran that pass in 12.16 and 12.53 ms at
the same clocks (3 % apart), and a policy run on the slower one then looks mispredicted by as much.
A validation therefore times the anchor on its own machine (`probe`) and reports the ratio to the
profile's (`reference`), so a prediction error can be told from a machine difference; a
calibration whose measuring runs ran on several machines brings each run's times to the profile's
machine by that ratio before the fit (`scale_sessions`).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from .records import read_anchors

LABEL = "anchor:ar"  # the decode-step anchor: weights and KV reads, no drafting


def session_anchors(measurements: str | Path) -> list[dict]:
    """The decode-step anchor per measuring run (session) of a measurements file, in file order:
    {"session", "anchor_s" (median seconds), "point"} (a session without one: absent)."""
    by: dict[int, list[dict]] = {}
    for a in read_anchors(measurements):
        if a.get("ok") and a.get("label") == LABEL and a.get("seconds"):
            by.setdefault(int(a["session"]), []).append(a)
    return [{"session": k, "anchor_s": statistics.median(float(a["seconds"]) for a in v), "point": v[-1]["point"]}
            for k, v in sorted(by.items())]


def _points_per_session(measurements: str | Path) -> dict[int, int]:
    """Design points measured per measuring run (its lines between two session headers)."""
    out: dict[int, int] = {}
    session = -1
    for line in Path(measurements).read_text().split("\n"):
        if '"spsim_calibration"' in line:
            session += 1
        elif line.startswith('{"id"'):
            out[session] = out.get(session, 0) + 1
    return out


def profile_anchor(measurements: str | Path) -> tuple[dict, str | None]:
    """What a profile records of its machine and a warning where its measuring runs disagree.
    `anchor`: the decode-step anchor of the run that measured the most points (the machine the fit
    mostly describes; the last such run on a tie); `session_anchor_slower`: each run's against it,
    where several timed it. The warning: they differ by more than 1 %."""
    s = session_anchors(measurements)
    if not s:
        return {}, None
    n = _points_per_session(measurements)
    ref = max(reversed(s), key=lambda a: n.get(a["session"], 0))
    info: dict = {"anchor": {"anchor_s": ref["anchor_s"], "point": ref["point"]}}
    spread = [round(a["anchor_s"] / ref["anchor_s"] - 1, 4) for a in s if a["point"] == ref["point"]]
    if len(spread) < 2:
        return info, None
    info["session_anchor_slower"] = spread
    worst = max(spread, key=abs)
    if abs(worst) <= 0.01:
        return info, None
    return info, (f"{measurements}: its measuring runs timed the sweep's decode-step anchor up to {100 * worst:+.1f} % "
                  "apart from the run that measured the most points (machines of one GPU model differ)")


def session_scales(measurements: str | Path) -> dict[int, float]:
    """Per measuring run (session index), the factor that brings its times to the profile's machine
    (`profile_anchor`): reference anchor / its own. Runs without the reference's anchor: absent."""
    s = session_anchors(measurements)
    ref = profile_anchor(measurements)[0].get("anchor")
    if not ref:
        return {}
    return {a["session"]: ref["anchor_s"] / a["anchor_s"] for a in s if a["point"] == ref["point"]}


def scale_sessions(measurements: str | Path, recs: list) -> tuple[list, dict[int, float]]:
    """`recs` (records.Measurement) with the times of runs on other machines than the profile's
    brought to its machine (`session_scales`; first order: one factor a run), and the factors
    applied (those more than 0.1 % from 1)."""
    import dataclasses

    scales = {k: f for k, f in session_scales(measurements).items() if abs(f - 1.0) > 0.001}
    if not scales:
        return recs, {}
    heads = [i for i, line in enumerate(Path(measurements).read_text().split("\n"), 1)
             if '"spsim_calibration"' in line]
    out = []
    for m in recs:
        f = scales.get(sum(1 for h in heads if h < m.line) - 1)
        if f is None or not m.ok:
            out.append(m)
            continue
        rec = dict(m.record)
        for k in ("samples", "gpu_s"):
            if isinstance(rec.get(k), list):
                rec[k] = [x * f if isinstance(x, (int, float)) else x for x in rec[k]]
        out.append(dataclasses.replace(m, seconds=m.seconds * f, record=rec))
    return out, {k: round(f, 5) for k, f in scales.items()}


def reference(profile: dict, profile_path: str | Path | None = None) -> dict | None:
    """The profile's anchor, `{"anchor_s", "point"}`: its metadata's (`profile_anchor`), else that of
    the measurements file beside it, else None."""
    meta = profile.get("metadata") or {}
    if meta.get("anchor"):
        return meta["anchor"]
    name = meta.get("measurements")
    if profile_path is not None and name:
        path = Path(profile_path).parent / name
        if path.exists():
            return profile_anchor(path)[0].get("anchor")
    return None


def probe(model, page_size: int = 16, shape_rule: bool = True) -> dict:
    """Time the decode-step anchor on this machine (a cache of its own, freed after): {"anchor_s",
    "samples"}. A GPU only; a few seconds."""
    import gc

    import torch

    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.padding import SCRATCH_PAGES

    from .design import anchor_points
    from .measure import Bench, _pages_needed_all

    cfg = model.cfg
    free = torch.cuda.mem_get_info(model.device)[0]
    per_page = 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * page_size * torch.finfo(model.dtype).bits // 8
    room = int(0.5 * free // per_page) * page_size  # at most half of what is free
    point = next(a for a in anchor_points(cfg.max_context, room) if a.label == "ar")
    cache = PagedKVCache(cfg, _pages_needed_all(point, page_size) + SCRATCH_PAGES, page_size, device=model.device,
                         dtype=model.dtype)
    try:
        cache.k.normal_()
        cache.v.normal_()
        r = Bench(model, cache, True, pad=True, shape_rule=shape_rule).run(point)
    finally:
        del cache
        gc.collect()
        torch.cuda.empty_cache()
    return {"anchor_s": r["seconds"], "samples": r["samples"], "point": point.to_dict()}


def speed(here: dict | None, ref: dict | None) -> dict | None:
    """This machine against the profile's (`probe` and `reference`): seconds of each and `slower` =
    here / there - 1; None where either is missing or they timed different anchors (another pool)."""
    if not here or not ref or here.get("point") != ref.get("point"):
        return None
    h, r = float(here["anchor_s"]), float(ref["anchor_s"])
    return {"anchor_s": round(h, 7), "profile_anchor_s": round(r, 7), "slower": round(h / r - 1, 4)}
