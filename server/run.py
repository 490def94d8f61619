"""Start `spsim serve`: load the model, build the engine and the app, run uvicorn until SIGTERM or
Ctrl-C (in-flight requests get `uvicorn`'s graceful shutdown, then the engine aborts what is
left, returning its pages)."""

from __future__ import annotations

import sys

GIL_SWITCH_S = 0.0005


def build_server(serving, *, weights=None, device="cpu", dtype=None, temperature=0.0, served_model_name=None,
                 max_queue=1024, cuda_graphs=True, startup_shapes=False, overlap=None, say=None, model=None):
    """`(engine, app)`, the engine not started yet. `model`: `(model, tokenizer)` already loaded."""
    from spsim.gpu_runtime.engine import RuntimeOptions, load
    from spsim.gpu_runtime.weights import resolve_weights

    from spsim.vendored import ensure_vendored

    ensure_vendored("starlette", "spsim serve")
    from .app import create_app
    from .live import LiveEngine
    from .text import TextCodec

    opts = RuntimeOptions(weights=weights, device=device, dtype=dtype, temperature=temperature, record_events=False,
                          cuda_graphs=cuda_graphs, shape_rule=startup_shapes, startup_shapes=startup_shapes, overlap=overlap,
                          say=say)
    model, tokenizer = model if model is not None else load(serving, opts)
    template, special = None, None
    path = resolve_weights(weights) if weights is not None else None
    if path is not None and path.suffix == ".gguf":
        from .hf_tokenizer import gguf_text

        g = gguf_text(path, tokenizer)
        template, special = g["chat_template"], g["special"]
    engine = LiveEngine(serving, opts, model, tokenizer)
    codec = TextCodec(tokenizer, template, model.cfg.vocab, special)
    return engine, create_app(engine, codec, served_model_name or serving.model, temperature, max_queue)


def serve_forever(serving, *, host: str, port: int, drain_s: float = 10.0, **kw) -> None:
    """Serve until SIGTERM or Ctrl-C; then take no new requests (503), let those in flight finish
    for up to `drain_s` seconds, abort the rest (their pages back to the pool), and return."""
    import signal
    import threading
    import time

    from spsim.errors import SpsimError
    from spsim.vendored import ensure_vendored

    ensure_vendored("uvicorn", "spsim serve")  # the GPU machine: from a checkout's vendor/wheels/
    import uvicorn

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    # the engine thread and the event loop share the GIL: a thread waiting for it asks the holder
    # to let go only after the switch interval (5 ms by default, half a pass), so a busy event loop
    # could hold back the next launch that long; 0.5 ms bounds that wait
    sys.setswitchinterval(GIL_SWITCH_S)
    engine, app = build_server(serving, say=say, **kw)
    engine.start()
    # uvicorn on a thread of its own: this thread keeps the signals, so a stop drains the engine
    # before the HTTP side goes (uvicorn's own handler would cancel the streams first)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
    http = threading.Thread(target=server.run, name="spsim-http", daemon=True)
    http.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not server.started:
        if not http.is_alive():
            engine.stop()
            raise SpsimError(f"--host {host} --port {port}: cannot listen there (address in use?)")
        time.sleep(0.05)
    name = kw.get("served_model_name") or serving.model
    say(f"spsim serve: {name} under {serving.policy}, {engine.pages:,} KV pages, on http://{host}:{port}/v1")
    while not stop.wait(0.5) and http.is_alive():
        pass
    engine.closing = True
    deadline = time.perf_counter() + drain_s
    while engine.running + engine.waiting and time.perf_counter() < deadline:
        time.sleep(0.05)
    left = engine.running + engine.waiting
    engine.stop()  # aborts what is left: each client gets finish_reason "abort"
    time.sleep(0.2)  # the aborted streams' last chunks go out
    server.should_exit = True
    http.join(10)
    say(f"spsim serve stopped: {engine.passes:,} passes, {left:,} requests aborted, "
        f"{engine.pages_used():,} KV pages in use")
