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

import dataclasses
import statistics
from bisect import bisect_left
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


def runs(measurements: str | Path) -> list[dict]:
    """Each measuring run of a measurements file, in file order: its header's line, its design
    points' count and, where it timed one, its decode-step anchor (`session_anchors`). One call for
    what `profile_anchor` and `scale_sessions` both need (a missing file: none)."""
    if not Path(measurements).exists():
        return []
    out: list[dict] = []
    for i, line in enumerate(Path(measurements).read_text().split("\n"), 1):
        if '"spsim_calibration"' in line:
            out.append({"session": len(out), "line": i, "points": 0})
        elif line.startswith('{"id"') and out:
            out[-1]["points"] += 1
    for a in session_anchors(measurements):
        out[a["session"]].update(anchor_s=a["anchor_s"], point=a["point"])
    return out


def _reference_run(rs: list[dict]) -> dict | None:
    """The run that measured the most points among those that timed the anchor (the machine the fit
    mostly describes; the last such run on a tie)."""
    timed = [r for r in rs if "anchor_s" in r]
    return max(reversed(timed), key=lambda r: r["points"]) if timed else None


def profile_anchor(measurements: str | Path, rs: list[dict] | None = None) -> tuple[dict, str | None]:
    """What a profile records of its machine and a warning where its measuring runs disagree.
    `anchor`: the decode-step anchor of the run that measured the most points; `session_anchor_slower`:
    each run's against it, where several timed it. The warning: they differ by more than 1 %.
    `rs`: the file's `runs`, when already read."""
    rs = runs(measurements) if rs is None else rs
    ref = _reference_run(rs)
    if ref is None:
        return {}, None
    info: dict = {"anchor": {"anchor_s": ref["anchor_s"], "point": ref["point"]}}
    spread = [round(r["anchor_s"] / ref["anchor_s"] - 1, 4) for r in rs if r.get("point") == ref["point"]]
    if len(spread) < 2:
        return info, None
    info["session_anchor_slower"] = spread
    worst = max(spread, key=abs)
    if abs(worst) <= 0.01:
        return info, None
    return info, (f"{measurements}: its measuring runs timed the sweep's decode-step anchor up to {100 * worst:+.1f} % "
                  "apart from the run that measured the most points (machines of one GPU model differ)")


def scale_sessions(measurements: str | Path, recs: list, rs: list[dict] | None = None) -> tuple[list, dict[int, float]]:
    """`recs` (records.Measurement) with the times of runs on other machines than the profile's
    brought to its machine by reference anchor / their own (first order: one factor a run), and the
    factors applied (those more than 0.1 % from 1; runs without the reference's anchor: none).
    `rs`: the file's `runs`, when already read."""
    rs = runs(measurements) if rs is None else rs
    ref = _reference_run(rs)
    scales = {} if ref is None else {r["session"]: ref["anchor_s"] / r["anchor_s"] for r in rs
                                      if r.get("point") == ref["point"] and abs(ref["anchor_s"] / r["anchor_s"] - 1) > 0.001}
    if not scales:
        return recs, {}
    heads = [r["line"] for r in rs]
    out = []
    for m in recs:
        f = scales.get(bisect_left(heads, m.line) - 1)  # the run whose header precedes the record
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
    room = int(0.5 * free // PagedKVCache.bytes_per_page(cfg, page_size, model.dtype)) * page_size  # half what is free
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
