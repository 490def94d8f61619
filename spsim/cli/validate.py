"""`spsim validate`: the same trace on the real runtime and in the simulator, predicted against
measured. Imports typer, rich and light spsim modules; torch and simpy when the command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from spsim.cli.runtime_options import COARSE_SHAPES, CUDA_GRAPHS, DEVICE, DTYPE, OVERLAP, STARTUP_SHAPES
from spsim.cli_options import LIMIT, SKIP_INVALID, TRACE_FORMAT, check_out_dir, serving_options

console = Console()
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXAMPLES = (
    "Examples:\n\n"
    "  spsim validate mooncake --limit 50 --offline --policy aspire --out runs/val   # pass by pass, H200: ~1 min\n\n"
    "  spsim validate azure-conv --window 60 --policy fixed-k:k=4 --profile h200.json   # arrivals: latency\n\n"
    "  spsim validate my.jsonl --model tiny --device cpu --offline --policy fixed-k:k=4   # CPU smoke test"
)


def register(app: typer.Typer) -> None:
    from spsim.validate import DEFAULT_ACCEPTANCE

    @app.command(epilog=EXAMPLES)
    @serving_options(exclude=("replicas", "router"), defaults={"acceptance": DEFAULT_ACCEPTANCE})
    def validate(
        trace: str = typer.Argument(..., help="Trace file or shipped name (mooncake, azure-conv)."),
        window: Optional[float] = typer.Option(None, "--window", help="Only requests arriving in the first this "
                                               "many seconds (then --limit)."),
        device: str = DEVICE,
        dtype: Optional[str] = DTYPE,
        cuda_graphs: bool = CUDA_GRAPHS,
        warm: Optional[bool] = typer.Option(None, "--warmup/--no-warmup", help="Compile the kernels on a few short "
                                            "requests before the measured run (default: on GPUs)."),
        rehearse: bool = typer.Option(False, "--rehearse", help="Serve the trace once untimed first, capturing "
                                      "every CUDA graph shape it meets, then measure a second run: the steady "
                                      "state, without first-use captures and eager passes (twice the GPU time)."),
        startup_shapes: bool = STARTUP_SHAPES,
        coarse_shapes: bool = COARSE_SHAPES,
        overlap: Optional[bool] = OVERLAP,
        measured: Optional[Path] = typer.Option(None, "--measured", help="A summary.json measured at a server's "
                                                "client (spsim bench serve --out): compare the simulator with it "
                                                "instead of running the trace here."),
        repeat: int = typer.Option(1, "--repeat", min=1, max=20, help="Measured runs of the trace (after the "
                                   "rehearsal, if any): measured is their mean, shown with its range. Under "
                                   "arrivals one 45 s Azure window's mean TPOT moved 7 % from run to run on the H200."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write validate.json, passes.jsonl, both "
                                           "summaries and both request tables here."),
        as_json: bool = typer.Option(False, "--json", help="Print validate.json's content instead of tables."),
        limit: Optional[int] = LIMIT, trace_format: Optional[str] = TRACE_FORMAT,
        skip_invalid: bool = SKIP_INVALID,
        serving=None,
    ):
        """Run a trace on the real runtime and in the simulator alike; report predicted against measured.

        Same cost model, KV pages, seed and acceptance draws (a preset) in both worlds.

        Offline or with --concurrency both build the same pass plans: the error is shown pass by pass.

        With arrivals: throughput, TTFT, TPOT and end-to-end latency at mean, p50, p90, p99."""
        if measured is not None:
            return _against_measured(trace, measured, serving, limit, window, trace_format, skip_invalid, device,
                                     cuda_graphs, startup_shapes, as_json)
        from spsim.cli.gpu_runtime import check_device

        check_device(device, serving.model)

        from spsim.cli_report import load_trace, setting_notes, warn
        from spsim.validate import OUT_FILES, check, dumps, select, write
        from spsim.validate import validate as run_both
        from spsim.validate_report import notes

        cfg = check(serving)
        check_out_dir(out, OUT_FILES)
        tr = select(load_trace(trace, trace_format, None, skip_invalid), limit, window)
        warn(setting_notes(cfg, len(tr)))

        from spsim.gpu_runtime.engine import RuntimeOptions

        opts = RuntimeOptions(device=device, dtype=dtype, cuda_graphs=cuda_graphs, rehearse=rehearse, repeats=repeat,
                              coarse_shapes=coarse_shapes, overlap=overlap, shape_rule=startup_shapes,
                              startup_shapes=startup_shapes, say=lambda m: err.print(f"[dim]{m}[/]"))
        v = run_both(tr, cfg, opts, warm=warm, log=lambda m: err.print(f"[dim]{m}[/]"))
        v.report["trace"] = trace
        if as_json:
            typer.echo(dumps(v.report), nl=False)
        else:
            show(v.report)
        warn(notes(v.report))
        if out is not None:
            write(out, v)


def _against_measured(trace, measured, serving, limit, window, trace_format, skip_invalid, device, cuda_graphs,
                      startup_shapes, as_json) -> None:
    import json

    from spsim.cli_report import load_trace
    from spsim.errors import SpsimError
    from spsim.validate import dumps, select, validate_measured

    try:
        summary = json.loads(measured.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SpsimError(f"--measured {measured}: cannot read a summary ({e})") from None
    if not isinstance(summary, dict) or "output_throughput" not in summary:
        raise SpsimError(f"--measured {measured}: not a run summary (no output_throughput)")
    tr = select(load_trace(trace, trace_format, None, skip_invalid), limit, window)
    r = validate_measured(tr, serving, summary, padded=cuda_graphs and device == "cuda", shape_rule=startup_shapes)
    r["trace"] = trace
    if as_json:
        typer.echo(dumps(r), nl=False)
        return
    t = Table(title=f"{r['policy']} on {trace} ({r['requests']:,} requests): simulator against {measured}",
              header_style="bold")
    for h in ("metric", "measured", "predicted", "error", "target"):
        t.add_column(h, justify="left" if h == "metric" else "right")
    for k, v in r["metrics"].items():
        if v["measured"] is None and v["predicted"] is None:
            continue
        e = v["rel_error"]
        ok = "" if v["within"] is None else (" [green]ok[/]" if v["within"] else " [red]MISSED[/]")
        t.add_row(k, f"{v['measured']:,.2f}" if v["measured"] is not None else "-",
                  f"{v['predicted']:,.2f}" if v["predicted"] is not None else "-",
                  (f"{e:+.1%}" if e is not None else "-") + ok, f"{v['target']:.0%}" if v["target"] else "")
    console.print(t)


def show(r: dict) -> None:
    from spsim.validate_report import plans_line, rows, runtime_line

    console.print(f"[bold]{r['policy']}[/] on {r['trace']} ({r['requests']:,} requests, {r['load']}): "
                  f"{r['model']} on {r['device']}, cost model {r['cost_model']}, {r['kv_pages']:,} KV pages")
    sp = r["same_plans"]
    style = "green" if sp["equal"] else ("yellow" if sp["expected"] else "dim")
    console.print(f"[{style}]{plans_line(r)}[/]")
    console.print(f"[dim]{runtime_line(r)}[/]")
    for title, (head, body) in rows(r).items():
        t = Table(title=title, header_style="bold")
        for i, h in enumerate(head):
            t.add_column(h, justify="left" if i == 0 else "right")
        for row in body:
            t.add_row(*[x.replace("MISSED", "[red]MISSED[/]").replace(" ok", " [green]ok[/]") for x in row])
        console.print(t)
