"""`spsim trace stats|convert|gen|head`: inspect, convert, generate and transform traces.

Every command that reads a trace takes the same transform options, applied in this order:
--merge, --window, --filter-prompt/--filter-output, --clip-prompt/--clip-output, --first/--sample,
--rescale-qps. Rows skipped (or flagged) while reading are reported on stderr, by reason. A result
with no requests is an error (one line, exit 2) naming the step that emptied it, and so are zero
or negative counts.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from spsim.errors import InputError, SpecError

from spsim.traces import transforms as T
from spsim.traces.generate import PRESETS, generate
from spsim.traces.io import FORMATS, iter_lines, read_trace, write_trace
from spsim.traces.report import notes
from spsim.traces.stats import stats as trace_stats
from spsim.traces.trace import Trace

app = typer.Typer(no_args_is_help=True, rich_markup_mode="rich")
out = Console(highlight=False, soft_wrap=True)

PATH_HELP = "Trace file (canonical JSONL, Mooncake JSONL, Azure/BurstGPT/Vidur CSV) or a shipped name: mooncake, azure-conv."
FORMAT = typer.Option(None, "--format", "-f", help=f"Force the input format: {', '.join(FORMATS)}.")
SKIP = typer.Option(False, "--skip-invalid", help="Skip bad rows (counted and reported by reason) instead of stopping at the first.")
MERGE = typer.Option(None, "--merge", help="Overlay another trace on the same clock (repeatable).")
WINDOW = typer.Option(None, "--window", help="Keep arrivals in [START, END) seconds, e.g. 600:1200 or 600: (re-zeroed).")
FPROMPT = typer.Option(None, "--filter-prompt", help="Keep requests with prompt tokens in MIN:MAX (inclusive; either side may be empty).")
FOUTPUT = typer.Option(None, "--filter-output", help="Keep requests with output tokens in MIN:MAX.")
CPROMPT = typer.Option(None, "--clip-prompt", help="Cap prompt tokens at N (prefix blocks past the cap are dropped).")
COUTPUT = typer.Option(None, "--clip-output", help="Cap output tokens at N.")
FIRST = typer.Option(None, "--first", help="Keep the first N requests.")
SAMPLE = typer.Option(None, "--sample", help="Keep N requests chosen at random (time order kept; see --seed).")
SEED = typer.Option(0, "--seed", help="Seed for --sample.")
RESCALE = typer.Option(None, "--rescale-qps", help="Stretch/compress time so QPS (count / span) becomes Q.")


# the options `load` takes, in its order: each command reading a trace gets them from `reads_trace`
LOAD_OPTIONS = (("format", Optional[str], FORMAT), ("skip_invalid", bool, SKIP), ("merge", Optional[list[str]], MERGE),
                ("window", Optional[str], WINDOW), ("filter_prompt", Optional[str], FPROMPT),
                ("filter_output", Optional[str], FOUTPUT), ("clip_prompt", Optional[int], CPROMPT),
                ("clip_output", Optional[int], COUTPUT), ("first", Optional[int], FIRST),
                ("sample", Optional[int], SAMPLE), ("seed", int, SEED), ("rescale_qps", Optional[float], RESCALE))


def reads_trace(arg: str):
    """Decorate a command taking `trace: Trace`: it takes the trace argument `arg` and the transform
    options instead, and gets the trace `load` makes of them."""

    def deco(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.name != "trace"]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=ann, default=opt)
                 for name, ann, opt in LOAD_OPTIONS]

        @functools.wraps(fn)
        def wrapper(**kwargs):
            opts = [kwargs.pop(name) for name, _, _ in LOAD_OPTIONS]
            return fn(**kwargs, trace=load(kwargs[arg], *opts))

        wrapper.__signature__ = sig.replace(parameters=[*own, *added])  # what typer reads
        return wrapper

    return deco


def _range(opt: str, text: str | None, cast=float, open_end: bool = False) -> tuple | None:
    """`MIN:MAX` (either side may be empty); MIN after MAX (or equal, for a half-open range) selects
    nothing, so it is a bad value rather than an empty result."""
    if text is None:
        return None
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            raise ValueError
        r = (cast(lo) if lo.strip() else None, cast(hi) if hi.strip() else None)
    except ValueError:
        raise SpecError(f"{opt} {text!r}: expected MIN:MAX (either side may be empty)") from None
    if None not in r and (r[0] >= r[1] if open_end else r[0] > r[1]):
        raise SpecError(f"{opt} {text}: the end must be {'after' if open_end else 'at least'} the start")
    return r


def _count(opt: str, n: int | None) -> None:
    if n is not None and n < 1:
        raise SpecError(f"{opt} must be >= 1 (got {n})")


def _nonempty(t: Trace, path: str, step: str) -> Trace:
    """A transform that leaves no request ends the command here, naming that transform."""
    if len(t) == 0:
        raise InputError(path, None, None, f"no requests left after {step}")
    return t


def load(path: str, format: str | None, skip_invalid: bool, merge: list[str] | None = None,
         window: str | None = None, filter_prompt: str | None = None, filter_output: str | None = None,
         clip_prompt: int | None = None, clip_output: int | None = None, first: int | None = None,
         sample: int | None = None, seed: int = 0, rescale_qps: float | None = None) -> Trace:
    """Read (and report skips), then apply the transform options in their documented order.

    Options are checked before the (possibly long) read; the result always has a request."""
    w = _range("--window", window, open_end=True)
    fp, fo = _range("--filter-prompt", filter_prompt, int), _range("--filter-output", filter_output, int)
    _count("--first", first)
    _count("--sample", sample)
    if first is not None and sample is not None:
        raise SpecError("--first and --sample: give one of them")
    t = _read(path, format, skip_invalid)
    if merge:
        t = T.merge([t] + [_read(p, None, skip_invalid) for p in merge])
    if w is not None:
        t = _nonempty(T.window(t, w[0] or 0.0, w[1]), path, f"--window {window}")
    if fp or fo:
        t = T.filter_lengths(t, *(fp or (None, None)), *(fo or (None, None)))
        given = [f"{o} {v}" for o, v in (("--filter-prompt", filter_prompt), ("--filter-output", filter_output)) if v]
        t = _nonempty(t, path, " ".join(given))
    if clip_prompt is not None or clip_output is not None:
        t = T.clip_lengths(t, clip_prompt, clip_output)
    if first is not None:
        t = T.first(t, first)
    if sample is not None:
        t = T.sample(t, sample, seed)
    if rescale_qps is not None:
        t = T.rescale_qps(t, rescale_qps)
    return t


def _read(path: str, format: str | None, skip_invalid: bool) -> Trace:
    t = read_trace(path, format=format, skip_invalid=skip_invalid)
    for line in notes(path, t):
        typer.echo(line, err=True)
    return t


def _fmt(x, digits=0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


@app.command(epilog="Examples:\n\n  spsim trace stats mooncake\n\n  spsim trace stats azure-conv --json")
@reads_trace("path")
def stats(path: str = typer.Argument(..., help=PATH_HELP),
          json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."), trace: Trace = None):
    """Count, span, QPS and prompt/output length percentiles of a trace."""
    s = trace_stats(trace)
    if json_out:
        typer.echo(json.dumps(s, indent=2))
        return
    head = Table(title=f"{path} ({s['source_format']})", show_header=False)
    head.add_row("requests", f"{s['count']:,}")
    head.add_row("span", f"{s['span_s']:,.1f} s")
    head.add_row("QPS", _fmt(s["qps"], 3))
    if "prefix" in s:
        p = s["prefix"]
        head.add_row("prefix blocks", f"{p['blocks']:,} of {p['block_size']} tokens, {p['unique_blocks']:,} unique "
                     f"({p['repeat_fraction']:.1%} repeats)")
    if "slo_requests" in s:
        head.add_row("requests with an SLO", f"{s['slo_requests']:,}")
    if "extra_columns" in s:
        head.add_row("extra columns", ", ".join(s["extra_columns"]))
    head.add_row("skipped rows", f"{s['skipped_total']:,}" + "".join(f"\n  {c:,} {r}" for r, c in s["skipped"].items()))
    if s["warnings_total"]:
        head.add_row("warnings", f"{s['warnings_total']:,} rows" + "".join(f"\n  {c:,} {r}" for r, c in s["warnings"].items()))
    out.print(head)
    lens = Table(title="tokens per request")
    for c in ("", "min", "p50", "mean", "p90", "p99", "max"):
        lens.add_column(c, justify="right")
    for k in ("prompt_tokens", "output_tokens"):
        d = s[k]
        lens.add_row(k.split("_")[0], *(_fmt(d[q], 1 if q == "mean" else 0) for q in ("min", "p50", "mean", "p90", "p99", "max")))
    out.print(lens)


@app.command(epilog="Examples:\n\n  spsim trace convert mooncake mooncake-10min.jsonl --window 0:600 --rescale-qps 5\n\n  spsim trace convert azure-conv az.jsonl.gz --first 1000 --skip-invalid")
@reads_trace("src")
def convert(src: str = typer.Argument(..., help=PATH_HELP),
            dst: str = typer.Argument(..., help="Output canonical JSONL ('-' for stdout, .gz to compress)."),
            trace: Trace = None):
    """Convert any supported trace to canonical JSONL (source columns the schema lacks go to `extra`)."""
    _write(trace, dst)


def _write(t: Trace, dst: str) -> None:
    if dst == "-":
        for line in iter_lines(t):
            sys.stdout.write(line + "\n")
        return
    write_trace(t, dst)
    typer.echo(f"wrote {len(t):,} requests to {dst}", err=True)


@app.command(epilog="Examples:\n\n  spsim trace gen long.jsonl --preset long-doc-qa -n 2000 --qps 1.5 --seed 1\n\n  spsim trace gen t.jsonl -n 500 --qps 4 --prompt uniform:low=2000,high=30000 --output uniform:low=20,high=120")
def gen(dst: str = typer.Argument(..., help="Output canonical JSONL ('-' for stdout)."),
        preset: Optional[str] = typer.Option(None, "--preset", help=f"Long-context preset: {', '.join(PRESETS)} (its specs are defaults; options below override)."),
        n: int = typer.Option(1000, "--n", "-n", help="Number of requests."),
        qps: float = typer.Option(1.0, "--qps", help="Mean arrival rate (requests/s)."),
        arrival: Optional[str] = typer.Option(None, "--arrival", help="poisson (default) or gamma."),
        cv: Optional[float] = typer.Option(None, "--cv", help="Gamma arrivals only (with --arrival gamma or a gamma preset): coefficient of variation of the gaps (>1 burstier)."),
        prompt: Optional[str] = typer.Option(None, "--prompt", help="Prompt length spec, e.g. lognormal:median=8000,sigma=0.8 | fixed:value=4000 | uniform:low=1000,high=9000 | zipf:a=1.5,min=16,max=32768 | resample:trace=mooncake."),
        output: Optional[str] = typer.Option(None, "--output", help="Output length spec (same forms as --prompt)."),
        seed: int = typer.Option(0, "--seed", help="Random seed (same seed and options => identical trace)."),
        slo_ttft: Optional[float] = typer.Option(None, "--slo-ttft", help="Attach a TTFT SLO (s) to every request."),
        slo_tpot: Optional[float] = typer.Option(None, "--slo-tpot", help="Attach a TPOT SLO (s) to every request.")):
    """Generate a synthetic trace (Poisson/Gamma arrivals, length specs, or a named long-context preset)."""
    _count("-n", n)
    for opt, v in (("--qps", qps), ("--cv", cv), ("--slo-ttft", slo_ttft), ("--slo-tpot", slo_tpot)):
        if v is not None and not 0 < v < float("inf"):  # also NaN; a negative SLO would write an unreadable trace
            raise SpecError(f"{opt} must be a finite number > 0 (got {v})")
    p = {"arrival": "poisson", "cv": 1.0, "prompt": "lognormal:median=8000,sigma=0.8",
         "output": "lognormal:median=256,sigma=0.8"}
    if preset is not None:
        if preset not in PRESETS:
            raise SpecError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        p.update({k: v for k, v in PRESETS[preset].items() if k != "about"})
    given = {"arrival": arrival, "cv": cv, "prompt": prompt, "output": output}
    if arrival is not None and cv is None:
        p["cv"] = 1.0  # a preset's CV belongs to its own arrival process
    p.update({k: v for k, v in given.items() if v is not None})
    if cv is not None and p["arrival"] != "gamma":  # Poisson gaps always have CV 1: --cv would be ignored
        raise SpecError(f"--cv {cv:g} needs --arrival gamma (arrivals are {p['arrival']}, whose gaps have CV 1)")
    t = generate(n, qps, p["arrival"], p["cv"], p["prompt"], p["output"], seed, slo_ttft, slo_tpot)
    if preset is not None:
        t.meta["preset"] = preset
    _write(t, dst)


@app.command(epilog="Examples:\n\n  spsim trace head mooncake -n 5\n\n  spsim trace head azure-conv --jsonl -n 3")
@reads_trace("path")
def head(path: str = typer.Argument(..., help=PATH_HELP), n: int = typer.Option(10, "--n", "-n", help="Rows to show."),
         jsonl: bool = typer.Option(False, "--jsonl", help="Print canonical JSONL lines (with header) instead of a table."),
         trace: Trace = None):
    """Show the first N requests (after any transforms)."""
    _count("-n", n)
    t = T.first(trace, n)
    if jsonl:
        for line in iter_lines(t):
            typer.echo(line)
        return
    tab = Table(title=f"{path}: first {len(t)} requests")
    for c in ("id", "arrival_s", "prompt", "output"):
        tab.add_column(c, justify="right")
    if t.prefix_indptr is not None:
        tab.add_column("prefix blocks", justify="right")
    if t.slo_ttft_s is not None:
        tab.add_column("slo ttft/tpot s", justify="right")
    for k in t.extra:
        tab.add_column(k)
    for i in range(len(t)):
        row = [str(t.ids[i]), f"{t.arrival_s[i]:.3f}", f"{t.prompt_tokens[i]:,}", f"{t.output_tokens[i]:,}"]
        if t.prefix_indptr is not None:
            row.append(str(len(t.prefix_blocks(i))))
        if t.slo_ttft_s is not None:
            row.append(f"{t.slo_ttft_s[i]:g}/{t.slo_tpot_s[i]:g}")
        row += [str(v[i]) for v in t.extra.values()]
        tab.add_row(*row)
    out.print(tab)
