"""Each draft-KV method reads the pages it should, layer by layer.

A recording attention function sees, per layer, the page lists the pass hands the kernel and the
query; the expected pages are recomputed with the plain selectors of `selection.py` (Quest bounds,
stored verification scores, layer 0's scores, the static window) and compared row by row. Runs on
the CPU with the PyTorch reference paths."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spsim.gpu_runtime import dispatch  # noqa: E402
from spsim.gpu_runtime.draft_store import DraftStore  # noqa: E402
from spsim.gpu_runtime.kv_cache import PagedKVCache  # noqa: E402
from spsim.gpu_runtime.model import Transformer  # noqa: E402
from spsim.gpu_runtime.model_config import get_config  # noqa: E402
from spsim.gpu_runtime.pages import pages_for  # noqa: E402
from spsim.gpu_runtime.pass_attention import RECENT, SINK, DraftRows, PassAttention, budget_pages  # noqa: E402
from spsim.gpu_runtime.reference import mixed_attention_ref  # noqa: E402
from spsim.gpu_runtime.selection import PageMeta, select_from_scores, select_quest, select_static  # noqa: E402
from spsim.plan import DraftMethod as M  # noqa: E402

PS, BUDGET, PAGES = 16, 96, 200
CTX = [700, 1000, 333]


class Recorder:
    """attention_fn that keeps each layer's query, page lists and page scores."""

    def __init__(self):
        self.calls = []

    def __call__(self, q, kc, vc, q_len, lists, page_scores=None):
        out = mixed_attention_ref(q, kc, vc, q_len, lists, page_scores=page_scores)
        # the lists' page ids are a slab each layer rewrites: snapshot them
        snap = type(lists)(lists.start.clone(), lists.count.clone(), lists.last_len.clone(), lists.indices.clone(),
                           lists.count_np, lists.last_len_np, lists.num_kv_heads, lists.page_size)
        self.calls.append({"q": q.clone(), "lists": snap, "scores": None if page_scores is None else page_scores.clone()})
        return out


def rows_of(lists, rows):
    """Physical page ids per row (host lists)."""
    st, ct, ix = lists.start.tolist(), lists.count.tolist(), lists.indices.tolist()
    return [ix[st[r]:st[r] + ct[r]] for r in rows]


@pytest.fixture(scope="module")
def world():
    with dispatch.reference_only():
        cfg = get_config("tiny")
        model = Transformer.random(cfg, seed=0, dtype=torch.float64)
        rng = np.random.default_rng(0)
        perm = rng.permutation(PAGES)
        need = pages_for(np.asarray(CTX) + 40, PS)
        off = np.concatenate([[0], np.cumsum(need)])
        tables = [perm[off[i]:off[i + 1]].tolist() for i in range(len(CTX))]
        yield cfg, model, tables


def fresh(cfg):
    cache = PagedKVCache(cfg, PAGES, PS, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    cache.k.copy_(torch.randn(cache.k.shape, generator=g, dtype=torch.float64))
    cache.v.copy_(torch.randn(cache.v.shape, generator=g, dtype=torch.float64))
    meta = [PageMeta(PAGES, cfg.kv_heads, cfg.head_dim, torch.float64, "cpu") for _ in range(cfg.layers)]
    return cache, meta


def run_pass(model, cache, tables, ctx, qlen, drafts, method, store, meta, score_rows=None):
    rec = Recorder()
    attn = PassAttention(cache, list(range(len(ctx))), tables, ctx, qlen, 0, drafts, int(method), BUDGET, store, meta,
                         score_rows, attention_fn=rec)
    tok = torch.arange(int(sum(qlen))) % model.cfg.vocab
    with dispatch.reference_only():
        model(tok, attn.positions, attn)
    return rec.calls


def phys(tables, r, logical):
    return [tables[r][p] for p in logical]


def expect_rows(tables, sel, counts, hkv):
    sel = sel.tolist()
    return [phys(tables, i // hkv, sel[i][:counts[i]]) for i in range(len(sel))]


def draft_rows(n, first, ctx, pos):
    kv = [c + p + 1 for c, p in zip(ctx, pos)]
    return DraftRows(list(range(n)), kv, list(first), list(ctx)), kv


@pytest.mark.parametrize("method", [M.VERIFY_QUEST, M.STEP_QUEST])
def test_quest_methods_read_the_top_bound_pages(world, method):
    cfg, model, tables = world
    cache, meta = fresh(cfg)
    hkv, n = cfg.kv_heads, len(CTX)
    store = DraftStore(cfg.layers, hkv, budget_pages(BUDGET, PS), "cpu")
    # first drafts, then second drafts of the same runs (the pages the run reached are appended)
    picked = {}
    for pos in (0, 1):
        d, kv = draft_rows(n, [pos == 0] * n, CTX, [pos] * n)
        ctx = [c + pos for c in CTX]
        calls = run_pass(model, cache, tables, ctx, [1] * n, d, method, store, meta)
        tt = torch.as_tensor(np.asarray([t + [0] * (128 - len(t)) for t in tables]))
        for layer, call in enumerate(calls):
            got = rows_of(call["lists"], range(n * hkv))
            if method == M.STEP_QUEST or pos == 0:
                with dispatch.reference_only():
                    sel, counts = select_quest(call["q"], meta[layer], tt, kv, BUDGET, PS, SINK, RECENT)
                want = expect_rows(tables, sel, counts, hkv)
                picked[layer] = want
            else:  # the run's first selection, plus pages reached since (none here: same page)
                want = picked[layer]
            assert got == want, (method, pos, layer)
            assert all(len(r) == min(pages_for(k, PS), budget_pages(BUDGET, PS)) for r, k in
                       zip(got, np.repeat(kv, hkv)))


def test_verify_quest_keeps_the_run_selection_and_adds_new_pages(world):
    cfg, model, tables = world
    cache, meta = fresh(cfg)
    hkv = cfg.kv_heads
    ctx = [30]  # drafts at positions 30, 31 (page 1) and 32 (page 2: new to the run)
    store = DraftStore(cfg.layers, hkv, budget_pages(BUDGET, PS), "cpu")
    first = None
    for pos in range(3):
        d, kv = draft_rows(1, [pos == 0], ctx, [pos])
        calls = run_pass(model, cache, tables[:1], [ctx[0] + pos], [1], d, M.VERIFY_QUEST, store, meta)
        got = [rows_of(c["lists"], range(hkv)) for c in calls]
        if pos == 0:
            first = got
        elif pos == 1:
            assert got == first
        else:
            assert [[r + [tables[0][2]] for r in g] for g in first] == got


def test_static_window(world):
    cfg, model, tables = world
    cache, meta = fresh(cfg)
    hkv, n = cfg.kv_heads, len(CTX)
    d, kv = draft_rows(n, [True] * n, CTX, [0] * n)
    calls = run_pass(model, cache, tables, CTX, [1] * n, d, M.STATIC, None, meta)
    sel, counts = select_static(kv, BUDGET, PS, hkv, SINK)
    want = expect_rows(tables, sel, counts, hkv)
    for call in calls:
        assert rows_of(call["lists"], range(n * hkv)) == want


def test_step_layer_ranks_by_layer_zero(world):
    cfg, model, tables = world
    cache, meta = fresh(cfg)
    hkv, n = cfg.kv_heads, len(CTX)
    d, kv = draft_rows(n, [True] * n, CTX, [0] * n)
    calls = run_pass(model, cache, tables, CTX, [1] * n, d, M.STEP_LAYER, None, meta)
    full = [phys(tables, r // hkv, range(pages_for(kv[r // hkv], PS))) for r in range(n * hkv)]
    assert rows_of(calls[0]["lists"], range(n * hkv)) == full
    s0 = calls[0]["scores"][:n * hkv]
    with dispatch.reference_only():
        sel, counts = select_from_scores(s0, pages_for(kv, PS), kv, BUDGET, PS, hkv, SINK, RECENT)
    want = expect_rows(tables, sel, counts, hkv)
    for call in calls[1:]:
        assert rows_of(call["lists"], range(n * hkv)) == want


def test_verify_attn_ranks_by_the_last_verification(world):
    cfg, model, tables = world
    cache, meta = fresh(cfg)
    hkv, n = cfg.kv_heads, len(CTX)
    store = DraftStore(cfg.layers, hkv, budget_pages(BUDGET, PS), "cpu", slots=2, scores=True)  # grows to 3
    # a verification of 3 tokens per request writes page scores; the runs then start 3 tokens later
    ver = run_pass(model, cache, tables, CTX, [3] * n, DraftRows(), M.VERIFY_ATTN, store, meta, score_rows=[0, 1, 2])
    ctx = [c + 3 for c in CTX]
    d, kv = draft_rows(n, [True] * n, ctx, [0] * n)
    calls = run_pass(model, cache, tables, ctx, [1] * n, d, M.VERIFY_ATTN, store, meta)
    scored = pages_for(np.asarray(CTX) + 3, PS)
    for layer, call in enumerate(calls):
        s = ver[layer]["scores"][:n * hkv]
        with dispatch.reference_only():
            sel, counts = select_from_scores(s, scored, kv, BUDGET, PS, hkv, SINK, RECENT)
        assert rows_of(call["lists"], range(n * hkv)) == expect_rows(tables, sel, counts, hkv), layer
