"""What limits a configuration, in words a user can act on (Vidur's bottleneck analysis).

Read from two runs the search leaves: the highest rate that met the SLO (`ok`) and the lowest
that did not (`fail`, the next step up). The term that failed says which latency gave out; the
failing run's own notes say why (spsim/metrics.py: `memory_note` when KV pages capped the batch,
`overloaded` when the queue kept growing, pass time by category, acceptance).
"""

from __future__ import annotations

PREFILL_HEAVY = 0.5  # passes carrying prefill take this share of GPU time
LOW_ACCEPTANCE = 0.5  # draft acceptance rate below which speculation pays little
VERIFY_HEAVY = 0.5  # verification-only passes' share of decode time


class Limit:
    """What limits a configuration: `code`, `head` (the words for the code), `evidence` (this
    configuration's figures) and `remedy` (what to change, the same for every configuration the
    code limits: reports state it once per code)."""

    def __init__(self, code: str, head: str, evidence: str, remedy: str = ""):
        self.code, self.head, self.evidence, self.remedy = code, head, evidence, remedy

    @property
    def sentence(self) -> str:
        """The whole reason in one sentence (results.csv's `why`)."""
        if self.code == "none":
            return self.evidence
        return f"{self.head}: {self.evidence}" + (f": {self.remedy}" if self.remedy else "")


def limiter(ok: dict | None, fail: dict | None, fail_eval: dict | None, speculative: bool) -> Limit:
    """What limits a configuration: kv_memory, max_batch, prefill, queueing, verify_cost,
    acceptance, decode, or none (no failing run: the SLO held at every rate tried)."""
    if fail is None or fail_eval is None:
        return Limit("none", "none", "the SLO held at every rate tried; the trace's length, not the GPU, bounds the search")
    worst = max(fail_eval["terms"], key=lambda t: t["ratio"] if t["ratio"] is not None else float("inf"))
    metric = worst["metric"]
    what = _term_words(worst)
    pt = fail.get("pass_time_s") or {}
    tot = sum(pt.values()) or 1.0
    prefill_share = fail.get("prefill_time_share") or 0.0
    dec = (pt.get("mixed", 0) + pt.get("draft", 0) + pt.get("verify", 0)) or 1.0
    peak, mb = fail.get("peak_running"), fail.get("requested_max_batch")
    if fail.get("memory_note") or fail.get("preemptions"):
        return Limit("kv_memory", "KV memory",
                     f"{what}; KV pages cap the batch at {peak} requests per replica (peak "
                     f"{fail.get('kv_peak_pages'):,} of {fail.get('kv_capacity_pages'):,} pages"
                     + (f", {fail['preemptions']:,} preemptions" if fail.get("preemptions") else "") + ")",
                     "a GPU with more memory, --kv-dtype fp8, --tp 2 or a smaller --draft-budget raise the rate")
    if metric in ("ttft", "e2el") or "ttft" in metric:
        if peak is not None and mb is not None and peak >= mb:
            return Limit("max_batch", "max batch", f"{what}; the batch reached --max-batch {mb} and requests "
                         "queued behind it", "raise --max-batch (KV memory allows it) or add replicas")
        if prefill_share >= PREFILL_HEAVY:
            return Limit("prefill", "prefill", f"{what}; passes carrying prefill take {prefill_share:.0%} of GPU "
                         "time (long prompts)", "more replicas, prefix caching (prompts that repeat) or a larger "
                         "--token-budget per pass")
        return Limit("queueing", "queueing", f"{what}; arrivals outpace service and requests wait for a slot",
                     "add replicas, or a policy with a faster decode")
    # TPOT or ITL: the decode pass is too slow
    if prefill_share >= PREFILL_HEAVY:
        return Limit("prefill", "prefill interference", f"{what}; prefill chunks take {prefill_share:.0%} of GPU "
                     "time and stretch the passes decoding requests ride in",
                     "a smaller --token-budget, or more replicas")
    acc = fail.get("draft_acceptance_rate")
    if speculative and acc is not None and acc < LOW_ACCEPTANCE:
        return Limit("acceptance", "acceptance", f"{what}; only {acc:.0%} of drafts are accepted "
                     f"({fail.get('mean_acceptance_length') or 0:.2f} tokens per verification with drafts)",
                     "a larger --draft-budget, another --draft-kv, or `ar` on this traffic")
    if speculative and pt.get("verify", 0) / dec >= VERIFY_HEAVY:
        return Limit("verify_cost", "verify cost", f"{what}; verification passes (full attention over each "
                     f"request's whole context) take {pt.get('verify', 0) / dec:.0%} of decode time",
                     "longer drafts (fixed-k:k=..., aspire) or a GPU with more memory bandwidth")
    return Limit("decode", "decode", f"{what}; every token costs a pass that reads the weights and each request's "
                 f"KV (decode passes {dec / tot:.0%} of GPU time)", "more memory bandwidth, fewer requests per "
                 "replica (more replicas), or speculation where contexts are long")


def stated_once(rows: list[dict]) -> list[dict]:
    """The limits of a plan's configurations with each reason stated once: one entry per code
    (in the rows' order) naming its configurations and its remedy, with each distinct evidence
    and the configurations it applies to. Every row of the README's plan ended with the same
    "Limited by prefill interference ... a smaller --token-budget, or more replicas"."""
    out: dict[str, dict] = {}
    for r in rows:
        g = out.setdefault(r["limiter"], {"code": r["limiter"], "head": r.get("why_head") or r["limiter"],
                                          "remedy": r.get("remedy") or "", "configs": [], "evidence": {}})
        g["configs"].append(r["config"])
        g["evidence"].setdefault(r.get("why_evidence") or r["why"], []).append(r["config"])
    return [{**g, "evidence": [(cs, e) for e, cs in g["evidence"].items()]} for g in out.values()]


def _term_words(t: dict) -> str:
    if t.get("certain"):  # the run was stopped once the SLO could no longer be met (planning/stop.py)
        return f"at the next rate {t['certain']}"
    if t["stat"] == "attain":
        return f"at the next rate only {t['attained']:.0%} of requests meet {t['term']}"
    return (f"at the next rate {t['metric'].upper()} {t['stat']} reaches {_ms(t['measured_s'])} ms "
            f"against {_ms(t['bound_s'])} ms")


def _ms(s: float) -> str:
    ms = s * 1e3
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}"
