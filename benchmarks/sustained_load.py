"""Does a pass take longer when the GPU has been busy for seconds? (calibration vs validation)

The calibration sweep times each point alone: a few repeats, then seconds of setup with the GPU
idle. A serving run keeps the GPU busy: Mooncake's first 50 requests run 8K-token prefill chunks
back to back for ~27 s, and the runtime's prefill passes there came out 5.6 % slower than the
profile fitted on isolated points predicted (an earlier validation run), where the
sweep's own 8K chunks at 16K-116K are 2-8 % faster than predicted. A GPU holding its power limit
lowers its clocks under sustained tensor-core load; this measures whether it does here.

For each pass: the sweep's timing (`Bench.run`: warm-up, median of repeats), then the same pass
back to back for `--seconds`, each repeat's time with the SM clock, power and temperature sampled
beside it (nvidia-smi, every 100 ms). Then the sweep's timing again, right after the load.

    python3 benchmarks/sustained_load.py --out benchmarks/results/sustained_load_h200.json
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=12.0, help="back-to-back load per pass")
    ap.add_argument("--model", default="llama-3.1-8b")
    a = ap.parse_args()

    import torch

    from spsim.calibration.clocks import ClockMonitor
    from spsim.calibration.design import Point
    from spsim.calibration.measure import Bench, _pages_needed_all, page_tables, token_resetter
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.padding import SCRATCH_PAGES

    dev = torch.device("cuda")
    cfg = get_config(a.model)
    model = Transformer.random(cfg, seed=0, device=dev, dtype=torch.bfloat16)
    points = {
        "prefill 8K at 64K + 10 decodes at 27K": Point("prefill", prefill=((65536, 8192),), verifies=((26900, 1),) * 10),
        "prefill 8K at 16K": Point("prefill", prefill=((16384, 8192),)),
        "prefill 8K from 0 + 2K from 0": Point("prefill", prefill=((0, 6144), (0, 2048))),
        "decode 32 x 16K": Point("ar", verifies=((16384, 1),) * 32),
    }
    need = max(_pages_needed_all(p, 16) for p in points.values())
    cache = PagedKVCache(cfg, need + 64 + SCRATCH_PAGES, 16, device=dev, dtype=model.dtype)
    cache.k.normal_()
    cache.v.normal_()
    bench = Bench(model, cache, graphs=True)
    mon = ClockMonitor.start(period_ms=100)
    start = time.monotonic()
    now = lambda: time.monotonic() - start  # noqa: E731  (times in the file: seconds since start)
    smi = lambda a, b: (mon.window(start + a, start + b) if mon else None) or {}  # noqa: E731
    time.sleep(1.0)
    out = {**header("sustained_load"), "model": cfg.name, "seconds": a.seconds, "idle": smi(0, now()),
           "passes": []}
    for name, p in points.items():
        t0 = now()
        before = bench.run(p)
        t1 = now()
        # the same pass back to back, as a serving run keeps the GPU busy
        tables = page_tables(p, bench.num_pages, cache.page_size, bench.perm)
        ex = bench._executor(p, tables)
        plan = p.plan()
        reset = token_resetter(ex, plan, cfg.vocab)
        reset()
        ex.execute(plan)
        reps = []
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            reset()
            s = now()
            dt = ex.execute(plan).elapsed_s
            reps.append((round(s, 3), round(dt, 6)))
        t2 = now()
        after = bench.run(p)
        t3 = now()
        n = len(reps)
        q = max(1, n // 5)
        first = statistics.median(r[1] for r in reps[:q])
        last = statistics.median(r[1] for r in reps[-q:])
        row = {"pass": name, "point": p.to_dict(), "sweep_s": before["seconds"], "sweep_after_s": after["seconds"],
               "sustained_first_fifth_s": first, "sustained_last_fifth_s": last, "sustained_reps": n,
               "last_over_sweep": round(last / before["seconds"], 4),
               "smi_sweep": smi(t0, t1), "smi_sustained_first": smi(reps[0][0], reps[q - 1][0] + reps[q - 1][1]),
               "smi_sustained_last": smi(reps[-q][0], t2), "smi_after": smi(t2, t3), "reps": reps}
        out["passes"].append(row)
        print(f"{name}: sweep {before['seconds'] * 1e3:.2f} ms, sustained first {first * 1e3:.2f} last "
              f"{last * 1e3:.2f} ms ({n} reps), after {after['seconds'] * 1e3:.2f} ms; SM MHz "
              f"{row['smi_sweep'].get('sm_mhz')} -> {row['smi_sustained_last'].get('sm_mhz')} "
              f"(min {row['smi_sustained_last'].get('sm_mhz_min')}), W {row['smi_sustained_last'].get('power_w')}",
              flush=True)
        del ex
        torch.cuda.empty_cache()
        time.sleep(2.0)
    if mon:
        mon.close()
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
