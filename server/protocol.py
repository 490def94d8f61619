"""OpenAI request bodies checked into one `Params`, or an `ApiError` naming the field.

Fields spsim does not implement get a 400 when they ask for something (`n` > 1, `logprobs`, `echo`,
a penalty); fields outside the schema are ignored and reported back to the caller for the log, as
vLLM does, so load generators that send extras work. `stream_options` (usage counts in streams,
vLLM's continuous ones included) is honoured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .text import PromptError, TextCodec


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


@dataclass
class Params:
    prompt: list[int]
    max_tokens: int
    stream: bool = False
    include_usage: bool = False  # streamed: a last chunk carries the usage counts
    continuous_usage: bool = False  # streamed, with include_usage: every chunk carries the counts so far (vLLM)
    stop: list[str] = field(default_factory=list)
    stop_ids: frozenset = frozenset()
    ignore_eos: bool = False
    min_tokens: int = 0
    seed: int | None = None
    temperature: float = 0.0  # the server's (`spsim serve --temperature`) unless the request names one
    return_token_ids: bool = False
    ignored: list[str] = field(default_factory=list)  # fields outside the schema (logged)


COMMON = {"model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "n",
          "logprobs", "presence_penalty", "frequency_penalty", "user", "ignore_eos", "min_tokens",
          "stop_token_ids", "return_token_ids", "top_k", "repetition_penalty", "best_of", "logit_bias"}
COMPLETIONS = COMMON | {"prompt", "echo", "suffix"}
CHAT = COMMON | {"messages", "max_completion_tokens", "top_logprobs", "response_format", "tools", "tool_choice"}


def _int(body: dict, name: str, default, lo: int, hi: int | None = None):
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(400, f"{name}: must be an integer (got {v!r})", name)
    if v < lo or (hi is not None and v > hi):
        raise ApiError(400, f"{name}: must be between {lo} and {hi} (got {v})" if hi is not None else
                       f"{name}: must be >= {lo} (got {v})", name)
    return v


def _number(body: dict, name: str, default: float) -> float:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ApiError(400, f"{name}: must be a number (got {v!r})", name)
    return float(v)


def _unsupported(body: dict) -> None:
    """A 400 for what a client asks of spsim that it does not do."""
    if _int(body, "n", 1, 1) != 1:
        raise ApiError(400, "n: only n = 1 is supported", "n")
    if _int(body, "best_of", 1, 1) != 1:
        raise ApiError(400, "best_of: only best_of = 1 is supported", "best_of")
    lp = body.get("logprobs")
    if lp not in (None, False, 0):
        raise ApiError(400, "logprobs: not supported by spsim serve", "logprobs")
    if body.get("top_logprobs") not in (None, 0):
        raise ApiError(400, "top_logprobs: not supported by spsim serve", "top_logprobs")
    if body.get("echo"):
        raise ApiError(400, "echo: not supported by spsim serve", "echo")
    if body.get("suffix"):
        raise ApiError(400, "suffix: not supported by spsim serve", "suffix")
    for name, neutral in (("presence_penalty", 0.0), ("frequency_penalty", 0.0), ("repetition_penalty", 1.0),
                          ("top_p", 1.0)):
        if _number(body, name, neutral) != neutral:
            raise ApiError(400, f"{name}: only {neutral:g} is supported (the runtime samples the model's own "
                                "distribution, which speculative decoding keeps exactly)", name)
    if _int(body, "top_k", -1, -1) not in (-1, 0):
        raise ApiError(400, "top_k: not supported by spsim serve", "top_k")
    if body.get("logit_bias"):
        raise ApiError(400, "logit_bias: not supported by spsim serve", "logit_bias")
    for name in ("tools", "tool_choice", "response_format"):
        if body.get(name) not in (None, [], "none", "auto") and not (name == "response_format"
                                                                     and body[name] == {"type": "text"}):
            raise ApiError(400, f"{name}: not supported by spsim serve", name)



def _stops(body: dict) -> list[str]:
    s = body.get("stop")
    if s is None:
        return []
    if isinstance(s, str):
        s = [s]
    if not isinstance(s, list) or not all(isinstance(x, str) and x for x in s) or len(s) > 16:
        raise ApiError(400, "stop: a non-empty string or a list of up to 16 of them", "stop")
    return s


def parse(body, kind: str, codec: TextCodec, max_context: int, temperature: float) -> Params:
    """`kind`: "completions" or "chat". `max_context`: the context window (prompt + output)."""
    if not isinstance(body, dict):
        raise ApiError(400, "body: a JSON object is expected", "body")
    known = COMPLETIONS if kind == "completions" else CHAT
    _unsupported(body)
    t = _number(body, "temperature", temperature)
    if t < 0:
        raise ApiError(400, f"temperature: must be >= 0 (got {t:g})", "temperature")
    try:
        prompt = _prompt(body, codec) if kind == "completions" else _messages(body, codec)
    except PromptError as e:
        raise ApiError(400, str(e), e.param) from None
    if not prompt:
        field = "prompt" if kind == "completions" else "messages"
        raise ApiError(400, f"{field}: empty", field)
    if len(prompt) >= max_context:
        raise ApiError(400, f"prompt: {len(prompt):,} tokens; the context window is {max_context:,} (prompt and "
                            "output together)", "prompt" if kind == "completions" else "messages")
    room = max_context - len(prompt)
    name = "max_completion_tokens" if kind == "chat" and body.get("max_completion_tokens") is not None else "max_tokens"
    # OpenAI's defaults: 16 tokens for completions, the rest of the window for chat
    max_tokens = _int(body, name, 16 if kind == "completions" else room, 1)
    if max_tokens > room:
        raise ApiError(400, f"{name}: {max_tokens:,} with a {len(prompt):,}-token prompt passes the context "
                            f"window of {max_context:,} tokens (at most {room:,})", name)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, f"stream: must be true or false (got {stream!r})", "stream")
    usage = _stream_options(body)
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list):
        raise ApiError(400, "stop_token_ids: must be a list of token ids", "stop_token_ids")
    try:
        stop_ids = codec.token_ids(stop_ids, "stop_token_ids")
    except PromptError as e:
        raise ApiError(400, str(e), e.param) from None
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise ApiError(400, f"ignore_eos: must be true or false (got {ignore_eos!r})", "ignore_eos")
    return Params(prompt=prompt, max_tokens=max_tokens, stream=stream, include_usage=stream and usage[0],
                  continuous_usage=stream and usage[0] and usage[1],
                  stop=_stops(body), stop_ids=frozenset(stop_ids), ignore_eos=ignore_eos,
                  min_tokens=_int(body, "min_tokens", 0, 0, max_tokens), seed=_int(body, "seed", None, -2**63),
                  temperature=t,
                  return_token_ids=bool(body.get("return_token_ids", False)),
                  ignored=sorted(set(body) - known))


def _stream_options(body: dict) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats). Both only matter when streaming; a request that
    is not streamed may still carry them (some clients always do), and they are ignored there."""
    so = body.get("stream_options")
    if so is None:
        return False, False
    if not isinstance(so, dict):
        raise ApiError(400, f"stream_options: must be an object (got {so!r})", "stream_options")
    out = []
    for name in ("include_usage", "continuous_usage_stats"):
        v = so.get(name)
        if v is not None and not isinstance(v, bool):
            raise ApiError(400, f"stream_options.{name}: must be true or false (got {v!r})", f"stream_options.{name}")
        out.append(bool(v))
    return out[0], out[1]


def _prompt(body: dict, codec: TextCodec) -> list[int]:
    if "prompt" not in body:
        raise ApiError(400, "prompt: required", "prompt")
    p = body["prompt"]
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        return codec.encode(p)
    if isinstance(p, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in p):
        return codec.token_ids(p, "prompt")
    if isinstance(p, list) and len(p) > 1 and all(isinstance(x, (str, list)) for x in p):
        raise ApiError(400, "prompt: one prompt per request (a batch of prompts is not supported)", "prompt")
    raise ApiError(400, "prompt: a string or a list of token ids", "prompt")


def _messages(body: dict, codec: TextCodec) -> list[int]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "messages: a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}]: an object with a role and content", "messages")
        c = m.get("content")
        if isinstance(c, list):  # content parts: text only
            if not all(isinstance(x, dict) and x.get("type") == "text" and isinstance(x.get("text"), str) for x in c):
                raise ApiError(400, f"messages[{i}].content: only text parts are supported", "messages")
            c = "".join(x["text"] for x in c)
        if not isinstance(c, str):
            raise ApiError(400, f"messages[{i}].content: a string (got {type(c).__name__})", "messages")
        out.append({"role": m["role"], "content": c})
    return codec.chat(out)
