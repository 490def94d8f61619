"""The pass compositions a simulated run asks for, as calibration points.

The default sweep (design.py) covers a grid; a trace and a policy ask for their own passes, and a
profile extrapolates where the grid is thin: an H200 8B profile predicted Mooncake
`fixed-k:k=4`'s passes of 24-36 drafting + 6-9 verifying requests 17-28 % short, where its largest
verify-quest mixed point held 24 drafts and 3 verifications. So:

    spsim replay mooncake --limit 50 --offline --policy fixed-k:k=4 --calibration-points fk.jsonl
    spsim calibrate --gpu --points fk.jsonl ...      # the default design plus these

`PassRecorder` wraps the run's cost model and keeps every priced pass's composition (the simulator
then steps pass by pass: the same run). `choose` buckets the passes by kind, draft-KV method,
request counts and context (powers of two), shares the points among the kinds of pass by the
square root of their simulated GPU time, and takes from each kind's buckets that hold the most
time the pass of median time: a few dozen points that stand for most of the run.
Points files are JSON lines of `Point.to_dict()`, read back with file:line errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spsim.cost.recording import RecordingCost
from spsim.errors import InputError, SpsimError
from spsim.jsonlines import json_lines
from spsim.plan import DRAFT_BUDGET, DraftMethod

from .design import GROUPS, Point

MAX_POINTS = 48  # default number of points a run is summarised by


@dataclass(frozen=True)
class Recorded:
    point: Point
    seconds: float  # the cost model's price of the pass


class PassRecorder(RecordingCost):
    """The run's cost model, keeping each pass it prices as a `Recorded` point (the simulator
    then prices pass by pass: its step path)."""

    def __init__(self, cost, method: int, speculative: bool):
        super().__init__(cost)
        self.method = int(method)
        self.speculative = bool(speculative)

    def record(self, plan, seconds: float) -> None:
        self.passes.append(Recorded(plan_point(plan, self.method, self.speculative), seconds))


def plan_point(plan, method: int, speculative: bool) -> Point:
    """A pass plan as a calibration point: prefill chunks, drafts (context, position) and
    verifications (context, query) as planned; the group by what the pass holds (a plain decode of
    a speculative run is a `verify` pass: the runtime keeps its bookkeeping, and Quest bounds for
    quest methods)."""
    pre = tuple(zip(plan.prefill_context.tolist(), plan.prefill_tokens.tolist()))
    dr = tuple(zip(plan.draft_context.tolist(), plan.draft_pos.tolist()))
    ver = tuple(zip(plan.verify_context.tolist(), plan.verify_query.tolist()))
    if len(plan.draft_ids):
        method = int(plan.draft_method)
        budget = int(plan.draft_budget)
    else:  # no drafts: every such pass under one key, whatever the run's budget
        budget = DRAFT_BUDGET
    if pre:
        group = "prefill"
    elif dr:
        group = "mixed" if ver else "draft"
    else:
        group = "verify" if speculative or any(q > 1 for _, q in ver) else "ar"
    if group == "ar":
        method = int(DraftMethod.STATIC)  # the sweep's plain decode: no speculation bookkeeping
    return Point(group, int(method), budget, pre, dr, ver)


def _pow2(n: int) -> int:
    return 0 if n <= 0 else 1 << int(n - 1).bit_length()


def _bucket(p: Point) -> tuple:
    ctx = [c for c, _ in p.prefill] + [c for c, _ in p.drafts] + [c for c, _ in p.verifies]
    mean_ctx = float(np.mean(ctx)) if ctx else 0.0
    # a run's first drafts select pages (scoring every page, a top-k as wide as the longest): a
    # pass of them costs unlike one of later drafts at the same counts and contexts
    first = sum(1 for _, pos in p.drafts if pos == 0)
    return (p.group, p.method, p.budget, _pow2(len(p.prefill)), _pow2(sum(n for _, n in p.prefill)),
            _pow2(len(p.drafts)), _pow2(first), _pow2(len(p.verifies)), max((q for _, q in p.verifies), default=0),
            int(np.log2(max(mean_ctx, 1.0)) + 0.5))


def choose(passes: list[Recorded], max_points: int = MAX_POINTS) -> tuple[list[Point], dict]:
    """Up to `max_points` points standing for the run: in each group (ar, verify, draft, mixed,
    prefill) the buckets (`_bucket`) holding the most priced time, each by its pass of median time.
    Groups share the points by the square root of their time (a group of 5 % of the time still
    gets a few: the default sweep is thinnest where a run's rarer passes sit). Returns (points,
    summary)."""
    if max_points < 1:
        raise SpsimError(f"at most {max_points} points: give 1 or more")
    buckets: dict[tuple, list[Recorded]] = {}
    for r in passes:
        buckets.setdefault(_bucket(r.point), []).append(r)
    total = sum(r.seconds for r in passes)
    by_group: dict[str, list[list[Recorded]]] = {}
    for rs in sorted(buckets.values(), key=lambda rs: (-sum(r.seconds for r in rs), rs[0].point.key)):
        by_group.setdefault(rs[0].point.group, []).append(rs)
    weight = {g: np.sqrt(sum(r.seconds for rs in v for r in rs)) for g, v in by_group.items()}
    share = {g: 0 for g in by_group}
    for _ in range(min(max_points, len(buckets))):  # one point at a time to the group furthest below its share
        open_ = [g for g in by_group if share[g] < len(by_group[g])]
        g = min(open_, key=lambda g: (share[g] / weight[g] if weight[g] > 0 else np.inf, -weight[g], g))
        share[g] += 1
    points, covered = [], 0.0
    for g in GROUPS:
        for rs in by_group.get(g, [])[:share.get(g, 0)]:
            rs = sorted(rs, key=lambda r: (r.seconds, r.point.key))
            points.append(rs[len(rs) // 2].point)
            covered += sum(r.seconds for r in rs)
    summary = {"passes": len(passes), "buckets": len(buckets), "points": len(points),
               "time_share": covered / total if total > 0 else 0.0,
               "by_group": {g: share[g] for g in GROUPS if share.get(g)}}
    return points, summary


def write_points(path: str | Path, points: list[Point]) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(p.to_dict(), separators=(",", ":")) + "\n" for p in points))
    except OSError as e:
        raise SpsimError(f"{path}: cannot write ({e.strerror or e})") from None


def read_points(path: str | Path) -> list[Point]:
    """A points file (JSON lines of pass compositions), each line checked: file, line and field
    named on error."""
    path = Path(path)
    if not path.exists():
        raise SpsimError(f"{path}: points file not found")
    out = []
    for i, d in json_lines(path, "the points file"):
        for f in ("group", "method", "budget", "prefill", "drafts", "verifies"):
            if f not in d:
                raise InputError(path, i, f, "missing")
        try:
            p = Point.from_dict(d)
        except (TypeError, ValueError, KeyError) as e:
            raise InputError(path, i, None, f"not a pass composition ({e})") from None
        bad = [c for c, n in p.prefill if c < 0 or n < 1] + [c for c, pos in p.drafts if c < 1 or pos < 0] \
            + [c for c, q in p.verifies if c < 1 or q < 1]
        if bad or p.budget < 1:
            raise InputError(path, i, None, "contexts, tokens and budget must be positive (draft positions >= 0)")
        out.append(p)
    if not out:
        raise SpsimError(f"{path}: no points in the file")
    return out
