"""`usage` counts are exact, whole and streamed: OpenAI's `stream_options.include_usage` (a last
chunk with the counts, `usage: null` on the others) and vLLM's `continuous_usage_stats` (every
chunk carries the counts so far), on /v1/completions and /v1/chat/completions-shaped streams of a
speculative policy, whose chunks carry several tokens each."""

from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("starlette")

from serve_util import LocalServer  # noqa: E402

PROMPT = list(range(40, 97))  # 57 tokens


@pytest.fixture(scope="module")
def srv():
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.weights import load_model

    cfg = ServingConfig(model="tiny", policy="fixed-k:k=4", kv_pages=400, acceptance="real").validate()
    s = LocalServer(cfg, model=load_model(None, "tiny", seed=0))
    yield s
    s.close()


def _chunks(srv, body) -> list[dict]:
    with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = [x[6:] for x in r.iter_lines() if x.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


def _body(**kw):
    return {"model": "tiny", "prompt": PROMPT, "max_tokens": 23, "ignore_eos": True, "return_token_ids": True,
            "stream": True, **kw}


def test_whole_response_counts_prompt_and_output_tokens(srv):
    r = httpx.post(srv.url + "/v1/completions", json=_body(stream=False), timeout=60).json()
    assert r["usage"] == {"prompt_tokens": 57, "completion_tokens": 23, "total_tokens": 80}
    assert len(r["choices"][0]["token_ids"]) == 23


def test_stream_without_stream_options_has_no_usage(srv):
    ch = _chunks(srv, _body())
    assert all("usage" not in c for c in ch)
    assert sum(len(c["choices"][0]["token_ids"]) for c in ch) == 23


def test_include_usage_last_chunk_has_exact_counts_others_null(srv):
    ch = _chunks(srv, _body(stream_options={"include_usage": True}))
    *body, last = ch
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 57, "completion_tokens": 23,
                                                       "total_tokens": 80}
    assert all(c["usage"] is None for c in body)
    # speculation: some chunk carried several tokens, so counting chunks would be wrong
    assert len(body) < 23 and sum(len(c["choices"][0]["token_ids"]) for c in body) == 23


def test_continuous_usage_stats_counts_tokens_so_far_in_every_chunk(srv):
    ch = _chunks(srv, _body(stream_options={"include_usage": True, "continuous_usage_stats": True}))
    *body, last = ch
    so_far = 0
    for c in body:
        so_far += len(c["choices"][0]["token_ids"])
        assert c["usage"] == {"prompt_tokens": 57, "completion_tokens": so_far, "total_tokens": 57 + so_far}
    assert so_far == 23 and last["choices"] == [] and last["usage"]["completion_tokens"] == 23


def test_continuous_usage_stats_alone_adds_nothing(srv):
    """As vLLM: continuous stats only with include_usage."""
    ch = _chunks(srv, _body(stream_options={"continuous_usage_stats": True}))
    assert all("usage" not in c for c in ch)


def test_min_tokens_and_eos_counts_match_the_tokens_sent(srv):
    """Without ignore_eos the output may end early; the counts still equal the tokens sent."""
    ch = _chunks(srv, _body(ignore_eos=False, min_tokens=3, max_tokens=40,
                            stream_options={"include_usage": True, "continuous_usage_stats": True}))
    *body, last = ch
    n = sum(len(c["choices"][0]["token_ids"]) for c in body)
    assert 3 <= n <= 40 and last["usage"]["completion_tokens"] == n
    assert body[-1]["usage"]["completion_tokens"] == n


def test_stream_options_on_a_whole_response_are_ignored(srv):
    """Some clients always send them; vLLM refuses, OpenAI's and load generators' clients expect them
    to be harmless."""
    r = httpx.post(srv.url + "/v1/completions", timeout=60, json=_body(
        stream=False, stream_options={"include_usage": True, "continuous_usage_stats": True}))
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 23


@pytest.mark.parametrize("so,param", [([1], "stream_options"), ({"include_usage": "yes"}, "stream_options.include_usage"),
                                      ({"continuous_usage_stats": 1}, "stream_options.continuous_usage_stats")])
def test_bad_stream_options_name_the_field(srv, so, param):
    r = httpx.post(srv.url + "/v1/completions", json=_body(stream_options=so), timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert r.json()["error"]["message"].startswith(param)


def test_nothing_left_in_use(srv):
    assert srv.idle()["kv_pages_used"] == 0
