"""`spsim calibrate --gpu` from a checkout without an install (the GPU machine: no pip install, no
simpy, maybe no typer or rich): measure the sweep, then fit the profile.

    python3 benchmarks/calibrate_gpu.py --model llama-3.1-8b --minutes 8 \\
        --out benchmarks/results/calibration/h200-llama-3.1-8b.json
    python3 benchmarks/calibrate_gpu.py --from benchmarks/results/calibration/h200-llama-3.1-8b.measurements.jsonl \\
        --out h200-llama-3.1-8b.json          # refit only

The measurements file (default: beside --out, `.measurements.jsonl`) is appended to as points are
timed; running the same command again resumes where it stopped. Exit code 2 with one line on bad
input or no GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install


def main() -> int:
    t_start = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3.1-8b", help="model shape (random weights)")
    ap.add_argument("--minutes", type=float, default=8.0, help="budget of the whole run (measuring stops in time to fit)")
    ap.add_argument("--out", default=None, help="profile JSON to write (default profile-MODEL.json)")
    ap.add_argument("--measurements", default=None, help="measurements JSONL (default: beside --out)")
    ap.add_argument("--from", dest="from_", default=None, help="refit this measurements file, measure nothing")
    ap.add_argument("--host-log", default=None, help="passes.jsonl of a `spsim run` (host planning time)")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu (tiny models only)")
    ap.add_argument("--design", default="default", choices=["default", "smoke"])
    ap.add_argument("--points", action="append", default=None, help="also measure these pass compositions "
                    "(JSON lines: `spsim replay ... --calibration-points FILE`); repeat for several files")
    ap.add_argument("--shape-rule", action=argparse.BooleanOptionalAction, default=True,
                    help="pad passes by the runtime's shape rule (what `--startup-shapes` runs, the default, use): "
                    "the profile then prices that padding")
    a = ap.parse_args()
    from spsim.calibration.calibrate import calibrate_from, calibrate_gpu
    from spsim.errors import SpsimError

    try:
        if a.from_:
            calibrate_from(a.from_, a.out, a.host_log)
        else:
            calibrate_gpu(a.model, a.minutes, a.out, a.measurements, device=a.device, design=a.design,
                          host_log=a.host_log, page_size=a.page_size, t_start=t_start, points=a.points,
                          measure_kw={"shape_rule": a.shape_rule})
    except SpsimError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted (the measurements file is intact: run again to resume)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
