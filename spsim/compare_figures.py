"""The figures a comparison of policies reports, with which way is better and whether a ratio
against the reference policy means something; the terminal table (spsim/compare.py) and the
HTML report (spsim/compare_report.py) mark the same winners from this one list."""

from __future__ import annotations

# (summary key, label, higher is better, ratio against the reference shown)
FIGURES = [
    ("output_throughput", "out tok/s", True, True),
    ("request_goodput", "goodput req/s", True, True),
    ("mean_tpot_ms", "TPOT mean ms", False, True),
    ("p99_tpot_ms", "TPOT p99 ms", False, True),
    ("mean_ttft_ms", "TTFT mean ms", False, True),
    ("p99_ttft_ms", "TTFT p99 ms", False, True),
    ("mean_e2el_ms", "E2EL mean ms", False, True),
    ("tokens_per_verify", "tok/verify", True, False),  # a rate of its own: 1.0 for ar, no ratio
    ("draft_acceptance_rate", "accept rate", True, False),
    ("decode_time_per_token_ms", "decode ms/tok", False, True),
    ("decode_output_throughput", "decode tok/s", True, True),
    ("prefill_time_share", "prefill GPU share", False, False),
]


def best_row(rows: list[dict], key: str, higher: bool) -> int | None:
    """Index of the best figure among rows that are not clairvoyant (the oracle is a reference,
    never a winner); None where fewer than two rows compete or none has the figure."""
    vals = [(r[key], i) for i, r in enumerate(rows) if r.get(key) is not None and not r.get("clairvoyant")]
    if len(rows) < 2 or not vals:
        return None
    return (max if higher else min)(vals)[1]
