"""The new-user case of issue 40: 8 requests of 1.5-2.5K-token prompts and 48 output tokens,
`fixed-k:k=4`, verify-quest at budget 128, prompts cut from two Python standard-library sources
(A: typing.py, B: inspect.py). A user fits a preset on A's events and replays B's trace with it."""

from __future__ import annotations

from pathlib import Path

from heldout_record import STDLIB, record, write_trace

AB_TEXTS = {"A": STDLIB / "typing.py", "B": STDLIB / "inspect.py"}
AB_PROMPTS = [1500 + round(i * 1000 / 7) for i in range(8)]  # 1,500 .. 2,500 tokens
AB_OUTPUT, AB_POLICY, AB_METHOD, AB_BUDGET = 48, "fixed-k:k=4", "verify-quest", 128


def record_ab(work: Path, say=print) -> dict:
    """{"A": events path, "B": events path}; the trace is `work/trace.jsonl`."""
    work.mkdir(parents=True, exist_ok=True)
    trace = write_trace(work / "trace.jsonl", AB_PROMPTS, AB_OUTPUT)
    return {k: record(trace, p, work / k, AB_POLICY, AB_METHOD, AB_BUDGET, say=say) for k, p in AB_TEXTS.items()}
