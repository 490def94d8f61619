"""Page selection: Quest metadata and scoring kernel (Triton CPU interpreter), top pages,
SparseSpec-L scores from a verification, static window; all against plain references."""

import numpy as np
import pytest
import torch

from spsim.gpu_runtime import interpret

# TRITON_INTERPRET=1 must be set before triton is first imported. If something in this pytest
# process imported triton compiled already, these tests are run in a fresh process instead (below).
FRESH = interpret.can_interpret()
A, QK = interpret.load_interpreted() if FRESH else (None, None)

from spsim.gpu_runtime import selection as S  # noqa: E402
from spsim.gpu_runtime.pages import pages_for, selected_page_lists  # noqa: E402
from spsim.gpu_runtime.reference import mixed_attention_ref, quest_scores_ref, topk_pages_ref  # noqa: E402
from spsim.gpu_runtime.testing import Req, make_batch, rel_err, rng_for  # noqa: E402


@pytest.fixture(autouse=True)
def _interpreted(request):
    if not FRESH and request.node.name != "test_kernels_interpreted_or_rerun":
        pytest.skip("triton was imported compiled before this module: test_kernels_interpreted_or_rerun runs it")


def test_kernels_interpreted_or_rerun():
    if FRESH:
        from triton.runtime.interpreter import InterpretedFunction
        assert isinstance(QK._quest_score, InterpretedFunction)
    else:
        assert interpret.rerun_in_subprocess(__file__) == 0


def meta_from(b, hkv, d, chunks_rng):
    """PageMeta fed token by token chunks, in a random chunking, from the batch's cache."""
    meta = S.PageMeta(b.k_cache.shape[0], hkv, d, b.k_cache.dtype, "cpu")
    ps = b.k_cache.shape[2]
    kv = b.lists.kv_len_np.reshape(len(b.q_len), hkv)[:, 0]
    for r, n in enumerate(kv):
        pos = np.arange(n)
        pages = b.page_table[r].long()[pos // ps]
        offs = torch.as_tensor(pos % ps)
        cuts = np.sort(chunks_rng.choice(np.arange(1, n), size=min(3, n - 1), replace=False)) if n > 1 else []
        for sl in np.split(np.arange(n), cuts):
            meta.append(b.k_cache[pages[sl], :, offs[sl]], pages[sl], offs[sl])
    return meta, kv


def test_page_meta_matches_cache():
    rng = rng_for("meta")
    b = make_batch([Req("decode", 40), Req("decode", 3), Req("decode", 64)], 2, 4, 32, 16, torch.float32, "cpu", rng)
    meta, kv = meta_from(b, 2, 32, rng)
    for r, n in enumerate(kv):
        for p in range(pages_for(n, 16)):
            phys = int(b.page_table[r, p])
            toks = b.k_cache[phys, :, : min(16, n - p * 16)]  # [hkv, t, d]
            assert torch.equal(meta.kmin[phys], toks.amin(1)) and torch.equal(meta.kmax[phys], toks.amax(1))


@pytest.mark.parametrize("g", [1, 4, 8])
def test_quest_kernel_matches_reference_and_bounds(g):
    rng = rng_for(f"quest{g}")
    hkv, d, ps = 2, 32, 16
    b = make_batch([Req("decode", 150), Req("decode", 40)], hkv, g, d, ps, torch.float32, "cpu", rng)
    meta, kv = meta_from(b, hkv, d, rng)
    npg = torch.as_tensor(pages_for(kv, ps), dtype=torch.int32)
    q = torch.randn(2, hkv * g, d, generator=torch.Generator().manual_seed(int(rng.integers(2**31))))
    got = QK.quest_scores(q, meta, b.page_table, npg, sink=1, recent=2)
    ref = quest_scores_ref(q, meta.kmin, meta.kmax, b.page_table, npg.numpy(), 1, 2)
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(got), fin) and torch.equal(got[~fin], ref[~fin])
    assert torch.allclose(got[fin], ref[fin], rtol=1e-4, atol=1e-4)
    # an upper bound: for every page, summed over the group, >= the sum of each head's best q.k there
    for r in range(2):
        for h in range(hkv):
            for p in range(1, int(npg[r]) - 2):
                keys = b.k_cache[int(b.page_table[r, p]), h, : min(ps, int(kv[r]) - p * ps)]
                best = (q[r, h * g:(h + 1) * g] @ keys.T).amax(1).sum()
                assert got[r * hkv + h, p] >= best - 1e-4


def test_top_pages_ascending_with_sink_recent_and_full_budget():
    rng = rng_for("topk")
    kv = np.array([300, 40, 1000])
    ps, hkv = 16, 2
    budget = np.array([96, 4096, 160])
    counts = S.selection_counts(kv, budget, ps, 1, 2, hkv)
    n = np.repeat(pages_for(kv, ps), hkv)
    assert list(counts) == [6, 6, 3, 3, 10, 10]  # the 40-token request keeps all of its 3 pages
    sc = torch.full((len(n), int(n.max())), float("-inf"))
    for i, k in enumerate(n):
        sc[i, :k] = torch.as_tensor(rng.standard_normal(k), dtype=torch.float32)
        sc[i, 0] = sc[i, k - 2] = sc[i, k - 1] = float("inf")
    sel = S.top_pages(sc, counts)
    ref = topk_pages_ref(sc, counts)
    for i, c in enumerate(counts):
        row = sel[i, :c].tolist()
        assert row == ref[i] and row == sorted(row) and {0, n[i] - 2, n[i] - 1} <= set(row)


def test_static_window():
    sel, counts = S.select_static(np.array([500, 20]), np.array([128, 128]), 16, 1, sink=2)
    assert list(sel[0, : counts[0]]) == [0, 1] + list(range(32 - 6, 32))
    assert list(sel[1, : counts[1]]) == [0, 1]


def test_quest_selection_drives_sparse_draft_attention():
    """End to end: Quest picks pages, the selected lists feed the mixed kernel, reference agrees."""
    rng = rng_for("quest_draft")
    hkv, g, d, ps = 2, 4, 32, 16
    b = make_batch([Req("decode", 200), Req("decode", 90)], hkv, g, d, ps, torch.float16, "cpu", rng)
    meta, kv = meta_from(b, hkv, d, rng)
    sel, counts = S.select_quest(b.q, meta, b.page_table, kv, np.array([64, 48]), ps, sink=1, recent=1)
    lists = selected_page_lists(b.page_table, sel, counts, kv, hkv, ps)
    plan = A.plan_attention(b.q_len, lists, hkv * g, tokens_per_split=64, block_n=64)
    out = torch.full_like(b.q, float("nan"))
    A.mixed_attention(b.q, b.k_cache, b.v_cache, plan, out=out)
    ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, lists)
    assert not torch.isnan(out).any() and rel_err(out, ref) < 2e-3
    assert lists.count_np.tolist() == [4, 4, 3, 3]


def test_select_from_verify_scores():
    """SparseSpec-L: the pages a verification scored highest, plus sink and recent ones."""
    rng = rng_for("verify_scores")
    hkv, g, ps = 2, 4, 16
    b = make_batch([Req("verify", 150, q=9)], hkv, g, 32, ps, torch.float32, "cpu", rng)
    npg = int(b.lists.count_np[0])
    scores = torch.full((hkv, npg + 2), float("-inf"))
    A.mixed_attention(b.q, b.k_cache, b.v_cache, A.plan_attention(b.q_len, b.lists, hkv * g), page_scores=scores)
    kv_now = b.lists.kv_len_np[:1] + 20  # drafted 20 tokens since: two more pages (159 -> 179 tokens)
    sel, counts = S.select_from_scores(scores, [npg], kv_now, [96], ps, hkv, sink=1, recent=1)
    n_now = int(pages_for(kv_now, ps)[0])
    assert n_now == npg + 2
    for h in range(hkv):
        mid = scores[h, 1:npg]
        best = (torch.topk(mid, 3).indices + 1).tolist()  # 6 pages = sink + the 2 new ones + 3 best
        assert sel[h, : counts[h]].tolist() == sorted([0, *best, n_now - 2, n_now - 1])


def test_topk_kernel_ties_infinities_and_padding():
    """The Triton select kernel: +inf (kept) and -inf (past the end) scores, exact ties, counts
    from 1 to the whole row; ties go to the lower page."""
    rng = rng_for("topk_kernel")
    s = torch.as_tensor(rng.standard_normal((6, 70)), dtype=torch.float32)
    s[0, :4] = float("inf")
    s[1, 20:] = float("-inf")
    s[2, 10:30] = 1.5  # a block of equal scores straddling the threshold
    s[3] = torch.round(s[3])  # many ties
    s[4] = -s[4].abs()
    counts = np.array([9, 20, 15, 33, 70, 1])
    got = QK.topk_pages(s, torch.as_tensor(counts, dtype=torch.int32), 72)
    ref = topk_pages_ref(s, counts)
    for i, c in enumerate(counts):
        assert got[i, :c].tolist() == ref[i]
        assert (got[i, c:] == -1).all()
    assert S.top_pages(s, counts)[:, :70].tolist() == got[:, :70].tolist()
