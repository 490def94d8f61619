"""`spsim acceptance show PRESET`, `spsim acceptance sample`, `spsim acceptance fit EVENTS -o preset.json`."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from spsim.errors import SpsimError
from spsim.events import read_events, write_events
from spsim.plan import DraftMethod

from spsim.acceptance import curves
from spsim.acceptance.curves import sample_events


def _presets():
    """The presets module, imported when a command runs (it brings scipy)."""
    from spsim.acceptance import presets

    return presets


def list_presets():
    return _presets().list_presets()


def load_preset(name):
    return _presets().load_preset(name)


def make_acceptance(spec, seed):
    return _presets().make_acceptance(spec, seed)


def preset_params(name):
    return _presets().preset_params(name)


def resolve(spec):
    return _presets().resolve(spec)

app = typer.Typer(no_args_is_help=True, help="Show, sample and fit acceptance models.")
console = Console()

SPEC_HELP = "Preset or spec, e.g. sparsespec-llama8b or sparsespec-llama8b:temperature=0.7 (see `spsim acceptance list`)."


def _examples(*lines: str) -> str:
    return "Examples:\n\n" + "\n\n".join(f"  {x}" for x in lines)


def _at_least(low: int, **opts) -> None:
    """Each given option (None: not given) must be >= low; one line naming the option otherwise."""
    for name, v in opts.items():
        if v is not None and v < low:
            raise SpsimError(f"--{name.replace('_', '-')} must be >= {low} (got {v})")


def _out_file(path: Path, option: str = "-o") -> None:
    """Fail before the work if `path` could not be written (one line naming it)."""
    from spsim.cli_options import check_out_dir

    if path.is_dir():
        raise SpsimError(f"{option} {path}: is a folder, not a file")
    check_out_dir(path.parent, (path.name,), label=f"{option} {path}")
    if not path.parent.is_dir():
        raise SpsimError(f"{option} {path}: folder {path.parent} does not exist")


def _setting_text(setting: dict) -> str:
    return (f"{setting['method']} draft KV, context {setting['context']:,}, budget {setting['budget']:,} tokens, "
            f"{setting['output_tokens']} output tokens")


def _reference(spec: str) -> dict:
    _, _, preset = resolve(spec)
    if preset is None:
        return {"method": "verify-quest", "context": 32768, "budget": 3277, "output_tokens": 128}
    return {"output_tokens": 128, **preset["reference"]}


def _method(text: str | None, ref: dict) -> int:
    try:
        return int(DraftMethod.parse(text or ref["method"]))
    except ValueError as e:
        raise SpsimError(str(e)) from None


@app.command("list", epilog=_examples("spsim acceptance list"))
def list_cmd():
    """Presets, with what each stands for."""
    t = Table("preset", "description")
    for n in list_presets():
        t.add_row(n, load_preset(n)["description"])
    console.print(t)


@app.command(epilog=_examples("spsim acceptance show sparsespec-llama8b",
                              "spsim acceptance show magicdec-pg19-llama8b --context 65536 --k-max 8 --json"))
def show(spec: str = typer.Argument(..., help=SPEC_HELP),
         k_max: int = typer.Option(20, help="Longest draft shown."),
         method: str = typer.Option(None, help="Draft-KV method (default: the preset's)."),
         context: int = typer.Option(None, help="Context tokens (default: the preset's)."),
         budget: int = typer.Option(None, help="Sparse draft budget in tokens (default: the preset's)."),
         requests: int = typer.Option(1000, help="Requests simulated per point."),
         seed: int = typer.Option(0, help="Seed of the acceptance draws."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables.")):
    """Per-position acceptance, expected accepted length against k, and entropy AUC."""
    _at_least(1, k_max=k_max, requests=requests, context=context, budget=budget)
    ref = _reference(spec)
    make_acceptance(spec, seed)  # validate the spec before simulating
    setting = {"method": _method(method, ref), "context": context or ref["context"],
               "budget": budget or ref["budget"], "output_tokens": ref["output_tokens"]}
    kw = dict(n_requests=requests, output_tokens=setting["output_tokens"], context=setting["context"],
              budget=setting["budget"], method=setting["method"])
    pc = curves.position_curve(make_acceptance(spec, seed), k_max, **kw)
    ks = [k for k in (1, 2, 4, 6, 8, 12, 16, 20, 24, 32) if k <= k_max]
    ek = curves.expected_accepted(make_acceptance(spec, seed), ks, **kw)
    m = make_acceptance(spec, seed)
    auc = getattr(m, "auc", None) or getattr(getattr(m, "params", None), "auc", None)
    # the position table comes from runs of k_max drafts; each by-k row from runs of its own k (a
    # position's acceptance depends on the run it sits in, so position 0 here is not row k = 1 there)
    out = {"spec": spec, "seed": seed, "setting": {**setting, "method": DraftMethod(setting["method"]).label},
           "position": {"k": k_max, **pc}, "by_k": ek, "entropy_auc": auc}
    if as_json:
        typer.echo(json.dumps(out, indent=1))
        return
    t = Table("draft pos j", "P(j accepted | 0..j-1)", "P(0..j accepted)",
              title=f"{spec}: {_setting_text(out['setting'])}; by draft position in runs of k = {k_max} drafts")
    for j, c, s in zip(pc["j"], pc["conditional"], pc["survival"]):
        t.add_row(str(j), f"{c:.3f}", f"{s:.3f}")
    console.print(t)
    t = Table("k", "E\\[accepted]", "E\\[accepted/k]", "tokens/verify", title="fixed-k decoding, each row from "
              "runs of its own k", caption=f"(the table above is from runs of k = {k_max}: its position 0 is not "
              "this table's k = 1)")  # \\[ escapes rich markup
    for k, a, f in zip(ek["k"], ek["mean_accepted"], ek["acceptance_fraction"]):
        t.add_row(str(k), f"{a:.2f}", f"{f:.3f}", f"{a + 1:.2f}")
    console.print(t)
    console.print(f"entropy AUC for acceptance: {auc}")


@app.command(epilog=_examples("spsim acceptance sample sparsespec-llama8b -o events.jsonl --k 8",
                              "spsim acceptance fit events.jsonl -o fitted.json   # fit a preset back"))
def sample(spec: str = typer.Argument(..., help=SPEC_HELP),
           out: Path = typer.Option(..., "-o", help="Accept-events JSONL to write."),
           k: int = typer.Option(8, help="Drafts per verification (fixed-k decoding)."),
           requests: int = typer.Option(200, help="Requests to decode."),
           output_tokens: int = typer.Option(128, help="Output tokens per request (at least 2: the first "
                                             "token is never drafted)."),
           method: str = typer.Option(None, help="Draft-KV method (default: the preset's)."),
           context: int = typer.Option(None, help="Context tokens (default: the preset's)."),
           budget: int = typer.Option(None, help="Sparse draft budget in tokens (default: the preset's)."),
           seed: int = typer.Option(0, help="Seed of the acceptance draws.")):
    """Write the accept events a fixed-k decoder would record under SPEC (for trying `fit`)."""
    _at_least(1, k=k, requests=requests, context=context, budget=budget)
    _at_least(2, output_tokens=output_tokens)
    _out_file(out)
    ref = _reference(spec)
    ev = sample_events(make_acceptance(spec, seed), k, requests, output_tokens, context or ref["context"],
                       budget or ref["budget"], _method(method, ref))
    write_events(out, ev, {"source": f"spsim acceptance sample {spec} k={k} seed={seed}"})
    console.print(f"wrote {len(ev['out_pos'])} events to {out}")


@app.command(epilog=_examples("spsim acceptance fit events.jsonl -o fitted.json",
                              "spsim acceptance fit events.jsonl -o fitted.json --holdout-by text=doc3   # hold out one text",
                              "spsim acceptance fit events.jsonl -o fitted.json --holdout-by dataset --folds 5",
                              "spsim replay mooncake --limit 200 --acceptance file:path=fitted.json   # use it"))
def fit(events: Path = typer.Argument(..., help="Accept-events JSONL (from `spsim run --out` or `acceptance sample`)."),
        out: Path = typer.Option(..., "-o", help="Preset JSON to write."),
        base: str = typer.Option("sparsespec-llama8b", help="Preset giving the parameters the events cannot identify."),
        name: str = typer.Option(None, help="Preset name (default: the output file's stem)."),
        holdout: float = typer.Option(0.2, help="Share of groups (request windows, or --holdout-by FIELD's values) "
                                      "held out for the report, in [0, 1)."),
        holdout_by: str = typer.Option(None, "--holdout-by", help="FIELD=VALUE: hold out the events whose FIELD is "
                                       "VALUE (a text, a dataset, a time range you labelled); FIELD: group by FIELD "
                                       "and hold out --holdout of its values. Default: by request window."),
        folds: int = typer.Option(0, help="Also cross-validate with this many folds by group (each fold fits "
                                  "again): held-out log-likelihood per fold and the parameters' spread."),
        model: str = typer.Option("auto", "--model", help="auto (select on held-out requests), or force one of "
                                  "constant, position, latent (still scored and reported)."),
        bootstrap: int = typer.Option(400, help="Bootstrap replicates for the interval of the mean accepted length "
                                      "per k (groups, then requests within them; 0: none)."),
        as_json: bool = typer.Option(False, "--json", help="Print the fit's report as JSON (it is also in the "
                                     "preset's `fit`) instead of the summary.")):
    """Fit acceptance models to recorded accept events, select one on held-out requests, write it as a preset.

    Candidates: a constant rate per method and budget, a rate per draft position, the latent model;
    the one that predicts held-out requests' accepted lengths best is kept (a more complex one only
    if it gains, and the latent one only if its fit stays inside its bounds), refitted on all events,
    with a bootstrap interval of the mean accepted length per k.

    Reused request ids (several runs or experiments in one file) are kept apart as windows, reported;
    interleaved reuse is rejected naming the line. Tokens after a run's first rejection are censored
    by the fit (write them or not). The report sets the fit against baselines on held-out groups, for
    every method and budget present."""
    from spsim.acceptance.fit import Baselines, fit as do_fit, kfold
    from spsim.acceptance.select import candidates, select

    if not 0 <= holdout < 1:  # also rejects NaN
        raise SpsimError(f"--holdout must be in [0, 1) (got {holdout})")
    _at_least(0, folds=folds, bootstrap=bootstrap)
    from spsim.acceptance.select import CANDIDATES

    if model != "auto" and model not in CANDIDATES:
        raise SpsimError(f"--model {model!r}: expected auto, {', '.join(CANDIDATES)}")
    if folds == 1:
        raise SpsimError("--folds must be 0 (off) or >= 2 (got 1)")
    _out_file(out)
    ev = read_events(events)
    field, value, labels = _groups(events, ev, holdout_by)
    if value is not None:
        test = np.asarray([x is not None and str(x) == value for x in labels], bool)
        if not test.any():
            seen = sorted({str(x) for x in labels if x is not None})
            raise SpsimError(f"--holdout-by {holdout_by}: no event has {field} = {value!r} "
                             f"(values: {', '.join(seen[:10])}{' ...' if len(seen) > 10 else ''})")
    else:
        test = _held_out_groups(labels, holdout)
    train = ev.take(~test)
    if not len(train):
        raise SpsimError(f"{events}: no training events after the hold-out split (--holdout-by {holdout_by})")
    base_p = preset_params(base)
    cands = candidates(train, base_p)
    params, rep = cands["latent"]["params"], cands["latent"]["report"]
    selection = select(cands, train, ev.take(test) if test.any() else None, None if model == "auto" else model)
    inf = ev.informative()
    data = {"events": len(ev), "windows": ev.meta["windows"], "request_ids": ev.meta["request_ids"],
            "reused_request_ids": ev.meta["reused_ids"],
            "informative_tokens": int(inf.sum()), "censored_tokens": int((~inf).sum()),
            "padding": ev.padding(), "train_events": len(train), "train_tokens": rep["tokens"],
            "train_windows": rep["windows"], "heldout_events": int(test.sum()),
            "methods": {DraftMethod(int(m)).label: int(c) for m, c in zip(*np.unique(ev.method, return_counts=True))}}
    if ev.meta["reused_ids"]:
        data["reused_note"] = (f"{ev.meta['reused_ids']} request id(s) start over in the file (several runs or "
                               "experiments): each use is its own window (labelled id#2, id#3 ...)")
    report = {"data": data, "train": rep}
    if test.any():
        te = ev.take(test)
        report["heldout"] = _heldout_report(params, base_p, Baselines(train), ev, te, field, value)
    if folds:
        report["kfold"] = {"by": field or "request window", **kfold(ev, labels, folds, base_p)}
    chosen = selection["chosen"]
    final, rates, refit = _final_model(chosen, ev, train, test, params, base_p, do_fit)
    report["selection"] = {**selection, "refitted_on": "all events" if test.any() else "the training events",
                           **({"refit": refit} if refit else {})}
    few = _few_note(data, selection)
    if few:
        report["selection"]["few_data"] = few
    block = _interval(ev, labels if field else None, chosen, final, rates, bootstrap)
    d = {"name": name or out.stem, "description": f"fitted to {events.name}; selected model: {chosen}",
         "model": "", "workload": "", "reference": {**load_preset(base)["reference"],
                                                    "method": DraftMethod(int(np.bincount(ev.method).argmax())).label,
                                                    "context": int(np.median(ev.context)), "budget": int(np.median(ev.budget))},
         "acceptance_model": chosen, **({"rates": rates} if rates else {}),
         "params": asdict(final), **({"interval": block} if block else {}), "fit": report,
         "evidence": f"{len(ev)} recorded accept events ({events.name}); unfitted parameters from {base}",
         "beyond_evidence": "Replaying the events themselves is exact only for the draft lengths they were recorded "
                            "with; this fitted model extrapolates to other draft lengths, contexts and methods.",
         "stated": {}}
    out.write_text(json.dumps(d, indent=1, default=float) + "\n")
    if as_json:  # the report only, so it parses; the summary below says the same in words
        typer.echo(json.dumps(report, indent=1, default=float))
        return
    if not rep["converged"]:
        console.print(f"[yellow]fit did not converge: {rep['status']}[/]")
    _print_selection(selection, block, few, test.any())
    console.print(f"used {rep['tokens']:,} informative tokens of {len(train):,} training events in "
                  f"{rep['windows']:,} windows ({data['events']:,} events, {data['windows']:,} windows, "
                  f"{data['request_ids']:,} request ids in the file); wrote {out} (the full report: its `fit`, "
                  f"or --json)")


def _final_model(chosen, ev, train, test, params, base_p, do_fit):
    """(latent params, rate table or None, the latent refit's status or None) of the chosen model,
    refitted on every event (the hold-out served the choice; the preset gets all the evidence)."""
    from spsim.acceptance.fit import fit_entropy
    from spsim.acceptance.rates import fit_rates

    from dataclasses import replace

    ent = fit_entropy(ev) if test.any() else {}
    if chosen == "latent":
        if not test.any():
            return params, None, None
        final, rep = do_fit(ev, base_p)
        return final, None, {k: rep[k] for k in ("converged", "at_bounds", "status", "tokens", "windows")}
    return (replace(params, **ent) if ent else params), fit_rates(ev if test.any() else train, chosen), None


def _few_note(data: dict, selection: dict) -> str:
    """Say so when the events are too few for the choice and interval to mean much."""
    w, runs = data["windows"], selection["heldout_runs"]
    if w >= 40 and runs >= 100:
        return ""
    return (f"few data: {w} request windows ({runs} held-out runs); the choice and the interval rest on few "
            f"requests (the interval's requests_for says how many to record for a given precision)")


def _interval(ev, labels, chosen, params, rates, replicates: int) -> dict | None:
    """The bootstrap interval of the chosen model's mean accepted length per k (or None)."""
    if not replicates:
        return None
    from spsim.acceptance import bootstrap as B

    if rates is not None:
        from spsim.acceptance.rates import RateAcceptance

        m = RateAcceptance(rates)

        def model_curve(method, budget, context, ks):
            p = m.rates(method, budget)
            p = np.concatenate([p, np.full(max(ks) - len(p), p[-1])]) if len(p) < max(ks) else p
            return np.cumsum(np.cumprod(p))[[k - 1 for k in ks]]
    else:
        from spsim.acceptance.latent import LatentAcceptance

        def model_curve(method, budget, context, ks):
            return curves.expected_accepted(LatentAcceptance(params, seed=0), ks, n_requests=300, output_tokens=64,
                                            context=context, budget=budget, method=method)["mean_accepted"]
    return B.interval(ev, labels, model_curve, replicates=replicates, kind=chosen)


def _print_selection(selection: dict, block: dict | None, few: str, heldout: bool) -> None:
    console.print(f"selected model: {selection['reason']}")
    if few:
        console.print(f"[yellow]{few}[/]")
    for c in (block or {}).get("cells", []):
        k = c["requests_for"]["k"]
        i = c["k"].index(k)
        line = (f"{c['method']} budget {c['budget']}: mean accepted at k={k} {c['mean_accepted'][i]:.3f} "
                f"[{c['lo'][i]:.3f}, {c['hi'][i]:.3f}] (95 %, {block['replicates']} bootstrap replicates over "
                f"{block['groups']} {'groups' if block['by'] == 'label' else 'request windows'})")
        if "new_group" in c:
            ng = c["new_group"]
            line += f"; a new group: [{ng['lo'][i]:.3f}, {ng['hi'][i]:.3f}]"
        rf = c["requests_for"]
        line += ("; requests to record for +/-10 % / 5 % / 2 %: "
                 f"{rf['10%']:,} / {rf['5%']:,} / {rf['2%']:,} (now {c['windows']:,}: +/-{rf['half_width_rel_now']:.1%})")
        console.print(line)


def _groups(path: Path, ev, holdout_by: str | None):
    """(field, value or None, label per event) for the hold-out and the folds."""
    if holdout_by is None:
        return None, None, np.asarray([str(ev.names[w]) for w in ev.request.tolist()], dtype=object)
    field, eq, value = holdout_by.partition("=")
    field = field.strip()
    if not field or (eq and not value):
        raise SpsimError(f"--holdout-by {holdout_by!r}: expected FIELD or FIELD=VALUE")
    if field == "request":
        labels = np.asarray([str(ev.names[w]) for w in ev.request.tolist()], dtype=object)
    elif field in ev.extra:
        labels = ev.extra[field]
    elif field in ("method", "budget", "context", "out_pos", "draft_pos"):
        col = getattr(ev, field)
        labels = (np.asarray([DraftMethod(int(m)).label for m in col.tolist()], dtype=object) if field == "method"
                  else col.astype(str).astype(object))
    else:
        known = sorted(ev.extra) + ["request", "method", "budget", "context"]
        raise SpsimError(f"{path}: --holdout-by {holdout_by}: no event has a field {field!r} "
                         f"(fields to group by: {', '.join(known)})")
    return field, (value if eq else None), labels


def _held_out_groups(labels, share: float) -> np.ndarray:
    """Events of round(share x groups) groups (at least one when share > 0 and there are two or
    more), chosen by a hash of the group label: the same split whatever the file order."""
    from spsim.acceptance.fit import group_folds

    if share <= 0:
        return np.zeros(len(labels), bool)
    uniq = np.unique(np.asarray([str(x) for x in labels], dtype=object))
    n_out = min(max(1, round(share * len(uniq))), len(uniq) - 1)
    rank = group_folds(labels, 1 << 30)  # the hash rank of each event's group
    return rank < n_out


def _heldout_report(params, base_p, baselines, ev, te, field, value) -> dict:
    """Held-out log-likelihood per token (fitted, base preset, baselines) overall and for every
    (method, budget) in the file, with the accepted-length check per recorded draft length."""
    from spsim.acceptance.entropy import empirical_auc
    from spsim.acceptance.fit import heldout_loglik

    inf = te.informative() & np.isfinite(te.entropy)
    out = {"by": field or "request window", **({"value": value} if value is not None else {}),
           "tokens": int(te.informative().sum()),
           "loglik_per_token_fitted": heldout_loglik(params, te),
           "loglik_per_token_base": heldout_loglik(base_p, te),
           **{f"loglik_per_token_{k}_baseline": v for k, v in baselines.loglik(te).items()},
           "entropy_auc_observed": empirical_auc(te.entropy[inf], te.accepted[inf]),
           "entropy_auc_fitted": params.auc, "groups": []}
    padding = ev.padding()
    for m, b in sorted({(int(m), int(b)) for m, b in zip(ev.method.tolist(), ev.budget.tolist())}):
        sel = (te.method == m) & (te.budget == b)
        row = {"method": DraftMethod(m).label, "budget": b, "heldout_events": int(sel.sum())}
        if not sel.any():
            row["note"] = "no held-out events with this method and budget (all in training)"
            out["groups"].append(row)
            continue
        g = te.take(sel)
        row.update({"tokens": int(g.informative().sum()), "median_context": int(np.median(g.context)),
                    "loglik_per_token_fitted": heldout_loglik(params, g),
                    "loglik_per_token_base": heldout_loglik(base_p, g),
                    **{f"loglik_per_token_{k}_baseline": v for k, v in baselines.loglik(g).items()}})
        if padding == "unpadded":
            row["accepted_length"] = None
            row["accepted_length_note"] = ("events stop at each run's first rejection and carry no `drafted` "
                                           "field, so a rejected run's draft length is unknown: add `drafted` "
                                           "(the run's draft length) to each event for this check")
        else:
            drafted, accepted = g.runs()
            row["accepted_length"] = _length_report(params, g, drafted, accepted, m, b)
        out["groups"].append(row)
    return out


def _length_report(params, te, drafted, accepted, method: int, budget: int) -> list[dict]:
    """Observed vs fitted accepted-length distribution for each recorded draft length (>= 20 runs)."""
    from spsim.acceptance.latent import LatentAcceptance

    rows = []
    for k in np.unique(drafted):
        sel = drafted == k
        if k < 1 or sel.sum() < 20:
            continue
        sim = curves.fixed_k_runs(LatentAcceptance(params, seed=1), int(k), 400, 128, int(np.median(te.context)),
                                  budget, method)
        s = sim["accepted"][sim["drafted"] == k]
        obs = np.bincount(accepted[sel], minlength=k + 1) / sel.sum()
        pred = np.bincount(s, minlength=k + 1) / max(len(s), 1)
        rows.append({"k": int(k), "runs": int(sel.sum()), "mean_observed": float(accepted[sel].mean()),
                     "mean_fitted": float(s.mean()) if len(s) else math.nan,
                     "total_variation": float(0.5 * np.abs(obs - pred).sum())})
    return rows
