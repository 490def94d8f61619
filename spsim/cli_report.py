"""What every command that serves a trace prints: the trace loaded with its notes, the summary
table, warnings about what limited a run. Shared by `replay`/`compare` (simulator) and `run`
(runtime); imports neither world."""

from __future__ import annotations

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .errors import SpsimError

err_console = Console(stderr=True, highlight=False, soft_wrap=True)

DEFAULT_TRACE = "mooncake"


def load_trace(trace_path: str | None, fmt: str | None, limit: int | None, skip_invalid: bool = False):
    """Read the trace (rows skipped or flagged while reading: one stderr line each, by reason) and
    keep its first `limit` requests."""
    from spsim.traces import read_trace
    from spsim.traces.report import notes

    if limit is not None and limit < 1:
        raise SpsimError(f"--limit must be >= 1 (got {limit})")
    path = trace_path or DEFAULT_TRACE
    tr = read_trace(path, format=fmt, skip_invalid=skip_invalid)
    for line in notes(path, tr):
        typer.echo(line, err=True)
    if limit is not None:
        tr = tr.take(np.arange(min(limit, len(tr))))
    return tr


REJECT_WHY = {"context_window": "prompt + output longer than the model's context window",
              "kv_capacity": "more KV than a replica can ever hold"}


def run_notes(s: dict) -> list[str]:
    """What limited a run, worded for the terminal: requests rejected, KV memory capping the batch,
    overload or near-zero goodput (the summary's `memory_note` and `overload_note`)."""
    notes = []
    if s.get("rejected"):
        why = "; ".join(f"{n} {r} ({REJECT_WHY.get(r, r)})" for r, n in s.get("rejected_reasons", {}).items())
        head = "no request completed" if not s.get("completed") else f"{s['rejected']:,} requests rejected"
        notes.append(f"{head}: {why}")
    return notes + [n for n in (s.get("memory_note"), s.get("overload_note")) if n]


def setting_notes(cfg, requests: int, specs: list[str] | None = None, longest: int | None = None) -> list[str]:
    """Settings that run but cannot do what they say, worded before the run: replicas no request
    reaches, a policy's draft length above --max-draft (the batcher verifies there anyway), and
    (`longest`: the longest request's prompt + output tokens, for a real run) a draft budget that
    covers every context, so no draft is sparse."""
    from spsim.policies.registry import parse_policy

    notes = []
    if cfg.replicas > requests:
        idle = cfg.replicas - requests
        notes.append(f"--replicas {cfg.replicas:,} for {requests:,} request{'s' * (requests != 1)}: {idle:,} "
                     f"replica{'s' * (idle != 1)} never get{'s' * (idle == 1)} one")
    for spec in specs or [cfg.policy]:
        for key, v in parse_policy(spec).params:
            if key in ("k", "k_max") and isinstance(v, int) and v > cfg.max_draft:
                notes.append(f"{spec}: {key}={v:,} is above --max-draft {cfg.max_draft}, where the batcher verifies "
                             f"anyway: no run is longer than {cfg.max_draft} drafts (raise --max-draft for longer)")
    if longest is not None and cfg.policy != "ar" and cfg.draft_budget >= longest:
        notes.append(f"drafts are not sparse: --draft-budget {cfg.draft_budget:,} tokens covers every request's whole "
                     f"context (longest {longest:,} tokens), so drafting reads the full KV and acceptance says nothing "
                     f"about sparse drafting (lower --draft-budget, e.g. 128)")
    return notes


def cost_note(c: dict) -> str:
    """Which cost model priced a run, in one line (`c`: a summary's `config`, or a compare row)."""
    from pathlib import Path

    name, prof = c.get("cost_model"), c.get("profile")
    if name == "roofline" and not prof:
        return "costs: analytic roofline (no measured profile shipped for this GPU and model, or --cost roofline)"
    what = f"costs: {name} profile {Path(prof).name if prof else ''}".rstrip()
    err = c.get("cost_heldout_error") or {}
    if err.get("median_abs_rel") is not None:
        what += (f" (pass time held out: median error {err['median_abs_rel']:.1%}, p95 "
                 f"{err['p95_abs_rel']:.1%})")
    if c.get("overlapped_runtime"):
        what += "; passes overlapped with the host's planning, arrivals seen a pass later"
    if c.get("padded_passes") not in (None, "none"):
        what += "; graphed passes padded as the runtime pads them"
    return what + "; --cost roofline for the analytic model"


def warn(lines, prefix: str = "") -> None:
    """Yellow warning lines on stderr (stdout stays a table or JSON)."""
    for line in lines:
        err_console.print(f"[yellow]warning:[/] {escape(prefix + line)}")


def _ms(v):
    return "-" if v is None else f"{v:,.1f}"


def slo_cell(ev: dict) -> str:
    """`met`/`missed` and each term's measured value (spsim.slo.SLO.evaluate)."""
    parts = []
    for t in ev["terms"]:
        if t["stat"] == "attain":
            parts.append(f"{t['attained']:.1%} attain")
        elif t["measured_s"] is not None:
            parts.append(f"{t['metric']} {t['stat']} {t['measured_s'] * 1e3:,.0f} ms")
    head = "[green]met[/]" if ev["met"] else "[red]missed[/]"
    return f"{head}  [dim]({'; '.join(parts)})[/]"


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
    if s.get("slo"):  # --slo: met or not, term by term
        rows.insert(4, ("SLO " + s["slo"]["slo"], slo_cell(s["slo"])))
    for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        rows.append((f"{m.replace('_ms', '').upper()} mean / p50 / p99 (ms)",
                     f"{_ms(s['mean_' + m])} / {_ms(s['median_' + m])} / {_ms(s['p99_' + m])}"))
    # a summary measured at a server's client (spsim bench serve) has no passes, pages or
    # verification counts: only the server's speculation counters
    if s.get("drafted_tokens") and "tokens_per_verify" in s:
        rows += [("draft acceptance rate", f"{s['draft_acceptance_rate']:.3f}"),
                 ("tokens per verification (all / with drafts)",
                  f"{s['tokens_per_verify']:.2f} / {s['spec_mean_accepted_per_verify'] + 1:.2f}"),
                 ("drafts per verification (with drafts)", f"{s['spec_drafts_per_verify']:.2f}")]
    elif s.get("drafted_tokens"):
        rows += [("draft acceptance rate (server's counters)", f"{s['draft_acceptance_rate']:.3f}"),
                 ("tokens per verification with drafts (server's)", f"{s['spec_mean_accepted_per_verify'] + 1:.2f}")]
    if "pass_time_s" in s:
        pt = s["pass_time_s"]
        tot = sum(pt.values()) or 1.0
        rows.append(("pass time: prefill / mixed / draft / verify",
                     " / ".join(f"{100 * pt[c] / tot:.0f}%" for c in ("prefill", "mixed", "draft", "verify"))))
    if "preemptions" in s:
        rows.append(("preemptions", f"{s['preemptions']:,}"))
    if s.get("prefix_cache_hit_rate") is not None:
        rep = s.get("prefix_cache_repeat_fraction")
        rows.append(("prefix cache hit rate (blocks)", f"{s['prefix_cache_hit_rate']:.1%}"
                     + (f"  [dim]({rep:.1%} of blocks repeat)[/]" if rep is not None else "")))
    if "kv_peak_pages" in s:
        rows.append(("KV pages peak / capacity", f"{s['kv_peak_pages']:,} / {s['kv_capacity_pages']:,}"))
    if s.get("peak_running_per_replica") is not None:
        asked = f"--max-batch {s['requested_max_batch']}"
        if s.get("requested_concurrency"):
            asked = f"--concurrency {s['requested_concurrency']}, " + asked
        rows.append(("peak running requests per replica", f"{s['peak_running']:,}  [dim]({asked})[/]"))
    for k, v in rows:
        t.add_row(k, v)
    return t
