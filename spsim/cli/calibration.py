"""`spsim calibrate`: measure pass times on this machine's GPU and fit a cost profile, or refit.

Imports only typer and light spsim modules; torch (measuring) and scipy (fitting) are imported
when the command runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer

from spsim.config import ServingConfig
from spsim.errors import SpsimError


def register(app: typer.Typer) -> None:
    @app.command(epilog="Examples:\n\n"
                 "  spsim calibrate --gpu --model llama-3.1-8b --out h200-llama-3.1-8b.json   # about 7 min on an H200\n\n"
                 "  spsim calibrate --gpu --minutes 4   # stop in time, run again to resume where it stopped\n\n"
                 "  spsim calibrate --from h200-llama-3.1-8b.measurements.jsonl --out h200.json   # refit, no GPU\n\n"
                 "  spsim replay mooncake --limit 50 --offline --policy fixed-k:k=4 --calibration-points fk.jsonl\n\n"
                 "  spsim calibrate --gpu --points fk.jsonl --out h200.json   # the default sweep plus that run's passes\n\n"
                 "  spsim replay mooncake --limit 300 --profile h200-llama-3.1-8b.json\n\n"
                 "From a checkout without an install (the GPU machine): python3 benchmarks/calibrate_gpu.py --help")
    def calibrate(
        gpu: bool = typer.Option(False, "--gpu", help="Measure on this machine's GPU (random weights of --model, "
                                 "synthetic KV), then fit."),
        from_: Optional[Path] = typer.Option(None, "--from", help="Refit a measurements file (JSON lines) "
                                             "instead of measuring; no GPU needed."),
        model: str = typer.Option(ServingConfig.model, "--model", "-m",
                                  help="Model shape to measure (see `spsim models`)."),
        minutes: float = typer.Option(8.0, "--minutes", help="Time budget of the whole command; measuring stops "
                                      "in time to fit (the file stays intact; run again to resume)."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Profile to write (default "
                                           "profile-MODEL.json); per-point predictions go beside it (.fit.json)."),
        measurements: Optional[Path] = typer.Option(None, "--measurements", help="Measurements file to append "
                                                    "to and resume from (default: beside --out)."),
        host_log: Optional[Path] = typer.Option(None, "--host-log", help="passes.jsonl of a `spsim run`: its "
                                                "mean host planning time per pass (default: the roofline's "
                                                "100 us assumption)."),
        page_size: int = typer.Option(ServingConfig.page_size, "--page-size", help="KV page size in tokens."),
        device: str = typer.Option("cuda", "--device", help="cuda, or cpu (tiny models: tests the pipeline)."),
        design: str = typer.Option("default", "--design", help="default (the full sweep) or smoke (a few "
                                   "points of every kind, for tests)."),
        points: Optional[List[Path]] = typer.Option(None, "--points", metavar="FILE", help="Also measure these pass compositions "
                                                    "(JSON lines; `spsim replay ... --calibration-points FILE` writes "
                                                    "the ones a trace and policy ask for); repeat for several files."),
        shape_rule: bool = typer.Option(True, "--shape-rule/--no-shape-rule", help="Pad the measured passes by "
                                        "the runtime's shape rule, as `spsim run` pads them by default "
                                        "(--startup-shapes); --no-shape-rule for runs with --no-startup-shapes."),
    ):
        """Measure pass times on the GPU and fit a calibrated cost profile (or refit one).

        Times decode, verify, drafting (every draft-KV method), mixed and prefill passes on the real runtime, each written as it is taken (a point whose repeats spread over 10 % is timed once more at the end); a fifth of the points is held out and the profile reports its error (heldout_error)."""
        t_start = time.monotonic()
        from spsim.calibration.calibrate import calibrate_from, calibrate_gpu

        if gpu == (from_ is not None):
            raise SpsimError("give one of --gpu (measure here, then fit) or --from MEASUREMENTS (refit)")
        if minutes <= 0 or minutes != minutes:
            raise SpsimError(f"--minutes must be > 0 (got {minutes})")
        if page_size < 1:
            raise SpsimError(f"--page-size must be >= 1 (got {page_size})")
        if device not in ("cuda", "cpu"):
            raise SpsimError(f"--device must be cuda or cpu (got {device!r})")
        if design not in ("default", "smoke"):
            raise SpsimError(f"--design must be default or smoke (got {design!r})")
        if host_log is not None and not host_log.is_file():
            raise SpsimError(f"--host-log {host_log}: not a file")
        if points:
            if from_ is not None:
                raise SpsimError("--points adds compositions to measure: give it with --gpu, not --from")
            from spsim.calibration.trace_points import read_points

            for f in points:
                read_points(f)  # a bad file fails now, before the model is built
        if from_ is not None:
            calibrate_from(from_, out, str(host_log) if host_log else None)
            return
        calibrate_gpu(model, minutes, str(out) if out else None, str(measurements) if measurements else None,
                      device=device, design=design, host_log=str(host_log) if host_log else None,
                      page_size=page_size, t_start=t_start, points=[str(f) for f in points] if points else None,
                      measure_kw={"shape_rule": shape_rule})
