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

from . import curves
from .curves import sample_events


def _presets():
    """The presets module, imported when a command runs (it brings scipy)."""
    from . import presets

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
    out = {"spec": spec, "seed": seed, "setting": {**setting, "method": DraftMethod(setting["method"]).label},
           "position": pc, "by_k": ek, "entropy_auc": auc}
    if as_json:
        typer.echo(json.dumps(out, indent=1))
        return
    t = Table("draft pos j", "P(j accepted | 0..j-1)", "P(0..j accepted)",
              title=f"{spec}: {_setting_text(out['setting'])}")
    for j, c, s in zip(pc["j"], pc["conditional"], pc["survival"]):
        t.add_row(str(j), f"{c:.3f}", f"{s:.3f}")
    console.print(t)
    t = Table("k", "E\\[accepted]", "E\\[accepted/k]", "tokens/verify", title="fixed-k decoding")  # \\[ escapes rich markup
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
                              "spsim replay mooncake --limit 200 --acceptance fitted.json   # use the fitted preset"))
def fit(events: Path = typer.Argument(..., help="Accept-events JSONL (from `spsim run --out` or `acceptance sample`)."),
        out: Path = typer.Option(..., "-o", help="Preset JSON to write."),
        base: str = typer.Option("sparsespec-llama8b", help="Preset giving the parameters the events cannot identify."),
        name: str = typer.Option(None, help="Preset name (default: the output file's stem)."),
        holdout: float = typer.Option(0.2, help="Fraction of requests held out for the report, in [0, 1).")):
    """Maximum-likelihood fit of a preset to recorded accept events, with a held-out report."""
    from .entropy import empirical_auc
    from .fit import fit as do_fit, heldout_loglik
    from .keyed import uniform

    if not 0 <= holdout < 1:  # also rejects NaN
        raise SpsimError(f"--holdout must be in [0, 1) (got {holdout})")
    _out_file(out)
    ev = read_events(events)
    test = uniform(12345, 0, ev.request, 0) < holdout  # split by request, keyed
    train = ev.take(~test)
    if not len(train):
        raise SpsimError(f"{events}: no training events after the hold-out split")
    base_p = preset_params(base)
    params, rep = do_fit(train, base_p)
    report = {"train": rep}
    if test.any():
        te = ev.take(test)
        inf = te.informative() & np.isfinite(te.entropy)
        drafted, accepted = te.runs()
        report["heldout"] = {
            "tokens": int(te.informative().sum()),
            "loglik_per_token_fitted": heldout_loglik(params, te),
            "loglik_per_token_base": heldout_loglik(base_p, te),
            "entropy_auc_observed": empirical_auc(te.entropy[inf], te.accepted[inf]),
            "entropy_auc_fitted": params.auc,
            "accepted_length": _length_report(params, te, drafted, accepted),
        }
    d = {"name": name or out.stem, "description": f"fitted by maximum likelihood to {events.name}",
         "model": "", "workload": "", "reference": {**load_preset(base)["reference"],
                                                    "method": DraftMethod(int(np.bincount(ev.method).argmax())).label,
                                                    "context": int(np.median(ev.context)), "budget": int(np.median(ev.budget))},
         "params": asdict(params), "fit": report,
         "evidence": f"{len(ev)} recorded accept events ({events.name}); unfitted parameters from {base}",
         "beyond_evidence": "Replaying the events themselves is exact only for the draft lengths they were recorded "
                            "with; this fitted model extrapolates to other draft lengths, contexts and methods.",
         "stated": {}}
    out.write_text(json.dumps(d, indent=1, default=float) + "\n")
    console.print_json(json.dumps(report, default=float))
    console.print(f"wrote {out}")


def _length_report(params, te, drafted, accepted) -> list[dict]:
    """Observed vs fitted accepted-length distribution for each recorded draft length (>= 20 runs)."""
    from .latent import LatentAcceptance

    rows = []
    for k in np.unique(drafted):
        sel = drafted == k
        if k < 1 or sel.sum() < 20:
            continue
        sim = curves.fixed_k_runs(LatentAcceptance(params, seed=1), int(k), 400, 128, int(np.median(te.context)),
                                  int(np.median(te.budget)), int(np.bincount(te.method).argmax()))
        s = sim["accepted"][sim["drafted"] == k]
        obs = np.bincount(accepted[sel], minlength=k + 1) / sel.sum()
        pred = np.bincount(s, minlength=k + 1) / max(len(s), 1)
        rows.append({"k": int(k), "runs": int(sel.sum()), "mean_observed": float(accepted[sel].mean()),
                     "mean_fitted": float(s.mean()) if len(s) else math.nan,
                     "total_variation": float(0.5 * np.abs(obs - pred).sum())})
    return rows
