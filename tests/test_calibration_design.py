"""The sweep design keeps the points of the measured sweep (a point's id is a hash of its
composition; a resumed sweep measures only the points a file lacks), and the points added for the
fourth sweep cover mixed passes per method and short prefill chunks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from spsim.calibration.design import default_design
from spsim.calibration.measure import SWEEP_FRAC, _pages_needed, _pages_needed_all
from spsim.calibration.records import read_measurements
from spsim.plan import DraftMethod

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "benchmarks/results/calibration/sweep3_unpadded/h200-llama-3.1-8b.measurements.jsonl"
PADDED = ROOT / "benchmarks/results/calibration/h200-llama-3.1-8b.measurements.jsonl"  # the padded sweep


def _design_of(path):
    """The design the measuring session built: its window and the KV tokens of its cache."""
    sessions, recs = read_measurements(path)
    s = sessions[0]
    m = s["model_shape"]
    bpp = s["page_size"] * m["layers"] * m["kv_heads"] * m["head_dim"] * 2 * 2  # K and V, bf16
    kv_tokens = int(s["free_bytes_after_weights"] * SWEEP_FRAC) // bpp * s["page_size"]
    return default_design(m["max_context"], kv_tokens), recs


def _sessions_lines(path):
    return [i for i, line in enumerate(path.read_text().splitlines(), 1) if '"spsim_calibration"' in line]


def test_measured_points_keep_their_ids():
    design, recs = _design_of(MEAS)
    keys = {p.key for p in design}
    starts = _sessions_lines(MEAS) + [10 ** 9]
    third = {m.point.key for m in recs if m.line < starts[1]}  # the third sweep (its first session)
    assert len(third) == 250 and third <= keys  # every point of it is still in the design
    later = {m.point.key for m in recs if m.line > starts[1]}  # the fourth sweep's new points
    assert len(later & keys) >= 0.95 * len(later)
    assert len([p for p in design if p.key not in third]) <= 110  # what the design added


def test_new_points_cover_mixed_passes_and_short_chunks():
    design, _ = _design_of(MEAS)
    labels = Counter(p.label for p in design)
    held = Counter(p.label for p in design if p.heldout)
    for m in DraftMethod:
        assert labels[f"mixed:{m.label}"] >= 15, m
        assert held[f"mixed:{m.label}"] >= 2, m
        mixed = [p for p in design if p.group == "mixed" and p.method == m]
        ks = {p.verifies[0][1] - 1 for p in mixed}
        assert {2, 4, 8} <= ks, (m, ks)  # 16-, 32- and 64-row attention tiles for a GQA group of 4
        for p in mixed:  # a fixed-k pass: drafts at positions below k, verifies of k + 1 tokens
            k = p.verifies[0][1] - 1
            assert all(q == k + 1 for _, q in p.verifies) and all(0 <= pos < k for _, pos in p.drafts)
    short = [p for p in design if p.group == "prefill" and max(n for _, n in p.prefill) <= 512]
    assert len(short) >= 20
    assert sum(1 for p in short if p.verifies and not p.drafts) >= 10  # beside decodes
    assert any(p.drafts for p in short)  # beside a fixed-k / ASPIRE batch


def test_new_points_fit_the_cache_of_the_resumed_sweep():
    """A resumed sweep sizes its cache by the largest point it measures: the new points' requests
    all get pages of their own there (drafts sharing pages read them from L2: not what serving
    does)."""
    design, recs = _design_of(MEAS)
    third = {m.point.key for m in recs if m.line < _sessions_lines(MEAS)[1]}
    new = [p for p in design if p.key not in third]
    cache = max(_pages_needed(p, 16) for p in new)
    assert [p.key for p in new if _pages_needed_all(p, 16) > cache] == []


def test_the_padded_sweep_measured_the_whole_design():
    """The shipped measurements (one padded session) hold every point of the design it was built
    from, each once, none failed."""
    design, recs = _design_of(PADDED)
    sessions, _ = read_measurements(PADDED)
    assert len(sessions) == 1 and sessions[0]["padded"] is True
    keys = [m.point.key for m in recs]
    assert len(keys) == len(set(keys)) == len(design) and set(keys) == {p.key for p in design}
