"""The HTTP side of `spsim serve` (Starlette, which the GPU machine can carry as pure-Python wheels): OpenAI's `/v1/completions`, `/v1/chat/completions`
(streamed as server-sent events or not) and `/v1/models`, plus `/health`, `/metrics` and
`/spsim/summary` (the engine's own counters). Every request becomes a `LiveRequest`; its tokens
come back from the engine thread through an asyncio queue."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .keys import client_key
from .live import LiveEngine, LiveRequest
from .metrics import ServerMetrics
from .protocol import ApiError, Params, parse
from .text import TextCodec

log = logging.getLogger("spsim.serve")


class Mailbox:
    """Tokens on their way from the engine thread to the event loop, one wake-up per pass: each
    `call_soon_threadsafe` writes the loop's wake-up pipe and has the loop take the GIL, so one per
    request per pass (tens at load) competes with the engine thread planning the next pass. The
    engine thread puts (queue, item) pairs and flushes after each pass's deliveries
    (`LiveEngine.flush`)."""

    def __init__(self, loop):
        self.loop = loop
        self.items: list = []

    def put(self, q: asyncio.Queue, item) -> None:
        self.items.append((q, item))

    def flush(self) -> None:
        if self.items:
            items, self.items = self.items, []
            self.loop.call_soon_threadsafe(_put_all, items)


def _put_all(items) -> None:
    for q, item in items:
        q.put_nowait(item)


class Stream:
    """One request's outputs as the HTTP side reads them: (text, token ids, finish) items, stop
    strings applied, latencies observed."""

    def __init__(self, params: Params, codec: TextCodec, metrics: ServerMetrics, mail: Mailbox):
        self.params, self.metrics, self.mail = params, metrics, mail
        self.q: asyncio.Queue = asyncio.Queue()
        self.dec = codec.decoder()
        self.held = ""  # text not handed out yet: it may be the start of a stop string
        self.tokens = 0
        self.t0 = time.perf_counter()
        self.t_last: float | None = None
        self.hold = max((len(s) for s in params.stop), default=1) - 1

    def on_tokens(self, ids: list[int], finish: str | None) -> bool:
        """Engine thread: new token ids of this request. True asks the engine to end it."""
        now = time.perf_counter()
        stop = False
        text = ""
        if ids:
            self.metrics.generation_tokens.inc(len(ids))
            if self.t_last is None:
                self.metrics.ttft.observe(now - self.t0)
            else:
                self.metrics.itl.observe(now - self.t_last)
            self.t_last = now
            self.tokens += len(ids)
            self.held += self.dec.add(ids)
            hit = min((i for i in (self.held.find(s) for s in self.params.stop) if i >= 0), default=-1)
            if hit >= 0:
                text, self.held, stop = self.held[:hit], "", True
            elif finish is not None:
                text, self.held = self.held, ""
            else:
                cut = max(len(self.held) - self.hold, 0)
                text, self.held = self.held[:cut], self.held[cut:]
        elif finish is not None:
            text, self.held = self.held, ""
        if finish is not None:
            self.metrics.e2e.observe(now - self.t0)
            self.metrics.finished(finish)
        self.mail.put(self.q, (text, list(ids), finish))
        return stop


def create_app(engine: LiveEngine, codec: TextCodec, served_name: str, temperature: float = 0.0,
               max_queue: int = 1024) -> Starlette:
    metrics = ServerMetrics(engine, served_name)
    created = int(time.time())

    async def api_error(_req, e: ApiError):
        return JSONResponse(e.body(), status_code=e.status)

    async def health(_req):
        if engine.error is not None:
            return JSONResponse({"status": "error", "error": str(engine.error)}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def models(_req):
        return JSONResponse({"object": "list", "data": [{"id": served_name, "object": "model", "created": created,
                                            "owned_by": "spsim", "max_model_len": engine.max_context,
                                            "vocab_size": engine.model.cfg.vocab}]})

    async def prometheus(_req):
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def summary(_req):
        sc = engine.spec
        return JSONResponse({"passes": engine.passes, "running": engine.running, "waiting": engine.waiting,
                "kv_pages": engine.pages, "kv_pages_used": engine.pages_used(),
                "spec_decode": {"num_drafts": sc.drafts, "num_draft_tokens": sc.draft_tokens,
                                "num_accepted_tokens": sc.accepted,
                                "num_accepted_tokens_per_pos": sc.per_pos.tolist()}})

    async def body_of(request: Request):
        raw = await request.body()
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, f"body: malformed JSON ({e})", "body") from None

    async def generate(request: Request, kind: str):
        body = await body_of(request)
        model = body.get("model") if isinstance(body, dict) else None
        if model is not None and model != served_name:
            raise ApiError(404, f"model: {model!r} is not served here (this server serves {served_name!r})",
                           "model", "model_not_found")
        p = parse(body, kind, codec, engine.max_context, temperature)
        if p.ignored:
            log.info("ignored fields outside the schema: %s", ", ".join(p.ignored))
        if engine.waiting >= max_queue:
            raise ApiError(429, f"the queue is full ({max_queue:,} requests waiting; spsim serve --max-queue)",
                           None, "rate_limit_error")
        need = engine.b.pool.pages_for(len(p.prompt) + p.max_tokens + engine.cfg.max_draft)
        if need > engine.pages:
            raise ApiError(400, f"max_tokens: prompt and output need {need:,} KV pages; this server has "
                                f"{engine.pages:,}", "max_tokens")
        if engine.mail is None:  # the loop serving requests, known once the first one comes
            engine.mail = Mailbox(asyncio.get_running_loop())
        st = Stream(p, codec, metrics, engine.mail)
        req = LiveRequest(prompt=p.prompt, max_tokens=p.max_tokens, on_tokens=st.on_tokens, min_tokens=p.min_tokens,
                          ignore_eos=p.ignore_eos, stop_ids=p.stop_ids, key=client_key(request.headers.get("x-request-id")),
                          temperature=p.temperature)
        try:
            engine.submit(req)
        except ValueError as e:
            raise ApiError(400, str(e), "X-Request-Id") from None
        except RuntimeError as e:
            raise ApiError(503, str(e), None, "server_error") from None
        metrics.prompt_tokens.inc(len(p.prompt))
        rid = ("cmpl-" if kind == "completions" else "chatcmpl-") + uuid.uuid4().hex
        if p.stream:
            return StreamingResponse(_sse(engine, req, st, p, kind, rid, served_name, created),
                                     media_type="text/event-stream")
        return await _whole(request, engine, req, st, p, kind, rid, served_name, created)

    async def completions(request: Request):
        return await generate(request, "completions")

    async def chat(request: Request):
        return await generate(request, "chat")

    app = Starlette(routes=[Route("/health", health), Route("/v1/models", models), Route("/metrics", prometheus),
                            Route("/spsim/summary", summary),
                            Route("/v1/completions", completions, methods=["POST"]),
                            Route("/v1/chat/completions", chat, methods=["POST"])],
                    exception_handlers={ApiError: api_error})
    app.state.engine, app.state.metrics = engine, metrics
    return app


def _usage(p: Params, completion_tokens: int) -> dict:
    return {"prompt_tokens": len(p.prompt), "completion_tokens": completion_tokens,
            "total_tokens": len(p.prompt) + completion_tokens}


def _choice(kind: str, text: str, finish, ids, p: Params, delta: bool) -> dict:
    c = {"index": 0, "finish_reason": finish}
    if kind == "completions":
        c.update(text=text, logprobs=None)
    elif delta:
        c["delta"] = {"content": text} if text else {}
    else:
        c["message"] = {"role": "assistant", "content": text}
    if p.return_token_ids:
        c["token_ids"] = ids
    return c


async def _whole(request, engine, req, st: Stream, p: Params, kind, rid, name, created):
    text, ids, finish = [], [], None
    try:
        while finish is None:
            try:
                t, new, finish = await asyncio.wait_for(st.q.get(), timeout=1.0)
            except asyncio.TimeoutError:
                if await request.is_disconnected():  # the client left: `finally` frees its pages
                    return Response(status_code=499)
                continue
            text.append(t)
            ids += new
    finally:
        if req.finished is None and finish is None:
            engine.abort(req)
    obj = "text_completion" if kind == "completions" else "chat.completion"
    return JSONResponse({"id": rid, "object": obj, "created": created, "model": name,
                         "choices": [_choice(kind, "".join(text), finish, ids, p, delta=False)],
                         "usage": _usage(p, st.tokens)})


async def _sse(engine, req, st: Stream, p: Params, kind, rid, name, created):
    obj = "text_completion" if kind == "completions" else "chat.completion.chunk"

    def chunk(choices, usage=None) -> str:
        d = {"id": rid, "object": obj, "created": created, "model": name, "choices": choices}
        if p.include_usage:  # OpenAI: null on every chunk but the last; vLLM's continuous stats: the counts so far
            d["usage"] = usage if usage is not None or not p.continuous_usage else _usage(p, sent)
        return f"data: {json.dumps(d)}\n\n"

    finish = None
    sent = 0  # output tokens in the chunks so far (counted here: the engine thread may be ahead)
    try:
        if kind == "chat":
            first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            yield chunk([first])
        while finish is None:
            text, ids, finish = await st.q.get()
            sent += len(ids)
            if text or ids or finish is not None:
                yield chunk([_choice(kind, text, finish, ids, p, delta=True)])
        if p.include_usage:
            yield chunk([], _usage(p, sent))
        yield "data: [DONE]\n\n"
    finally:
        if finish is None:  # the client went away mid-stream: abort, pages back to the pool
            engine.abort(req)
