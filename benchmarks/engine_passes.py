"""Time a run's own passes the way the calibration sweep times its points (one at a time, median of
repeats), to tell the cost model's error on a validation run's passes apart from what the run adds
around them.

Input: a JSON list of passes ({"pass_index", "prefill": [[context, tokens], ...], "verifies":
[[context, query], ...], "predicted_ms"}): the prefill passes of Mooncake's first 50 requests
offline under `ar`, as the simulator plans them (the runtime plans the same ones: validate's `same_plans`), priced
with the profile the validation run used, written by `--plan` (CPU, needs simpy):

    python3 benchmarks/engine_passes.py --plan benchmarks/data/mooncake50_ar_prefill_passes.json \\
        --profile calibration/profiles/h200-llama-3.1-8b.json
    python3 benchmarks/engine_passes.py benchmarks/data/mooncake50_ar_prefill_passes.json --tokens both \\
        --out benchmarks/results/engine_passes_tokens_h200.json          # on the GPU

`--tokens both` times each pass with the sweep's old token ids (one id repeated through each
request) and with an id per position (real prompts): at the power cap the GEMMs' draw depends on
their data.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from harness import header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install


def plan_passes(out: str, profile: str = "calibration/profiles/h200-llama-3.1-8b.json", policy: str = "ar",
                categories: str = "prefill", limit: int = 50) -> None:
    """The passes of Mooncake's first `limit` requests, offline, under `policy`, as the simulator
    plans them (those of `categories`: prefill, draft, mixed, verify)."""
    from dataclasses import fields

    from spsim.config import ServingConfig
    from spsim.cost.calibrated import CalibratedCostModel
    from spsim.simulator.engine import SimConfig, simulate
    from spsim.traces import read_trace
    from spsim.cost.recording import RecordingCost
    from spsim.validate import check, select

    cost = CalibratedCostModel.from_profile(json.loads(Path(profile).read_text()))
    trace = select(read_trace("mooncake"), limit, None)
    cfg = check(ServingConfig(policy=policy, acceptance="sparsespec-llama8b", model="llama-3.1-8b", profile=profile,
                              offline=True)).with_(kv_pages=57248)  # the H200's pool in validate runs
    want = set(categories.split(","))
    rows = []
    pairs = lambda a, b: [list(x) for x in zip(a.tolist(), b.tolist())]  # noqa: E731

    class Recording(RecordingCost):  # every pass priced one by one, in order
        n = 0

        def record(self, plan, t):
            if plan.category in want:
                row = {"pass_index": self.n, "category": plan.category,
                       "prefill": pairs(plan.prefill_context, plan.prefill_tokens),
                       "verifies": pairs(plan.verify_context, plan.verify_query), "predicted_ms": t * 1e3}
                if len(plan.draft_ids):  # one method and budget per run
                    row.update(drafts=pairs(plan.draft_context, plan.draft_pos), method=int(plan.draft_method),
                               budget=int(plan.draft_budget))
                rows.append(row)
            self.n += 1

    simulate(trace, SimConfig(**{f.name: getattr(cfg, f.name) for f in fields(ServingConfig)}, fast=False),
             cost=Recording(cost))
    Path(out).write_text(json.dumps(rows) + "\n")
    print(f"wrote {len(rows)} passes ({categories}) of {policy} to {out}")


def point_of(row: dict, group_ar: str = "ar"):
    """The sweep's point for a recorded pass: its group as the sweep names it (a pass without drafts
    runs as `group_ar`, which keeps no Quest bounds when `ar`), its method and budget."""
    from spsim.calibration.design import Point
    from spsim.plan import DRAFT_BUDGET
    from spsim.plan import DraftMethod

    drafts = tuple(map(tuple, row.get("drafts", [])))
    verifies = tuple(map(tuple, row["verifies"]))
    prefill = tuple(map(tuple, row["prefill"]))
    if prefill:
        group = "prefill" if drafts or any(q > 1 for _, q in verifies) else group_ar
    elif drafts:
        group = "mixed" if verifies else "draft"
    else:
        group = "verify" if any(q > 1 for _, q in verifies) else "ar"
    return Point(group, int(row.get("method", DraftMethod.VERIFY_QUEST)), int(row.get("budget", DRAFT_BUDGET)),
                 prefill, drafts, verifies)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("passes", nargs="?")
    ap.add_argument("--out")
    ap.add_argument("--plan", metavar="FILE", help="write the pass list (CPU, needs simpy) and stop")
    ap.add_argument("--profile", default="calibration/profiles/h200-llama-3.1-8b.json",
                    help="--plan: the profile pricing the passes (predicted_ms)")
    ap.add_argument("--policy", default="ar", help="--plan: the policy whose passes to record")
    ap.add_argument("--categories", default="prefill", help="--plan: pass categories to record (prefill,draft,mixed,verify)")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--group", default="ar", help="the group passes of prefill and single-token verifications run "
                    "as: ar (an ar run: no Quest bounds kept) or prefill (a speculative run's)")
    ap.add_argument("--every", type=int, default=1, help="time every Nth pass")
    ap.add_argument("--tokens", default="random", choices=["random", "constant", "both"],
                    help="token ids: random (every position its own id, as real prompts and the sweep now), "
                    "constant (one id per request, the sweep's before 2026-12-02), or both (each pass timed both ways)")
    a = ap.parse_args()
    if a.plan:
        plan_passes(a.plan, a.profile, a.policy, a.categories)
        return 0
    if not (a.passes and a.out):
        ap.error("give a pass list and --out (or --plan FILE)")

    import torch

    import spsim.calibration.measure as M
    from spsim.calibration.measure import Bench
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.padding import SCRATCH_PAGES

    rows = json.loads(Path(a.passes).read_text())[:: a.every]
    dev = torch.device("cuda")
    cfg = get_config(a.model)
    model = Transformer.random(cfg, seed=0, device=dev, dtype=torch.bfloat16)
    pts = [point_of(r, a.group) for r in rows]
    need = max(M._pages_needed_all(p, 16) for p in pts)  # every request its own pages, as in the run
    cache = PagedKVCache(cfg, need + 64 + SCRATCH_PAGES, 16, device=dev, dtype=model.dtype)
    cache.k.normal_()
    cache.v.normal_()
    bench = Bench(model, cache, graphs=True)
    varied = M.token_resetter  # the sweep's: every position its own id

    def constant(ex, plan, vocab):  # the sweep's before 2026-12-02: one id repeated through each request
        reset = varied(ex, plan, vocab)
        reset()
        for rid, (n, _, _) in M.plan_token_state(plan).items():
            ex.req[rid].tokens[:] = [(7 * rid + 1) % vocab] * n
        base = {rid: list(st.tokens) for rid, st in ex.req.items()}

        def again():
            reset()
            for rid, toks in base.items():
                ex.req[rid].tokens[:] = toks
        return again

    modes = ["constant", "random"] if a.tokens == "both" else [a.tokens]
    out = []
    t0 = time.monotonic()
    for r, p in zip(rows, pts):
        r = dict(r)
        for mode in modes:
            M.token_resetter = constant if mode == "constant" else varied  # what Bench.run resets with
            m = bench.run(p)
            r[mode] = dict(ms=m["seconds"] * 1e3, gpu_ms=statistics.median(m.get("gpu_s", [0])) * 1e3,
                           prep_ms=statistics.median(m["prep_s"]) * 1e3, samples=m["samples"])
            torch.cuda.empty_cache()
        M.token_resetter = varied
        out.append(r)
        print(f"pass {r['pass_index']}: " + ", ".join(f"{k} {r[k]['ms']:.1f} ms" for k in modes)
              + f", predicted {r['predicted_ms']:.1f} ms ({time.monotonic() - t0:.0f} s)", flush=True)

    meta = {**header("engine_passes"), "tokens": a.tokens}
    Path(a.out).write_text(json.dumps(dict(meta, passes=out), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
