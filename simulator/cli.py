"""`spsim replay` and `spsim compare`: replay a trace against policies in simulated time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from spsim.cli_options import LIMIT, TRACE_FORMAT, serving_options
from spsim.errors import SpsimError
from spsim.spec import split_specs

# The simulator (simpy) is imported when a command runs, not when the CLI starts: `spsim --help`
# and the GPU world's commands work where simpy is not installed.

console = Console()

DEFAULT_TRACE = "mooncake"

def _load(trace_path: str | None, fmt: str | None, limit: int | None):
    from spsim.traces import read_trace

    tr = read_trace(trace_path or DEFAULT_TRACE, format=fmt)
    if limit is not None:
        if limit < 1:
            raise SpsimError("--limit must be >= 1")
        tr = tr.take(np.arange(min(limit, len(tr))))
    return tr


def _run(trace, cfg, label: str, quiet: bool = False):
    from .engine import simulate

    if quiet:
        return simulate(trace, cfg)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} requests"),
                  TimeElapsedColumn(), console=console, transient=True) as prog:
        task = prog.add_task(label, total=len(trace))
        return simulate(trace, cfg, progress=lambda done, total: prog.update(task, completed=done))


def _ms(v):
    return "-" if v is None else f"{v:,.1f}"


def summary_table(s: dict, title: str) -> Table:
    t = Table(title=title, show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = [
        ("completed / rejected", f"{s['completed']:,} / {s['rejected']:,}" + (f" {s['rejected_reasons']}" if s['rejected'] else "")),
        ("duration (s)", f"{s['duration']:,.1f}"),
        ("request throughput (req/s)", f"{s['request_throughput']:.3f}"),
        ("goodput (req/s)", f"{s['request_goodput']:.3f}  [dim](TTFT<={s['goodput_slo']['ttft_s']}s, TPOT<={s['goodput_slo']['tpot_s']*1e3:.0f}ms)[/]"),
        ("output throughput (tok/s)", f"{s['output_throughput']:,.1f}"),
        ("total token throughput (tok/s)", f"{s['total_token_throughput']:,.1f}"),
    ]
    for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        rows.append((f"{m.replace('_ms', '').upper()} mean / p50 / p99 (ms)",
                     f"{_ms(s['mean_' + m])} / {_ms(s['median_' + m])} / {_ms(s['p99_' + m])}"))
    if s["drafted_tokens"]:
        rows += [("draft acceptance rate", f"{s['draft_acceptance_rate']:.3f}"),
                 ("tokens per verification (all / with drafts)",
                  f"{s['tokens_per_verify']:.2f} / {s['spec_mean_accepted_per_verify'] + 1:.2f}"),
                 ("drafts per verification (with drafts)", f"{s['spec_drafts_per_verify']:.2f}")]
    pt = s["pass_time_s"]
    tot = sum(pt.values()) or 1.0
    rows.append(("pass time: prefill / mixed / draft / verify",
                 " / ".join(f"{100 * pt[c] / tot:.0f}%" for c in ("prefill", "mixed", "draft", "verify"))))
    rows.append(("preemptions", f"{s['preemptions']:,}"))
    if s.get("prefix_cache_hit_rate") is not None:
        rows.append(("prefix cache hit rate (blocks)", f"{s['prefix_cache_hit_rate']:.1%}"))
    rows.append(("KV pages peak / capacity", f"{s['kv_peak_pages']:,} / {s['kv_capacity_pages']:,}"))
    for k, v in rows:
        t.add_row(k, v)
    return t


def _write(out: Path, name: str, result, fmt: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}summary.json").write_text(result.summary_json())
    if fmt == "parquet":
        result.requests.to_parquet(out / f"{name}requests.parquet", index=False)
    else:
        result.requests.to_csv(out / f"{name}requests.csv", index=False)


def _LazySimConfig(**kw):
    """SimConfig, imported when a command runs (it brings simpy)."""
    from .engine import SimConfig

    return SimConfig(**kw)


def register(app: typer.Typer) -> None:

    @app.command()
    def models():
        """Model shapes and GPUs the analytic cost model knows."""
        from spsim.hardware import GPUS
        from spsim.models import MODELS

        t = Table(title="models", header_style="bold")
        for c in ("name", "layers", "hidden", "q/kv heads", "head dim", "params (B)", "context", "KV KiB/token (bf16)"):
            t.add_column(c, justify="right" if c != "name" else "left", no_wrap=c == "name")
        for m in MODELS.values():
            t.add_row(m.name, str(m.layers), str(m.hidden), f"{m.q_heads}/{m.kv_heads}", str(m.head_dim),
                      f"{m.params / 1e9:.2f}", f"{m.max_context:,}", f"{m.kv_bytes_per_token('bf16') / 1024:.0f}")
        console.print(t)
        g = Table(title="GPUs", header_style="bold")
        for c in ("name", "memory (GB)", "HBM (TB/s, datasheet)", "bf16 dense (TFLOP/s, datasheet)"):
            g.add_column(c, justify="right" if c != "name" else "left")
        for x in GPUS.values():
            g.add_row(x.name, f"{x.mem_bytes / 1e9:.0f}", f"{x.hbm_bw / 1e12:.2f}", f"{x.bf16_flops / 1e12:.0f}")
        console.print(g)

    @app.command()
    def policies():
        """Speculation policies and their parameters (spec grammar: name:key=value,...)."""
        from dataclasses import fields

        from spsim.policies.registry import list_policies

        t = Table(title="policies", header_style="bold")
        for c in ("spec", "what", "parameters", "draft KV (auto)"):
            t.add_column(c)
        for name, cls in sorted(list_policies().items()):
            params = ", ".join(f"{f.name}={f.default}" for f in fields(cls))
            t.add_row(name, cls.description, params or "-", cls.default_draft_method.label)
        console.print(t)

    @app.command()
    @serving_options(config_cls=_LazySimConfig)
    def replay(
        trace: Optional[str] = typer.Argument(None, help=f"Trace file or shipped name (default: {DEFAULT_TRACE})."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write summary.json and per-request results here."),
        per_request: str = typer.Option("csv", "--per-request", help="csv or parquet."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of a table."),
        limit: Optional[int] = LIMIT, trace_format: Optional[str] = TRACE_FORMAT,
        serving=None,
    ):
        """Replay a trace against one policy; print a summary, optionally write results to --out."""
        if per_request not in ("csv", "parquet"):
            raise SpsimError("--per-request must be csv or parquet")
        cfg = serving
        policy = cfg.policy
        tr = _load(trace, trace_format, limit)
        if out and per_request == "parquet":  # checked before a long run, not after it
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise SpsimError("--per-request parquet needs pyarrow (pip install pyarrow); csv works without it") from None
        t0 = time.perf_counter()
        res = _run(tr, cfg, f"replay {policy}", quiet=as_json)
        wall = time.perf_counter() - t0
        if as_json:
            typer.echo(res.summary_json(), nl=False)
        else:
            console.print(summary_table(res.summary, f"{policy} on {trace or DEFAULT_TRACE} ({len(tr):,} requests, "
                                                     f"{cfg.replicas} x {cfg.model} on {cfg.gpu})"))
            console.print(f"[dim]simulated in {wall:.1f} s[/]")
        if out:
            _write(out, "", res, per_request)
            if not as_json:
                console.print(f"wrote {out}/summary.json and {out}/requests.{per_request}")

    @app.command()
    @serving_options(exclude=("policy", "seed"), config_cls=_LazySimConfig)
    def compare(
        trace: Optional[str] = typer.Argument(None, help=f"Trace file or shipped name (default: {DEFAULT_TRACE})."),
        policies: str = typer.Option("ar,sync,fixed-k:k=8,aspire", "--policies", "-P", help="Comma list of policy specs."),
        seeds: int = typer.Option(1, "--seeds", help="Runs per policy with seeds 0..N-1 (mean and spread)."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write compare.json, compare.csv and report.html here."),
        as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
        limit: Optional[int] = LIMIT, trace_format: Optional[str] = TRACE_FORMAT,
        serving=None,
    ):
        """Compare policies side by side on one trace, with ratios against the first (usually `ar`)."""
        from .compare import compare_policies, compare_table, write_report

        specs = split_specs(policies)
        if not specs:
            raise SpsimError("--policies is empty")
        if seeds < 1:
            raise SpsimError("--seeds must be >= 1")
        tr = _load(trace, trace_format, limit)
        base = serving.with_(policy=specs[0], seed=0)
        rows = compare_policies(tr, base, specs, seeds, console=None if as_json else console)
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
        else:
            console.print(compare_table(rows, f"{trace or DEFAULT_TRACE}: {len(tr):,} requests, {base.replicas} x "
                                              f"{base.model} on {base.gpu}, {seeds} seed(s)"))
        if out:
            write_report(out, rows, base)
            if not as_json:
                console.print(f"wrote {out}/compare.json, compare.csv, report.html")
