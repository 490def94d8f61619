"""The sweep design keeps the points of the measured sweep (a point's id is a hash of its
composition; a resumed sweep measures only the points a file lacks), and the points added for the
fourth sweep cover mixed passes per method and short prefill chunks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from spsim.calibration.design import FIRST_MIXED, SHORT_MIXED, default_design
from spsim.calibration.measure import SWEEP_FRAC, _pages_needed_all
from spsim.calibration.records import read_measurements
from spsim.plan import DraftMethod

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests/fixtures/calibration"
MEAS = FIX / "unpadded-8b.measurements.jsonl"  # the fourth sweep (unpadded passes) and its extension
PADDED = FIX / "serial-8b.measurements.jsonl"  # padded, timed serially
SHIPPED = FIX / "shipped-8b.measurements.jsonl"  # the shipped profiles' sweeps: today's design, overlapped
SHIPPED_3B = FIX / "shipped-3b.measurements.jsonl"


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
    third = {m.point.key: m for m in recs if m.line < starts[1]}  # the third sweep (its first session)
    assert len(third) == 250
    gone = [m for k, m in third.items() if k not in keys]
    # every point of it is still in the design but those whose drafts shared pages (2026-12-02)
    assert gone and all(m.record.get("shared_pages") for m in gone)
    assert len(gone) <= 60
    later = {m.point.key for m in recs if m.line > starts[1]}  # the fourth sweep's new points
    assert len(later & keys) >= 0.95 * len(later)
    # what the design added: 8 of them the first drafts at mixed lengths, 21 chat traffic's decode batches
    assert len([p for p in design if p.key not in third]) <= 139


def test_new_points_cover_mixed_passes_and_short_chunks():
    design, _ = _design_of(MEAS)
    labels = Counter(p.label for p in design)
    held = Counter(p.label for p in design if p.heldout)
    for m in DraftMethod:
        assert labels[f"mixed:{m.label}"] >= 12, m  # (15+ before passes too large for the KV left)
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


def test_every_point_fits_the_sweeps_cache():
    """The sweep sizes its cache by the largest point (every request's pages, drafts' too), up to
    the KV the GPU leaves it: every point of the design fits there, so no drafting request shares
    pages with another (drafts sharing pages read them from L2: not what serving does)."""
    for path in (MEAS, PADDED):
        sessions, _ = read_measurements(path)
        s = sessions[0]
        m = s["model_shape"]
        bpp = s["page_size"] * m["layers"] * m["kv_heads"] * m["head_dim"] * 2 * 2
        sweep_max = int(s["free_bytes_after_weights"] * SWEEP_FRAC) // bpp
        design, _ = _design_of(path)
        need = [_pages_needed_all(p, s["page_size"]) for p in design]
        assert max(need) <= sweep_max
        assert max(need) > 0.8 * sweep_max  # the memory edge is in the design


def test_the_padded_sweep_measured_the_whole_design():
    """The shipped measurements (one padded session) hold every point of the design it was built
    from, each once, none failed; today's design differs from it in exactly two ways: no point
    whose drafts had to share KV pages (more KV than the sweep's cache), and the drafting
    batches at the memory edge that replace them (and, added later, fixed-k passes of mixed
    lengths at the memory edge, first drafts at mixed lengths and chat traffic's decode batches)."""
    design, recs = _design_of(PADDED)
    sessions, _ = read_measurements(PADDED)
    assert len(sessions) == 1 and sessions[0]["padded"] is True
    keys = [m.point.key for m in recs]
    assert len(keys) == len(set(keys))
    by_key = {m.point.key: m for m in recs}
    now = {p.key: p for p in design}
    dropped = [by_key[k] for k in set(keys) - set(now)]
    added = [now[k] for k in set(now) - set(keys)]
    assert len(dropped) == 59 and all(m.record["shared_pages"] for m in dropped)
    assert not any(by_key[k].record["shared_pages"] for k in set(keys) & set(now))
    assert added and all((p.group == "draft" and p.note in ("memory edge", FIRST_MIXED))
                         or (p.group == "mixed" and p.note == "memory edge, mixed lengths")
                         or p.note == SHORT_MIXED for p in added)
    s = sessions[0]
    cache = int(s["sweep_cache_pages"])
    for p in added:  # each drafting request on pages of its own, in the sweep's cache
        if p.note == SHORT_MIXED:
            continue
        assert 1 < len(p.drafts) and _pages_needed_all(p, s["page_size"]) <= cache


def test_the_shipped_sweep_measured_todays_design():
    """The shipped measurements (a sweep and its resumption, both overlapped and padded)
    hold every point of today's design but the first drafts at mixed lengths and chat traffic's
    decode batches added after them, and
    of the Mooncake fixed-k points file they were taken with, each once but the noisy ones timed
    again (`retime`), none failed and none whose drafts shared pages."""
    from spsim.calibration.trace_points import read_points

    for name, points in ((SHIPPED, "points_mooncake50_fixed-k4.jsonl"), (SHIPPED_3B, "points_mooncake50_fixed-k4_3b.jsonl")):
        design, recs = _design_of(name)
        sessions, _ = read_measurements(name)
        assert len(sessions) >= 2 and all(x["padded"] is True and x["overlap"] is True for x in sessions)
        extra = {p.key for p in read_points(ROOT / "benchmarks/data" / points)}
        keys = [m.point.key for m in recs]
        again = [m.point.key for m in recs if m.record.get("retime")]
        later = [p for p in design if p.note == FIRST_MIXED]  # added to the design after this sweep
        assert len(later) == 8 and all(len({c for c, _ in p.drafts}) > 1 and {x for _, x in p.drafts} == {0}
                                       for p in later)
        later += [p for p in design if p.note == SHORT_MIXED]  # and these after that
        assert sorted(set(keys)) == sorted({p.key for p in design if p not in later} | extra)
        assert Counter(keys) == Counter(list(set(keys)) + again)  # once each, the noisy ones twice
        assert all(m.ok and not m.record["shared_pages"] for m in recs)


def test_design_holds_chat_traffics_decode_batches():
    """Decode batches of many requests at mixed short contexts (a chat trace's): 6-48 requests of
    64-4K tokens, plain and verifying, some held out; what the live `ar` runs priced worst."""
    design, _ = _design_of(MEAS)
    short = [p for p in design if p.note == SHORT_MIXED]
    ar = [p for p in short if p.group == "ar"]
    assert len(ar) >= 16 and len(short) - len(ar) >= 3
    for p in short:
        ctx = [c for c, _ in p.verifies]
        assert len(ctx) >= 6 and max(ctx) <= 4096 and min(ctx) >= 64 and max(ctx) >= 4 * min(ctx)
    assert any(p.heldout for p in ar) and not all(p.heldout for p in ar)
