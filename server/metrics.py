"""`/metrics` under vLLM's metric names, so dashboards made for vLLM read spsim serve.

Latency histograms are observed as tokens reach the HTTP layer; gauges and counters the engine
keeps (requests running and waiting, KV cache usage, speculative decoding) are read at scrape time.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# vLLM's buckets (seconds)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


class EngineCollector:
    """What the engine counts, read when scraped."""

    def __init__(self, engine, model_name: str):
        self.engine, self.name = engine, model_name

    def collect(self):
        e, lab = self.engine, [self.name]

        def gauge(name, doc, value):
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric(lab, value)
            return g

        def counter(name, doc, value):
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric(lab, value)
            return c

        yield gauge("vllm:num_requests_running", "Requests in the batch (prefill or decode).", e.running)
        yield gauge("vllm:num_requests_waiting", "Requests waiting to be admitted.", e.waiting)
        yield gauge("vllm:kv_cache_usage_perc", "KV cache usage (1 = full).", e.pages_used() / max(e.pages, 1))
        sc = e.spec
        yield counter("vllm:spec_decode_num_drafts", "Verifications with at least one draft.", sc.drafts)
        yield counter("vllm:spec_decode_num_draft_tokens", "Draft tokens verified.", sc.draft_tokens)
        yield counter("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.", sc.accepted)
        per = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted draft tokens by "
                                  "position in the draft.", labels=["model_name", "position"])
        for j, v in enumerate(sc.per_pos.tolist()):
            per.add_metric([self.name, str(j)], v)
        yield per


class ServerMetrics:
    def __init__(self, engine, model_name: str):
        self.registry = CollectorRegistry()
        self.name = model_name
        r, lab = self.registry, ["model_name"]
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.", lab, registry=r,
                              buckets=TTFT_BUCKETS).labels(model_name)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Time between successive outputs of a request "
                             "(a speculative chunk of several tokens counts once).", lab, registry=r,
                             buckets=ITL_BUCKETS).labels(model_name)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Arrival to last token.", lab, registry=r,
                             buckets=E2E_BUCKETS).labels(model_name)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens of requests taken in.", lab,
                                     registry=r).labels(model_name)
        self.generation_tokens = Counter("vllm:generation_tokens", "Output tokens.", lab,
                                         registry=r).labels(model_name)
        self.success = Counter("vllm:request_success", "Finished requests by reason.", ["model_name",
                               "finished_reason"], registry=r)
        r.register(EngineCollector(engine, model_name))

    def finished(self, reason: str) -> None:
        self.success.labels(self.name, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
