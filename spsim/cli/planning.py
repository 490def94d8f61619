"""`spsim plan`: capacity planning over policies x GPUs x models x settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from spsim.cli_options import LIMIT, SKIP_INVALID, TRACE_FORMAT, check_out_dir, serving_options
from spsim.config import ServingConfig as Defaults  # its class attributes: the defaults
from spsim.report_numbers import readable

console = Console()
ALL_POLICIES = "ar,sync,fixed-k,entropy,aspire,oracle"
SWEPT_OR_SEARCHED = ("policy", "gpu", "model", "max_batch", "draft_budget", "draft_kv", "tp", "replicas", "qps",
                     "offline", "concurrency", "slo", "slo_ttft_s", "slo_tpot_s")
OUT_FILES = ("results.csv", "probes.csv", "recommendation.json", "recommendation.md")


def _examples(*lines: str) -> str:
    return "Examples:\n\n" + "\n\n".join(f"  {x}" for x in lines)


def _sim_config(**kw):
    from spsim.simulator.engine import SimConfig

    return SimConfig(**kw)


def register(app: typer.Typer) -> None:
    @app.command(epilog=_examples(
        "spsim plan azure-conv --limit 1000 --slo ttft_p90=2s,tpot_p99=60ms --policies ar,fixed-k:k=4,aspire --replicas 1..4",
        "spsim plan azure-conv --slo ttft_p90=2s,tpot_p99=60ms --policies ar,sync,aspire --gpus h100-sxm,h200 "
        "--replicas 1..8 --report plan.html --out plan/",
        "spsim plan mooncake --limit 500 --slo ttft=5s,tpot=80ms,attain=95% --max-batch 64,256 --prices prices.json --out plan/"))
    @serving_options(exclude=SWEPT_OR_SEARCHED, config_cls=_sim_config)
    def plan(
        trace: Optional[str] = typer.Argument(None, help="Trace file or shipped name (default: mooncake)."),
        slo: str = typer.Option(..., "--slo", help="The SLO, e.g. ttft_p90=2s,tpot_p99=60ms (percentiles over the "
                                "run) or ttft=2s,tpot=60ms,attain=90% (per request); units s or ms."),
        policies: str = typer.Option(ALL_POLICIES, "--policies", "-P", help="Comma list of policy specs."),
        gpus: str = typer.Option(Defaults.gpu, "--gpus", help="Comma list of GPUs (see `spsim models`)."),
        models: str = typer.Option(Defaults.model, "--models", help="Comma list of model shapes."),
        replicas: str = typer.Option("1..8", "--replicas", "-r", help="Replica range or list: the highest rate is "
                                     "searched at the smallest, the fewest replicas for --target-rate within it."),
        max_batch: str = typer.Option(str(Defaults.max_batch), "--max-batch", help="Comma list of max batch sizes."),
        draft_budget: str = typer.Option(str(Defaults.draft_budget), "--draft-budget",
                                         help="Comma list of sparse draft KV budgets (tokens)."),
        draft_kv: str = typer.Option(Defaults.draft_kv, "--draft-kv",
                                     help="Comma list of draft-KV methods (auto: each policy's own)."),
        tp: str = typer.Option(str(Defaults.tp), "--tp", help="Comma list of tensor-parallel sizes."),
        target_rate: Optional[float] = typer.Option(None, "--target-rate", help="Request rate (req/s) the fewest "
                                                    "replicas must serve (default: the trace's own rate)."),
        precision: float = typer.Option(0.05, "--precision", help="Relative precision of the highest rate "
                                        "(the search stops when the bracket is narrower)."),
        early_stop: bool = typer.Option(True, "--early-stop/--no-early-stop", help="Stop a probe as soon as its "
                                        "SLO can no longer be met (exact: changes no answer; docs/planning.md)."),
        window: Optional[int] = typer.Option(None, "--window", help="Requests of the window phase (the search "
                                             "first runs on the trace's first N, then confirms on the whole trace; "
                                             "default max(1000, 1/8 of the trace); 0: whole trace only)."),
        prices: Optional[Path] = typer.Option(None, "--prices", help="JSON {gpu: USD per GPU-hour} replacing the "
                                              "default prices (docs/planning.md)."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for results.csv, probes.csv, "
                                           "recommendation.json/.md and the probe cache (a rerun resumes)."),
        report: Optional[Path] = typer.Option(None, "--report", help="Write a self-contained HTML report here."),
        jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Parallel workers (default: the CPU count)."),
        use_ray: bool = typer.Option(False, "--ray", help="Run the sweep on Ray (pip install 'spsim\\[ray]')."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help="An existing Ray cluster (with --ray)."),
        as_json: bool = typer.Option(False, "--json", help="Print the results and recommendation as JSON."),
        limit: Optional[int] = LIMIT, trace_format: Optional[str] = TRACE_FORMAT,
        skip_invalid: bool = SKIP_INVALID,
        serving=None,
    ):
        """Find the highest request rate under an SLO and the fewest replicas; recommend a winner.

        Per configuration: the highest request rate meeting the SLO, the fewest replicas for a
        target rate, goodput per GPU and per dollar, and what limits it; a winner per objective."""
        from spsim.planning.run import PlanInputs, run_plan

        inputs = PlanInputs.from_options(
            trace=trace, trace_format=trace_format, limit=limit, skip_invalid=skip_invalid, slo=slo,
            policies=policies, gpus=gpus, models=models, replicas=replicas, max_batch=max_batch,
            draft_budget=draft_budget, draft_kv=draft_kv, tp=tp, target_rate=target_rate, precision=precision,
            early_stop=early_stop, window=window, prices=prices, base=serving, jobs=jobs, ray=use_ray, ray_address=ray_address)
        check_out_dir(out, OUT_FILES)
        if report is not None:
            check_out_dir(report.parent if str(report.parent) else Path("."), (report.name,), label=f"--report {report}")
        plan_out = run_plan(inputs, out=out, console=None if as_json else console)
        if as_json:
            typer.echo(json.dumps({"results": plan_out.rows, "recommendation": plan_out.recs}, indent=2, default=str))
        else:
            console.print(results_table(plan_out))
            console.print(f"[dim]{escape(plan_out.meta['costs'])}[/]")
            for r in plan_out.recs:
                console.print(f"[bold]{r['title']}[/]: " + (f"[green]{escape(r['winner'])}[/]  {escape(r['reason'])}"
                                                            if r["winner"] else escape(r["reason"])))
            print_limits(plan_out.rows)
        if out is not None:
            plan_out.write(out)
            if not as_json:
                console.print(f"wrote {out}/results.csv, probes.csv, recommendation.json, recommendation.md "
                              f"(probe cache: {out}/cache)")
        if report is not None:
            from spsim.planning.report import write_report

            write_report(report, plan_out)
            if not as_json:
                console.print(f"wrote {report}")


def results_table(p) -> Table:
    """The configurations, each objective's winner starred (green) in its column, rate per GPU
    against the reference policy's below it; fits 80 columns (tests/test_plan_report.py)."""
    from spsim.planning.marks import marked

    t = Table(title=f"spsim plan: {p.meta['trace']} ({p.meta['requests']:,} requests), SLO {p.meta['slo']}",
              header_style="bold", show_lines=True)
    cols = [("config", "configuration", "left"), ("max_rate", "max\nreq/s", "right"),
            ("rate_per_gpu", "req/s\nper GPU", "right"), ("requests_per_usd", "req per\nUSD", "right"),
            ("fewest_replicas", f"replicas for\n{readable(p.meta['target_rate'], 3)} req/s", "right"),
            ("limiter", "limited\nby", "left")]
    for k, c, j in cols:
        # a long label (policy, GPU, model and settings) wraps at its spaces; numbers and limiter
        # codes never break (a label of 70 characters held on one line left no room for any number
        # at 80 columns)
        t.add_column(c, justify=j, overflow="fold", no_wrap=k != "config", min_width=16 if k == "config" else None)
    for r, line in zip(p.rows, marked(p.rows, p.recs, [k for k, _, _ in cols])):
        cells = []
        for k, _, _ in cols:
            text, ratio, best = line[k]
            cell = f"[bold green]*{escape(text)}[/]" if best else escape(text)
            cells.append(cell + (f"\n[dim]{ratio}[/]" if ratio else ""))
        if r["clairvoyant"]:
            cells[0] += " [dim](clairvoyant)[/]"
        t.add_row(*cells)
    t.caption = (f"* winner; under req/s per GPU: against {p.rows[0]['policy'] if p.rows else '-'}; rates at "
                 f"{p.meta['replicas_searched']} replica{'' if p.meta['replicas_searched'] == 1 else 's'}, searched to "
                 f"{p.meta['precision']:.0%}; {p.meta['probes_simulated']} runs simulated, {p.meta['probes_cached']} "
                 f"from the cache, {p.meta['wall_s']:.0f} s")
    return t


def print_limits(rows: list[dict]) -> None:
    """What limits the configurations, each reason once (planning/limits.py: stated_once)."""
    from spsim.planning.limits import stated_once

    for g in stated_once(rows):
        if g["code"] == "none":
            console.print(f"[bold]limited by nothing tried[/] ({escape(', '.join(g['configs']))}): "
                          f"{escape(g['evidence'][0][1])}")
            continue
        console.print(f"[bold]limited by {escape(g['head'])}[/] ({escape(', '.join(g['configs']))})"
                      + (f": {escape(g['remedy'])}" if g["remedy"] else ""))
        for cs, e in g["evidence"]:
            console.print(f"  [dim]{escape(', '.join(cs))}: {escape(e)}[/]")


def _f(v, digits=3) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if digits == 0 else f"{v:.{digits}g}"
