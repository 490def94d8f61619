"""Start `spsim serve`: load the model, build the engine and the app, run uvicorn until SIGTERM or
Ctrl-C (in-flight requests get `uvicorn`'s graceful shutdown, then the engine aborts what is
left, returning its pages)."""

from __future__ import annotations

import sys


def build_server(serving, *, weights=None, device="cpu", dtype=None, temperature=0.0, served_model_name=None,
                 max_queue=1024, cuda_graphs=True, startup_shapes=False, say=None):
    """`(engine, app)`, the engine not started yet."""
    from spsim.gpu_runtime.engine import RuntimeOptions, load
    from spsim.gpu_runtime.weights import resolve_weights

    from .app import create_app
    from .live import LiveEngine
    from .text import TextCodec

    opts = RuntimeOptions(weights=weights, device=device, dtype=dtype, temperature=temperature, record_events=False,
                          cuda_graphs=cuda_graphs, shape_rule=startup_shapes, startup_shapes=startup_shapes, say=say)
    model, tokenizer = load(serving, opts)
    template = None
    if weights is not None and str(resolve_weights(weights)).endswith(".gguf"):
        from spsim.gpu_runtime.gguf_loader import gguf_chat_template

        template = gguf_chat_template(resolve_weights(weights))
    engine = LiveEngine(serving, opts, model, tokenizer)
    codec = TextCodec(tokenizer, template, model.cfg.vocab)
    return engine, create_app(engine, codec, served_model_name or serving.model, temperature, max_queue)


def serve_forever(serving, *, host: str, port: int, **kw) -> None:
    import uvicorn

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    engine, app = build_server(serving, say=say, **kw)
    engine.start()
    name = kw.get("served_model_name") or serving.model
    say(f"spsim serve: {name} under {serving.policy}, {engine.pages:,} KV pages, on http://{host}:{port}/v1")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=10)
    finally:
        engine.stop()
