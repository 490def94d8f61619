"""`spsim replay` and `spsim compare`: replay a trace against policies in simulated time."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from spsim.cli_options import LIMIT, SKIP_INVALID, TRACE_FORMAT, check_out_dir, policy_specs, serving_options
from spsim.cli_report import DEFAULT_TRACE, cost_note, load_trace as _load, run_notes, setting_notes, summary_table, warn  # noqa: F401
from spsim.policies.draftlog import DEFAULT_SAMPLE as DRAFT_SAMPLE
from spsim.errors import SpsimError

# The simulator (simpy) is imported when a command runs, not when the CLI starts: `spsim --help`
# and the GPU world's commands work where simpy is not installed.

console = Console()



# Where the terminal shows no live progress bar (output piped or redirected, or --json), long runs
# print plain progress lines on stderr: the first once a run has taken PROGRESS_AFTER_S, then at
# every further tenth of the work or every PROGRESS_EVERY_S, whichever comes first.
PROGRESS_AFTER_S = 10.0
PROGRESS_EVERY_S = 30.0
PROGRESS_GAP_S = 2.0  # no two lines closer than this, except the last (100 %)


def live_progress(as_json: bool = False) -> bool:
    """A live progress bar only where both stdout and stderr are terminals and stdout is a table."""
    return not as_json and console.is_terminal and sys.stderr.isatty()


class ProgressLines:
    """Plain progress lines on stderr for output that is not a terminal."""

    def __init__(self, label: str, stream=None):
        self.label = label
        self.stream = stream
        self.t0 = time.perf_counter()
        self.last_t: float | None = None
        self.last_tenth = 0

    def __call__(self, fraction: float, what: str, of: str = "") -> None:
        """`fraction` done, as a percentage labelled `of` (e.g. "of all runs" where `what` counts
        one run's requests and the fraction is over several)."""
        now = time.perf_counter()
        elapsed = now - self.t0
        if elapsed < PROGRESS_AFTER_S:
            return
        tenth = int(10 * min(max(fraction, 0.0), 1.0))
        if self.last_t is not None:
            since = now - self.last_t
            if (tenth <= self.last_tenth or since < PROGRESS_GAP_S) and since < PROGRESS_EVERY_S and fraction < 1.0:
                return
        self.last_t, self.last_tenth = now, tenth
        pct = f"{int(100 * min(max(fraction, 0.0), 1.0))}%{' ' + of if of else ''}"
        print(f"{self.label}: {what} ({pct}), {elapsed:.0f} s elapsed",
              file=self.stream or sys.stderr, flush=True)


def _run(trace, cfg, label: str, quiet: bool = False, record: bool = False, draft_sample: int = 0, cost=None):
    """Simulate with progress: a live bar on a terminal, else plain lines on stderr (`quiet`: the
    caller's stdout is not a table, e.g. --json). `record`: keep each verification's outcome (the
    step path: the same run, slower; simulator/positions.py). `draft_sample`: record that many
    requests' draft lengths (policies/draftlog.py; the same run). `cost`: the cost model to price
    with (else the run's own)."""
    from functools import partial

    from spsim.simulator.engine import simulate

    if record:
        from spsim.simulator.positions import simulate_with_positions as simulate  # noqa: F811
    own = {"cost": cost} if cost is not None else {}
    simulate = partial(simulate, draft_sample=draft_sample, **own)  # noqa: F811

    if not live_progress(quiet):
        lines = ProgressLines(label)
        return simulate(trace, cfg, progress=lambda done, total: lines(done / total, f"{done:,}/{total:,} requests"))
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} requests"),
                  TimeElapsedColumn(), console=console, transient=True) as prog:
        task = prog.add_task(label, total=len(trace))
        return simulate(trace, cfg, progress=lambda done, total: prog.update(task, completed=done))


def _acceptance_spread(cfg, spec, res) -> str | None:
    """With a fitted preset (`--acceptance file:path=`) that carries a bootstrap interval: the
    spread of mean accepted per verification that interval and the seeds imply, into the summary
    (`acceptance_spread`) and as a line for the terminal."""
    from spsim.build import draft_method
    from spsim.plan import DraftMethod

    from spsim.acceptance.spread import note, preset_interval, seed_sd_from_requests, spread

    block = preset_interval(cfg.acceptance)
    s = res.summary
    if not block or not s.get("verifications"):
        return None
    rq = res.requests
    sp = spread(block, DraftMethod(draft_method(cfg, spec)).label, int(cfg.draft_budget),
                float(s["mean_accepted_per_verify"]), float(s.get("drafts_per_verify") or 0.0),
                seed_sd_from_requests(rq["accepted"], rq["verifies"]), 1)
    s["acceptance_spread"] = sp
    return note(sp)


def _write(out: Path, name: str, result, fmt: str) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}summary.json").write_text(result.summary_json())
        if fmt == "parquet":
            result.requests.to_parquet(out / f"{name}requests.parquet", index=False)
        else:
            result.requests.to_csv(out / f"{name}requests.csv", index=False)
    except OSError as e:  # checked before the run; the disk can still fill up
        raise SpsimError(f"--out {out}: cannot write ({e.strerror or e})") from None


def _recorder(cfg, spec):
    """The run's cost model, recording each pass it prices (`--calibration-points`)."""
    from spsim.build import build_cost_model, draft_method
    from spsim.calibration.trace_points import PassRecorder

    return PassRecorder(build_cost_model(cfg), draft_method(cfg, spec), spec.cls.speculative)


def _LazySimConfig(**kw):
    """SimConfig, imported when a command runs (it brings simpy)."""
    from spsim.simulator.engine import SimConfig

    return SimConfig(**kw)


def _examples(*lines: str) -> str:
    """A help page's epilog: examples, one per paragraph (rich keeps them apart)."""
    return "Examples:\n\n" + "\n\n".join(f"  {x}" for x in lines)


def _billions(x: float) -> str:
    # the tiny test model is not 0 parameters
    return f"{x:.2f}" if x >= 0.01 else "<0.01"


def register(app: typer.Typer) -> None:

    @app.command(epilog=_examples("spsim models"))
    def models():
        """Model shapes and GPUs the analytic cost model knows."""
        from spsim.hardware import GPUS
        from spsim.models import MODELS

        t = Table(title="models", header_style="bold", pad_edge=False)
        for c in ("name", "layers", "hidden", "q/kv heads", "head dim", "params (B)", "context", "KV KiB/tok (bf16)"):
            t.add_column(c, justify="right" if c != "name" else "left", no_wrap=c == "name", overflow="fold")
        for m in MODELS.values():
            t.add_row(m.name, str(m.layers), str(m.hidden), f"{m.q_heads}/{m.kv_heads}", str(m.head_dim),
                      _billions(m.params / 1e9), f"{m.max_context:,}", f"{m.kv_bytes_per_token('bf16') / 1024:.1f}")
        console.print(t)
        g = Table(title="GPUs", header_style="bold")
        # memory as the card exposes it to CUDA (what KV pages are sized from), in GiB: the H200's
        # 150.1e9 bytes are 139.8 GiB, not its datasheet's "141 GB" nor "150 GB"
        for c in ("name", "memory exposed (GiB)", "HBM (TB/s, datasheet)", "bf16 dense (TFLOP/s, datasheet)"):
            g.add_column(c, justify="right" if c != "name" else "left", overflow="fold")
        for x in GPUS.values():
            g.add_row(x.name, f"{x.mem_bytes / 2**30:.1f}", f"{x.hbm_bw / 1e12:.2f}", f"{x.bf16_flops / 1e12:.0f}")
        console.print(g)

    @app.command(epilog=_examples("spsim policies", "spsim replay mooncake --limit 200 --policy fixed-k:k=6"))
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

    @app.command(epilog=_examples(
        "spsim replay mooncake --limit 1000 --replicas 4 --policy aspire --out runs/aspire   # about 10 s",
        "spsim replay azure-conv --limit 2000 --policy fixed-k:k=8 --qps 8 --json   # trace rescaled to 8 req/s",
        "spsim replay my.jsonl --policy sync --concurrency 32 --skip-invalid   # closed loop, bad rows skipped",
        "spsim replay azure-conv --limit 500 --policy aspire --slo ttft_p90=2s,tpot_p99=60ms --report run.html"))
    @serving_options(config_cls=_LazySimConfig)
    def replay(
        trace: Optional[str] = typer.Argument(None, help=f"Trace file or shipped name (default: {DEFAULT_TRACE})."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for summary.json and per-request "
                                           "results (checked before the run)."),
        per_request: str = typer.Option("csv", "--per-request", help="Per-request file format: csv or parquet "
                                        "(needs pyarrow)."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of a table."),
        report: Optional[Path] = typer.Option(None, "--report", help="Write a self-contained HTML report here "
                                              "(distributions, GPU time, acceptance by draft position: the run "
                                              "records each verification, which is slower; not for oracle)."),
        calibration_points: Optional[Path] = typer.Option(
            None, "--calibration-points", help="Also write the pass compositions this run asks for as calibration "
            "points (JSON lines, for `spsim calibrate --gpu --points FILE`): the kinds of pass holding the most "
            "simulated GPU time, one pass each. The run then steps pass by pass (same results, slower)."),
        calibration_max_points: int = typer.Option(48, "--calibration-max-points", help="At most this many points "
                                                   "in --calibration-points."),
        limit: Optional[int] = LIMIT, trace_format: Optional[str] = TRACE_FORMAT,
        skip_invalid: bool = SKIP_INVALID,
        serving=None,
    ):
        """Replay a trace against one policy; print a summary, optionally write results to --out."""
        if per_request not in ("csv", "parquet"):
            raise SpsimError("--per-request must be csv or parquet")
        cfg = serving
        policy = cfg.policy
        # everything that could fail is checked before a long run, not after it
        check_out_dir(out, ("summary.json", f"requests.{per_request}"))
        if out and per_request == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise SpsimError("--per-request parquet needs pyarrow (pip install pyarrow); csv works without it") from None
        from spsim.policies.registry import parse_policy

        spec = parse_policy(policy)
        if report is not None:
            check_out_dir(report.parent, (report.name,), label=f"--report {report}")
        recorder = None
        if calibration_points is not None:
            if calibration_max_points < 1:
                raise SpsimError(f"--calibration-max-points must be >= 1 (got {calibration_max_points})")
            check_out_dir(calibration_points.parent, (calibration_points.name,),
                          label=f"--calibration-points {calibration_points}")
            recorder = _recorder(cfg, spec)
            cfg = dataclasses.replace(cfg, fast=False)
        tr = _load(trace, trace_format, limit, skip_invalid)
        warn(setting_notes(cfg, len(tr)))
        t0 = time.perf_counter()
        res = _run(tr, cfg, f"replay {policy}", quiet=as_json, record=report is not None and not spec.cls.oracle,
                   draft_sample=DRAFT_SAMPLE if report is not None else 0, cost=recorder)
        wall = time.perf_counter() - t0
        spread_note = _acceptance_spread(cfg, spec, res)
        if as_json:
            typer.echo(res.summary_json(), nl=False)
        else:
            console.print(summary_table(res.summary, f"{policy} on {trace or DEFAULT_TRACE} ({len(tr):,} requests, "
                                                     f"{cfg.replicas} x {cfg.model} on {cfg.gpu})"))
            if res.summary.get("prefix_cache_note"):
                console.print(f"[dim]{escape(res.summary['prefix_cache_note'])}[/]")
            console.print(f"[dim]{escape(cost_note(res.summary['config']))}; simulated in {wall:.1f} s[/]")
            if spread_note:
                console.print(escape(spread_note))
        warn(run_notes(res.summary))
        if recorder is not None:
            from spsim.calibration.trace_points import choose, write_points

            pts, how = choose(recorder.passes, calibration_max_points)
            write_points(calibration_points, pts)
            msg = (f"wrote {calibration_points}: {how['points']} calibration points from {how['passes']:,} passes in "
                   f"{how['buckets']} kinds, {how['time_share']:.0%} of the simulated GPU time")
            (console.print if not as_json else lambda m: typer.echo(m, err=True))(msg)
        if out:
            _write(out, "", res, per_request)
            if not as_json:
                console.print(f"wrote {out}/summary.json and {out}/requests.{per_request}")
        if report is not None:
            from spsim.html_report import write_run_report

            write_run_report(report, res.summary, res.requests, f"spsim replay: {policy} on {trace or DEFAULT_TRACE} "
                             f"({len(tr):,} requests, {cfg.replicas} x {cfg.model} on {cfg.gpu})",
                             draft_lengths=res.extra.get("draft_lengths"))
            if not as_json:
                console.print(f"wrote {report}")

    @app.command(epilog=_examples(
        "spsim compare mooncake --limit 1000 --replicas 4 -P ar,sync:k=4,fixed-k:k=8,aspire   # about 20 s",
        "spsim compare mooncake --limit 300 --concurrency 16 -P ar,entropy,aspire,oracle --seeds 3 --out runs/cmp",
        "spsim compare azure-conv --limit 1000 -P ar,fixed-k:k=4,aspire --report cmp.html   # + cmp.csv, cmp.md"))
    @serving_options(exclude=("policy", "seed"), config_cls=_LazySimConfig)
    def compare(
        trace: Optional[str] = typer.Argument(None, help=f"Trace file or shipped name (default: {DEFAULT_TRACE})."),
        policies: str = typer.Option("ar,sync,fixed-k:k=8,aspire", "--policies", "-P", help="Comma list of policy "
                                     "specs; the first is the reference of the ratios."),
        seeds: int = typer.Option(1, "--seeds", help="Runs per policy with acceptance seeds 0..N-1 (mean and "
                                  "spread); policies without speculation (ar) run once."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for compare.json, compare.csv and "
                                           "the report --report writes, as report.html (with report.csv and "
                                           "report.md; checked before the runs)."),
        as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
        report: Optional[Path] = typer.Option(None, "--report", help="Write a self-contained HTML report here "
                                              "(distributions, GPU time, acceptance by draft position, sampled "
                                              "requests' draft lengths over time; checked before the runs)."),
        limit: Optional[int] = LIMIT, trace_format: Optional[str] = TRACE_FORMAT,
        skip_invalid: bool = SKIP_INVALID,
        serving=None,
    ):
        """Compare policies side by side on one trace, with ratios against the first (usually `ar`)."""
        from spsim.compare import compare_policies, compare_table, write_report

        if seeds < 1:
            raise SpsimError(f"--seeds must be >= 1 (got {seeds})")
        specs = policy_specs(policies)
        check_out_dir(out, ("compare.json", "compare.csv", "report.html", "report.csv", "report.md"))
        if report is not None:
            check_out_dir(report.parent, (report.name,), label=f"--report {report}")
        if out or report is not None:
            try:
                import plotly  # noqa: F401
            except ImportError:
                raise SpsimError("--out and --report write HTML with plotly, which is not installed "
                                 "(pip install plotly)") from None
        tr = _load(trace, trace_format, limit, skip_invalid)
        base = serving.with_(policy=specs[0], seed=0)
        warn(setting_notes(base, len(tr), specs))
        details = {} if report is not None or out else None  # seed 0's runs, for the report
        if live_progress(as_json):
            rows = compare_policies(tr, base, specs, seeds, console=console, details=details)
        else:
            lines = ProgressLines("compare")
            rows = compare_policies(tr, base, specs, seeds, lines=lines, details=details)
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
        else:
            console.print(compare_table(rows, f"{trace or DEFAULT_TRACE}: {len(tr):,} requests, {base.replicas} x "
                                              f"{base.model} on {base.gpu}, {seeds} seed(s)"))
            console.print(f"[dim]{escape(cost_note(rows[0]))}[/]")
        _warn_rows(rows)
        # one report, the full one, wherever a report is written (--out's report.html, --report)
        pages = ([out / "report.html"] if out else []) + ([report] if report is not None else [])
        if not as_json:
            from spsim.acceptance.spread import note

            for r in rows:
                if r.get("acceptance_spread"):
                    console.print(escape(f"{r['policy']}: " + note(r["acceptance_spread"])))
        if out:
            write_report(out, rows, base, trace_skipped={"rows": int(sum(tr.skipped.values())),
                                                         "by_reason": dict(tr.skipped)})
        if pages:
            from spsim.compare_report import write_compare_report

            write_compare_report(pages, rows, details, tr, base, f"spsim compare: {trace or DEFAULT_TRACE} "
                                 f"({len(tr):,} requests, {base.replicas} x {base.model} on {base.gpu}, {seeds} seed(s))")
        if not as_json:
            if out:
                console.print(f"wrote {out}/compare.json, compare.csv, report.html (and report.csv, report.md)")
            if report is not None:
                console.print(f"wrote {report} (and {report.with_suffix('.csv').name}, {report.with_suffix('.md').name})")


def _warn_rows(rows: list[dict]) -> None:
    """One warning per kind of note, naming the policies it applies to (figures: the first's)."""
    by_kind: dict[str, list[tuple[str, str]]] = {}
    for r in rows:
        for kind in ("memory_note", "overload_note"):
            if r.get(kind):
                by_kind.setdefault(kind, []).append((r["policy"], r[kind]))
    for kind, items in by_kind.items():
        who = items[0][0] if len(items) == 1 else ", ".join(p for p, _ in items) + f" (figures for {items[0][0]})"
        warn([f"{who}: {items[0][1]}"])
