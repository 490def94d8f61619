"""`spsim bench serve`: a trace replayed against any OpenAI-compatible server, measured at the
client, summarised in the schema of `spsim replay` (vLLM `bench serve` keys).

Each request is sent at its arrival time (the trace's own, rescaled by `--qps`, all at once with
`--offline`, or kept `--concurrency` deep) to `/v1/completions`, streamed, with a prompt of the
trace's exact token count (the token ids `spsim run` makes for that row), `max_tokens` =
`min_tokens` = the trace's output length and `ignore_eos`, and `X-Request-Id` = its row, which keys
preset acceptance draws on `spsim serve` as the row keys them in the simulator. TTFT is the first
chunk carrying text; TPOT is (finish - first token) / (output tokens - 1) from the usage count,
since a speculative chunk carries several tokens; each chunk is one inter-token gap. Speculative
decoding counters come from the server's `/metrics` (vLLM's names) before and after.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from spsim.metrics import PER_REQUEST_COLUMNS, summarize_requests


@dataclass
class Sent:
    arrival: float = np.nan
    first: float = np.nan
    finish: float = np.nan
    output: int = 0
    error: str = ""


def prompt_ids(trace, vocab: int, seed: int) -> list[list[int]]:
    """The prompt token ids `spsim run` gives each row (synthetic, keyed by row and seed)."""
    from spsim.gpu_runtime.tokens import prompt_tokens

    bs = trace.block_size or 512
    blocks = ((lambda r: trace.prefix_ids[trace.prefix_indptr[r]:trace.prefix_indptr[r + 1]])
              if trace.prefix_indptr is not None else (lambda r: None))
    return [prompt_tokens(r, int(trace.prompt_tokens[r]), blocks(r), bs, vocab, seed).tolist()
            for r in range(len(trace))]


def spec_counters(text: str) -> dict:
    """vLLM's speculative decoding counters from a /metrics page (summed over labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    want = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
            "vllm:spec_decode_num_accepted_tokens": "accepted"}
    out = dict.fromkeys(want.values(), 0.0)
    for fam in text_string_to_metric_families(text):
        if fam.name in want:
            out[want[fam.name]] += sum(s.value for s in fam.samples if s.name.endswith("_total"))
    return out


async def _one(client, url, model, r, prompt, out_tokens, at, t0, res: Sent, itl: list, sem):
    delay = t0 + at - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    async with sem:
        res.arrival = time.perf_counter() - t0
        body = {"model": model, "prompt": prompt, "max_tokens": out_tokens, "min_tokens": out_tokens,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.0}
        last = None
        try:
            async with client.stream("POST", url + "/v1/completions", json=body,
                                     headers={"X-Request-Id": str(r)}) as resp:
                if resp.status_code != 200:
                    text = (await resp.aread()).decode(errors="replace")
                    res.error = f"HTTP {resp.status_code}: {text[:200]}"
                    return
                async for line in resp.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    now = time.perf_counter() - t0
                    if data.strip() == "[DONE]":
                        res.finish = now
                        break
                    d = json.loads(data)
                    if d.get("usage"):
                        res.output = int(d["usage"]["completion_tokens"])
                    ch = d.get("choices") or []
                    if ch and ch[0].get("text"):
                        if last is None:
                            res.first = now
                        else:
                            itl.append(now - last)
                        last = now
        except Exception as e:  # noqa: BLE001 — a failed request is counted, not fatal
            res.error = f"{type(e).__name__}: {e}"
        if not res.error and (np.isnan(res.finish) or np.isnan(res.first)):
            res.error = "stream ended without [DONE] or without text"


async def _replay(trace, url, model, arrivals, concurrency, prompts, progress, timeout_s):
    import httpx

    n = len(trace)
    res = [Sent() for _ in range(n)]
    itl: list[float] = []
    sem = asyncio.Semaphore(concurrency or n or 1)
    limits = httpx.Limits(max_connections=concurrency or n, max_keepalive_connections=concurrency or n)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        before = await _spec_counters(client, url)
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(_one(client, url, model, r, prompts[r], int(trace.output_tokens[r]),
                                          float(arrivals[r]), t0, res[r], itl, sem)) for r in range(n)]
        done = 0
        for fut in asyncio.as_completed(tasks):
            await fut
            done += 1
            if progress is not None:
                progress(done, n)
        after = await _spec_counters(client, url) if before is not None else None
        server = None
        try:  # spsim serve's own figures (its KV pages: what the simulator needs to predict it)
            r = await client.get(url + "/spsim/summary")
            server = r.json() if r.status_code == 200 else None
        except Exception:  # noqa: BLE001 — another server: none
            pass
    spec = None if before is None else {k: after[k] - before[k] for k in after}
    return res, np.asarray(itl), spec, server


async def _spec_counters(client, url) -> dict | None:
    try:
        r = await client.get(url + "/metrics")
    except Exception:  # noqa: BLE001 — a server without /metrics: no speculation counters
        return None
    return spec_counters(r.text) if r.status_code == 200 else None


def bench_serve(trace, url: str, model: str, arrivals: np.ndarray, concurrency: int | None, vocab: int, seed: int,
                slo: tuple[float, float], progress=None, timeout_s: float = 3600.0) -> tuple[dict, pd.DataFrame]:
    """Replay `trace` against the server at `url`; `(summary, per-request frame)`."""
    prompts = prompt_ids(trace, vocab, seed)
    res, itl, spec, server = asyncio.run(_replay(trace, url.rstrip("/"), model, arrivals, concurrency, prompts, progress,
                                         timeout_s))
    n = len(trace)
    z = np.zeros(n, np.int64)
    req = pd.DataFrame({
        "id": trace.ids, "replica": z, "arrival_s": [r.arrival for r in res],
        "first_token_s": [r.first for r in res], "finish_s": [r.finish if not r.error else np.nan for r in res],
        "prompt_tokens": trace.prompt_tokens, "output_tokens": [r.output or int(o) for r, o in
                                                              zip(res, trace.output_tokens)],
        "drafts": z, "verifies": z, "spec_verifies": z, "accepted": z, "preemptions": z, "recomputes": z,
        "prefix_hit_tokens": z, "rejected": ["error" if r.error else "" for r in res]})[PER_REQUEST_COLUMNS]
    nan = np.full(n, np.nan)
    s = summarize_requests(req, itl, trace.slo_ttft_s if trace.slo_ttft_s is not None else nan,
                           trace.slo_tpot_s if trace.slo_tpot_s is not None else nan, slo)
    # drafts, verifications and acceptance are the server's, not the client's: its counters
    s.pop("preemptions", None)  # the server's to know
    for k in ("drafted_tokens", "verifications", "accepted_drafts", "draft_acceptance_rate", "mean_accepted_per_verify",
              "tokens_per_verify", "drafts_per_verify", "spec_verifications", "spec_mean_accepted_per_verify",
              "spec_drafts_per_verify"):
        s.pop(k, None)
    s["drafted_tokens"] = 0
    if spec is not None:
        d, dt, a = int(spec["drafts"]), int(spec["draft_tokens"]), int(spec["accepted"])
        s.update(spec_verifications=d, drafted_tokens=dt, accepted_drafts=a,
                 draft_acceptance_rate=a / dt if dt else None, spec_mean_accepted_per_verify=a / d if d else None)
    errors = [r.error for r in res if r.error]
    s["errors"] = len(errors)
    s["first_errors"] = errors[:5]
    s["measured_at"] = "client"
    s["server"] = url
    if server is not None:
        s["server_kv_pages"] = server.get("kv_pages")
    return s, req
