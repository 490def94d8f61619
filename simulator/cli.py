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

from spsim.errors import SpsimError
from spsim.spec import split_specs

from .engine import SimConfig, simulate

console = Console()

DEFAULT_TRACE = "mooncake"

# Options shared by replay and compare (typer reads defaults from these calls).
def _opts():
    return dict(
        model=typer.Option("llama-3.1-8b", "--model", "-m", help="Model shape (see `spsim models`)."),
        gpu=typer.Option("h200", "--gpu", "-g", help="GPU (h200, h100-sxm, h100-nvl, a100-80gb)."),
        tp=typer.Option(1, "--tp", help="Tensor-parallel GPUs per replica."),
        profile=typer.Option(None, "--profile", help="Calibrated cost profile JSON (replaces --model/--gpu pricing)."),
        acceptance=typer.Option(None, "--acceptance", "-a", help="Acceptance model spec (default: the embedded preset)."),
        replicas=typer.Option(1, "--replicas", "-r", help="Model replicas behind the router."),
        router=typer.Option("least-outstanding", "--router", help="least-outstanding or round-robin."),
        qps=typer.Option(None, "--qps", help="Rescale arrivals to this request rate."),
        offline=typer.Option(False, "--offline", help="Everything arrives at t=0."),
        concurrency=typer.Option(None, "--concurrency", "-c", help="Closed loop: this many requests in flight."),
        limit=typer.Option(None, "--limit", "-n", help="Use only the first N requests of the trace."),
        max_batch=typer.Option(256, "--max-batch", help="Most requests running per replica."),
        token_budget=typer.Option(8192, "--token-budget", help="Most tokens per pass (chunked prefill fills the rest)."),
        draft_kv=typer.Option("auto", "--draft-kv", help="static, verify-refresh, step-refresh, or auto (the policy's own)."),
        draft_budget=typer.Option(2048, "--draft-budget", help="Sparse draft KV budget in tokens (sink and recent pages included)."),
        max_draft=typer.Option(16, "--max-draft", help="The batcher forces a verification at this many drafts."),
        kv_dtype=typer.Option("bf16", "--kv-dtype", help="bf16 or fp8."),
        weight_dtype=typer.Option("bf16", "--weight-dtype", help="bf16 or fp8."),
        no_prefix_cache=typer.Option(False, "--no-prefix-cache", help="Disable the prefix cache."),
        slo_ttft=typer.Option(10.0, "--slo-ttft", help="Goodput SLO on TTFT in seconds (where the trace has none)."),
        slo_tpot=typer.Option(0.1, "--slo-tpot", help="Goodput SLO on TPOT in seconds (where the trace has none)."),
        trace_format=typer.Option(None, "--format", help="Force the trace format."),
    )


def _load(trace_path: str | None, fmt: str | None, limit: int | None):
    from spsim.traces import read_trace

    tr = read_trace(trace_path or DEFAULT_TRACE, format=fmt)
    if limit is not None:
        if limit < 1:
            raise SpsimError("--limit must be >= 1")
        tr = tr.take(np.arange(min(limit, len(tr))))
    return tr


def _check(kw) -> None:
    """Option ranges, so that bad values fail here with the option's name, not deep inside."""
    positive = ("replicas", "max_batch", "token_budget", "draft_budget", "tp")
    for name in positive:
        if kw[name] < 1:
            raise SpsimError(f"--{name.replace('_', '-')} must be >= 1 (got {kw[name]})")
    if kw["max_draft"] < 0:
        raise SpsimError(f"--max-draft must be >= 0 (got {kw['max_draft']})")
    if kw["qps"] is not None and kw["qps"] <= 0:
        raise SpsimError(f"--qps must be > 0 (got {kw['qps']})")
    if kw["concurrency"] is not None and kw["concurrency"] < 1:
        raise SpsimError(f"--concurrency must be >= 1 (got {kw['concurrency']})")
    if sum(bool(x) for x in (kw["qps"], kw["offline"], kw["concurrency"])) > 1:
        raise SpsimError("choose one of --qps, --offline, --concurrency")
    if kw["slo_ttft"] <= 0 or kw["slo_tpot"] <= 0:
        raise SpsimError("--slo-ttft and --slo-tpot must be > 0")
    for name in ("kv_dtype", "weight_dtype"):
        if kw[name] not in ("bf16", "fp8"):
            raise SpsimError(f"--{name.replace('_', '-')} must be bf16 or fp8 (got {kw[name]!r})")
    if kw["draft_kv"] != "auto":
        from spsim.plan import DraftMethod

        DraftMethod.parse(kw["draft_kv"])


def _config(**kw) -> SimConfig:
    _check(kw)
    return SimConfig(
        policy=kw["policy"], model=kw["model"], gpu=kw["gpu"], tp=kw["tp"], profile=kw["profile"],
        acceptance=kw["acceptance"], replicas=kw["replicas"], router=kw["router"], seed=kw["seed"],
        qps=kw["qps"], offline=kw["offline"], concurrency=kw["concurrency"], max_batch=kw["max_batch"],
        token_budget=kw["token_budget"], draft_kv=kw["draft_kv"], draft_budget=kw["draft_budget"],
        max_draft=kw["max_draft"], kv_dtype=kw["kv_dtype"], weight_dtype=kw["weight_dtype"],
        prefix_cache=not kw["no_prefix_cache"], slo_ttft_s=kw["slo_ttft"], slo_tpot_s=kw["slo_tpot"])


def _run(trace, cfg: SimConfig, label: str, quiet: bool = False):
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


def register(app: typer.Typer) -> None:
    o = _opts()

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
            t.add_row(name, cls.description, params or "-", cls.default_draft_method.name.lower().replace("_", "-"))
        console.print(t)

    @app.command()
    def replay(
        trace: Optional[str] = typer.Argument(None, help=f"Trace file or shipped name (default: {DEFAULT_TRACE})."),
        policy: str = typer.Option("aspire", "--policy", "-p", help="Policy spec, e.g. ar, sync:k=4, fixed-k:k=8, entropy, aspire, oracle."),
        seed: int = typer.Option(0, "--seed", "-s", help="Seed of the acceptance draws."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write summary.json and per-request results here."),
        per_request: str = typer.Option("csv", "--per-request", help="csv or parquet."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of a table."),
        model: str = o["model"], gpu: str = o["gpu"], tp: int = o["tp"], profile: Optional[str] = o["profile"],
        acceptance: Optional[str] = o["acceptance"], replicas: int = o["replicas"], router: str = o["router"],
        qps: Optional[float] = o["qps"], offline: bool = o["offline"], concurrency: Optional[int] = o["concurrency"],
        limit: Optional[int] = o["limit"], max_batch: int = o["max_batch"], token_budget: int = o["token_budget"],
        draft_kv: str = o["draft_kv"], draft_budget: int = o["draft_budget"], max_draft: int = o["max_draft"],
        kv_dtype: str = o["kv_dtype"], weight_dtype: str = o["weight_dtype"], no_prefix_cache: bool = o["no_prefix_cache"],
        slo_ttft: float = o["slo_ttft"], slo_tpot: float = o["slo_tpot"], trace_format: Optional[str] = o["trace_format"],
    ):
        """Replay a trace against one policy; print a summary, optionally write results to --out."""
        kw = dict(locals())
        if per_request not in ("csv", "parquet"):
            raise SpsimError("--per-request must be csv or parquet")
        tr = _load(trace, trace_format, limit)
        cfg = _config(**kw)
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
    def compare(
        trace: Optional[str] = typer.Argument(None, help=f"Trace file or shipped name (default: {DEFAULT_TRACE})."),
        policies: str = typer.Option("ar,sync,fixed-k:k=8,aspire", "--policies", "-P", help="Comma list of policy specs."),
        seeds: int = typer.Option(1, "--seeds", help="Runs per policy with seeds 0..N-1 (mean and spread)."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write compare.json, compare.csv and report.html here."),
        as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
        model: str = o["model"], gpu: str = o["gpu"], tp: int = o["tp"], profile: Optional[str] = o["profile"],
        acceptance: Optional[str] = o["acceptance"], replicas: int = o["replicas"], router: str = o["router"],
        qps: Optional[float] = o["qps"], offline: bool = o["offline"], concurrency: Optional[int] = o["concurrency"],
        limit: Optional[int] = o["limit"], max_batch: int = o["max_batch"], token_budget: int = o["token_budget"],
        draft_kv: str = o["draft_kv"], draft_budget: int = o["draft_budget"], max_draft: int = o["max_draft"],
        kv_dtype: str = o["kv_dtype"], weight_dtype: str = o["weight_dtype"], no_prefix_cache: bool = o["no_prefix_cache"],
        slo_ttft: float = o["slo_ttft"], slo_tpot: float = o["slo_tpot"], trace_format: Optional[str] = o["trace_format"],
    ):
        """Compare policies side by side on one trace, with ratios against the first (usually `ar`)."""
        from .compare import compare_policies, compare_table, write_report

        kw = dict(locals())
        specs = split_specs(policies)
        if not specs:
            raise SpsimError("--policies is empty")
        if seeds < 1:
            raise SpsimError("--seeds must be >= 1")
        tr = _load(trace, trace_format, limit)
        base = _config(policy=specs[0], seed=0, **{k: v for k, v in kw.items() if k not in ("policies", "seeds", "out", "as_json", "trace")})
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
