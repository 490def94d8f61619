"""Graph replay of decode-like passes: the static buffers a captured graph reads are loaded right.

On the CPU (`capture=False`, kernels under the Triton interpreter) the same buffer path runs
eagerly; passes of one shape reuse one set of buffers, a new shape makes another, and every pass
gives the logits of the plain path. The GPU test captures real graphs (tests/gpu)."""

from __future__ import annotations

import numpy as np
import pytest


def _graph_shapes():
    """benchmarks/graph_shapes.py, the CPU probe of a run's graph keys (not a package module)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "graph_shapes.py"
    spec = importlib.util.spec_from_file_location("graph_shapes", path)
    gs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gs)
    return gs

torch = pytest.importorskip("torch")


def test_static_buffers_reload_per_pass():
    from spsim.gpu_runtime.graphs import GraphedPasses
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention

    torch.manual_seed(0)
    model = Transformer.random(get_config("tiny"), seed=0)  # fp32: the interpreter cannot do bf16
    cache = PagedKVCache(model.cfg, 96, 16)
    cache.k.normal_()
    cache.v.normal_()
    from spsim.gpu_runtime.selection import PageMeta

    meta = [PageMeta(96, model.cfg.kv_heads, model.cfg.head_dim, torch.float32, "cpu") for _ in range(model.cfg.layers)]
    meta_plain = [PageMeta(96, model.cfg.kv_heads, model.cfg.head_dim, torch.float32, "cpu")
                  for _ in range(model.cfg.layers)]
    g = GraphedPasses(model, cache, capture=False, capture_after=1)
    rng = np.random.default_rng(1)
    perm = rng.permutation(96)
    tables = [perm[0:30].tolist(), perm[30:60].tolist(), perm[60:90].tolist()]
    # two passes of one shape (contexts grow by a token), then one of another (a verify of 3)
    for ctxs, q in (([100, 230, 50], [1, 1, 1]), ([101, 231, 51], [1, 1, 1]), ([102, 232, 52], [3, 1, 1])):
        attn = PassAttention(cache, [0, 1, 2], tables, ctxs, q, 0, DraftRows(), 0, 2048, {}, meta)
        assert g.eligible(attn)
        tok = torch.randint(0, model.cfg.vocab, (sum(q),))
        rows = torch.arange(sum(q))
        want = model(tok, attn.positions, PassAttention(cache, [0, 1, 2], tables, ctxs, q, 0, DraftRows(), 0, 2048,
                                                        {}, meta_plain), logit_rows=rows)
        got = g.forward(attn, tok, rows)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(g.graphs) == 2  # the second pass reused the first one's buffers
    for a, b in zip(meta, meta_plain):  # Quest page bounds kept current on the graph path too
        assert torch.equal(a.kmin, b.kmin) and torch.equal(a.kmax, b.kmax)
        assert torch.isfinite(a.kmin).any()


@pytest.mark.parametrize("method", [0, 1, 2, 3, 4])
def test_drafting_passes_replay_alike(method):
    """Drafting passes of every draft-KV method through the captured-pass path: a pass of a shape
    seen before loads its inputs into the first one's tensors (selection indices, slots, masks,
    the page-id slab) and gives the plain path's logits; the runs' stored selections and the
    verification's page scores stay the plain path's too."""
    from spsim.gpu_runtime.draft_store import DraftStore
    from spsim.gpu_runtime.graphs import GraphedPasses
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention, budget_pages
    from spsim.gpu_runtime.selection import PageMeta

    cfg = get_config("tiny")
    model = Transformer.random(cfg, seed=0)
    worlds = []
    for _ in range(2):  # graph path, plain path: the same start, each its own cache and store
        torch.manual_seed(0)
        cache = PagedKVCache(cfg, 96, 16)
        cache.k.normal_()
        cache.v.normal_()
        meta = [PageMeta(96, cfg.kv_heads, cfg.head_dim, torch.float32, "cpu") for _ in range(cfg.layers)]
        for layer in range(cfg.layers):  # page bounds of the whole cache, as if written token by token
            pages = torch.arange(96).repeat_interleave(16)
            meta[layer].append(cache.k[layer].permute(0, 2, 1, 3).reshape(96 * 16, cfg.kv_heads, -1),
                               pages, torch.arange(16).repeat(96))
        store = DraftStore(cfg.layers, cfg.kv_heads, budget_pages(64, 16), "cpu", slots=2, scores=method == 3)
        worlds.append((cache, meta, store))
    g = GraphedPasses(model, worlds[0][0], capture=False, capture_after=1)
    perm = np.random.default_rng(1).permutation(96)
    tables = [perm[0:30].tolist(), perm[30:60].tolist(), perm[60:90].tolist()]
    ctx0 = [300, 430, 150]
    # a verification of 3 tokens (page scores for verify-attn), then runs of drafts at positions
    # 0, 1, 2, 3 (1 and 2, then 3 with its new page... share shapes), then a mixed pass
    passes = [(ctx0, [3, 3, 3], None)]
    base = [c + 3 for c in ctx0]
    for pos in range(4):
        passes.append(([c + pos for c in base], [1, 1, 1], DraftRows([0, 1, 2], [c + pos + 1 for c in base],
                                                                      [pos == 0] * 3, base)))
    passes.append(([base[0] + 4, base[1] + 4, base[2]], [1, 1, 5], DraftRows([0, 1], [base[0] + 5, base[1] + 5],
                                                                              [False, False], base[:2])))
    for ctxs, q, drafts in passes:
        drafts = drafts or DraftRows()
        score_rows = [i for i in range(3) if i >= len(drafts.rids)]
        tok = torch.randint(0, cfg.vocab, (sum(q),))
        rows = torch.arange(sum(q))
        out = []
        for w, (cache, meta, store) in enumerate(worlds):
            attn = PassAttention(cache, [0, 1, 2], tables, ctxs, q, 0, drafts, method, 64, store, meta, score_rows)
            if w == 0:
                g.cache = cache
                out.append(g.forward(attn, tok, rows))
            else:
                out.append(model(tok, attn.positions, attn, logit_rows=rows))
        torch.testing.assert_close(out[0], out[1], rtol=1e-5, atol=1e-5)
    assert len(g.graphs) < len(passes)  # some passes reused a captured one
    (c0, m0, s0), (c1, m1, s1) = worlds
    assert torch.equal(s0.sel, s1.sel)
    assert torch.equal(c0.k, c1.k)
    if method == 3:  # the scored pages of each kept row (columns past them are never read)
        assert (s0.scored_pages == s1.scored_pages).all() and s0.scored_pages[:3].min() > 0
        for slot in range(3):
            n = int(s0.scored_pages[slot])
            rows = slice(slot * cfg.kv_heads, (slot + 1) * cfg.kv_heads)
            assert torch.equal(s0.scores[:, rows, :n], s1.scores[:, rows, :n])


def test_a_shape_is_captured_when_it_comes_back():
    """With capture_after=2 a shape's first pass runs eagerly (no buffers kept), its second is
    captured, later ones replay; every pass gives the plain path's logits."""
    from spsim.gpu_runtime.graphs import GraphedPasses
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention

    model = Transformer.random(get_config("tiny"), seed=0)
    cache = PagedKVCache(model.cfg, 64, 16)
    cache.k.normal_()
    cache.v.normal_()
    g = GraphedPasses(model, cache, capture=False, capture_after=2)
    tables = [list(range(0, 30)), list(range(30, 60))]
    counts = []
    for ctx in ([100, 200], [101, 201], [102, 202], [103, 203]):
        attn = PassAttention(cache, [0, 1], tables, ctx, [1, 1], 0, DraftRows(), 0, 2048, None, None)
        tok = torch.tensor([3, 5])
        rows = torch.arange(2)
        want = model(tok, attn.positions, PassAttention(cache, [0, 1], tables, ctx, [1, 1], 0, DraftRows(), 0, 2048,
                                                        None, None), logit_rows=rows)
        torch.testing.assert_close(g.forward(attn, tok, rows), want, rtol=1e-5, atol=1e-5)
        counts.append((g.eager, len(g.graphs)))
    assert counts == [(1, 0), (1, 1), (1, 1), (1, 1)]


@pytest.mark.parametrize("method", [1, 3])
def test_prefill_passes_replay_alike(method):
    """A pass with a prefill chunk (planned apart) beside drafts and a verification goes through
    the captured-pass path: the next chunk of the same size at a later context reuses the first
    pass's buffers and gives the plain path's logits; the KV and the kept page scores match."""
    from spsim.gpu_runtime.draft_store import DraftStore
    from spsim.gpu_runtime.graphs import GraphedPasses
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention, budget_pages
    from spsim.gpu_runtime.selection import PageMeta

    cfg = get_config("tiny")
    model = Transformer.random(cfg, seed=0)
    worlds = []
    for _ in range(2):
        torch.manual_seed(0)
        cache = PagedKVCache(cfg, 96, 16)
        cache.k.normal_()
        cache.v.normal_()
        store = DraftStore(cfg.layers, cfg.kv_heads, budget_pages(64, 16), "cpu", slots=4, scores=method == 3)
        meta = [PageMeta(96, cfg.kv_heads, cfg.head_dim, torch.float32, "cpu") for _ in range(cfg.layers)]
        for layer in range(cfg.layers):
            meta[layer].append(cache.k[layer].permute(0, 2, 1, 3).reshape(96 * 16, cfg.kv_heads, -1),
                               torch.arange(96).repeat_interleave(16), torch.arange(16).repeat(96))
        worlds.append((cache, store, meta))
    g = GraphedPasses(model, worlds[0][0], capture=False, capture_after=1)
    perm = np.random.default_rng(2).permutation(96)
    tables = [perm[0:30].tolist(), perm[30:60].tolist(), perm[60:90].tolist()]
    for chunk_at in (0, 40):  # a 40-token chunk (160 rows: 128-row tiles), then the next one
        ctxs, q = [chunk_at, 300, 200], [40, 1, 3]
        drafts = DraftRows([1], [301], [True], [300])
        tok = torch.randint(0, cfg.vocab, (sum(q),))
        rows = torch.tensor([39, 40, 41, 42, 43])
        out = []
        for w, (cache, store, meta) in enumerate(worlds):
            attn = PassAttention(cache, [0, 1, 2], tables, ctxs, q, 1, drafts, method, 64, store, meta, [0, 2])
            assert attn.split is not None and attn.split.tolist() == [0]
            if w == 0:
                attn.graphable = True
                assert g.eligible(attn)
                g.cache = cache
                out.append(g.forward(attn, tok, rows))
            else:
                out.append(model(tok, attn.positions, attn, logit_rows=rows))
        torch.testing.assert_close(out[0], out[1], rtol=1e-5, atol=1e-5, msg=lambda m: f'chunk at {chunk_at}: ' + m)
    assert len(g.graphs) == 1  # the second chunk reused the first one's buffers
    (c0, s0, m0), (c1, s1, m1) = worlds
    assert torch.equal(c0.k, c1.k) and torch.equal(m0[1].kmax, m1[1].kmax)
    if method == 3:
        assert torch.equal(s0.scores, s1.scores)


@pytest.mark.parametrize("method", [1, 3])
def test_first_draft_selection_padded_to_the_drafting_rows(method):
    """Padded passes (`DraftRows.pad_first`): a pass with any first drafts selects for as many
    entries as it has drafting rows, the extra ones over one page into a scratch slot. Logits,
    the KV written and every real run's stored selection are those of the unpadded pass."""
    from spsim.gpu_runtime.draft_store import DraftStore
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.pass_attention import SELECT_PAD_RID, DraftRows, PassAttention, budget_pages
    from spsim.gpu_runtime.selection import PageMeta

    cfg = get_config("tiny")
    model = Transformer.random(cfg, seed=0)
    worlds = []
    for _ in range(2):  # padded, unpadded
        torch.manual_seed(0)
        cache = PagedKVCache(cfg, 96, 16)
        cache.k.normal_()
        cache.v.normal_()
        meta = [PageMeta(96, cfg.kv_heads, cfg.head_dim, torch.float32, "cpu") for _ in range(cfg.layers)]
        for layer in range(cfg.layers):
            pages = torch.arange(96).repeat_interleave(16)
            meta[layer].append(cache.k[layer].permute(0, 2, 1, 3).reshape(96 * 16, cfg.kv_heads, -1),
                               pages, torch.arange(16).repeat(96))
        store = DraftStore(cfg.layers, cfg.kv_heads, budget_pages(64, 16), "cpu", slots=2, scores=method == 3)
        worlds.append((cache, meta, store))
    perm = np.random.default_rng(2).permutation(96)
    tables = [perm[0:30].tolist(), perm[30:60].tolist(), perm[60:90].tolist()]
    ctx0 = [300, 430, 150]
    base = [c + 3 for c in ctx0]
    passes = [(ctx0, [3, 3, 3], None, 0),  # a verification (page scores for verify-attn)
              (base, [1, 1, 1], DraftRows([0, 1, 2], [c + 1 for c in base], [True] * 3, base), 4),
              ([c + 1 for c in base], [1, 1, 1], DraftRows([0, 1, 2], [c + 2 for c in base], [False] * 3, base), 4),
              # request 1 starts a new run beside two later drafts: one real entry, three padding ones
              ([base[0] + 2, base[1] + 2, base[2] + 2], [1, 1, 1],
               DraftRows([0, 1, 2], [base[0] + 3, base[1] + 3, base[2] + 3], [False, True, False],
                         [base[0], base[1] + 2, base[2]]), 4)]
    nf = []
    for ctxs, q, drafts, pad in passes:
        drafts = drafts or DraftRows()
        score_rows = [i for i in range(3) if i >= len(drafts.rids)]
        tok = torch.randint(0, cfg.vocab, (sum(q),))
        rows = torch.arange(sum(q))
        out = []
        for w, (cache, meta, store) in enumerate(worlds):
            d = DraftRows(drafts.rids, drafts.kv_len, drafts.first, drafts.run_start, pad if w == 0 else 0)
            attn = PassAttention(cache, [0, 1, 2], tables, ctxs, q, 0, d, method, 64, store, meta, score_rows)
            out.append(model(tok, attn.positions, attn, logit_rows=rows))
            if w == 0:
                nf.append(getattr(attn, "_nf", 0))
        torch.testing.assert_close(out[0], out[1], rtol=1e-5, atol=1e-5)
    assert nf == [0, 4, 0, 4]  # padded to the drafting rows' count wherever a run starts
    (c0, _, s0), (c1, _, s1) = worlds
    assert torch.equal(c0.k, c1.k) and SELECT_PAD_RID in s0.slot and SELECT_PAD_RID not in s1.slot
    for rid in range(3):
        assert torch.equal(s0.sel[:, s0.slot[rid]], s1.sel[:, s1.slot[rid]])


def test_padding_filler_does_not_set_the_attention_tile():
    """The filler that brings a padded pass's tokens to a bucket has a long query; the pass's tile
    stays the one its real requests need (the executor sets `tile_q`), the filler runs in several
    query blocks of it, and the output still matches the reference."""
    from spsim.gpu_runtime import dispatch
    from spsim.gpu_runtime.attention import choose_block_m
    from spsim.gpu_runtime.kv_cache import PagedAttention, PagedKVCache
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.reference import mixed_attention_ref

    if not dispatch.use_triton("cpu"):
        pytest.fail("the Triton interpreter should be on for the CPU tests (conftest)")
    cfg = get_config("tiny")
    cache = PagedKVCache(cfg, 64, 16)
    cache.k.normal_()
    cache.v.normal_()
    tables = [list(range(0, 20)), list(range(20, 40)), list(range(40, 44))]
    q_len = [3, 1, 40]  # a verification, a decode, the filler
    attn = PagedAttention(cache, tables, [200, 150, 0], q_len)
    g = cfg.q_heads // cfg.kv_heads
    tall = attn._plan(attn.lists, cfg.q_heads)
    attn2 = PagedAttention(cache, tables, [200, 150, 0], q_len)
    attn2.tile_q = 3
    plan = attn2._plan(attn2.lists, cfg.q_heads)
    assert plan.block_m == choose_block_m(np.array([3, 1]), g) < tall.block_m
    q = torch.randn(sum(q_len), cfg.q_heads, cfg.head_dim)
    k = torch.randn(sum(q_len), cfg.kv_heads, cfg.head_dim)
    v = torch.randn_like(k)
    out = attn2(0, q, k, v)
    ref = mixed_attention_ref(q, cache.k[0], cache.v[0], attn2.q_len, attn2.lists)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_prefill_chunk_runs_in_an_attention_launch_of_its_own():
    """A pass of a prefill chunk beside decodes plans the chunk apart (128-row tiles) and the
    decodes in their own short tile; the output matches the reference. A lone chunk, or a short
    one (its rows fit a short tile), is not split."""
    from spsim.gpu_runtime import dispatch
    from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention, tall_prefill
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.reference import mixed_attention_ref

    if not dispatch.use_triton("cpu"):
        pytest.fail("the Triton interpreter should be on for the CPU tests (conftest)")
    cfg = get_config("tiny")
    g = cfg.q_heads // cfg.kv_heads
    cache = PagedKVCache(cfg, 64, 16)
    cache.k.normal_()
    cache.v.normal_()
    tables = [list(range(0, 20)), list(range(20, 40)), list(range(40, 50))]
    q_len = [40, 1, 1]  # a prefill chunk, two decodes
    attn = PassAttention(cache, [0, 1, 2], tables, [100, 150, 70], q_len, 1, DraftRows(), 1, 64, None, None)
    plan = attn._plan(attn.lists, cfg.q_heads)
    assert plan.tall is not None and plan.tall.block_m == 128 and plan.block_m == 16
    assert set(plan.tall.work[:, 0].tolist()) == {0} and set(plan.work[:, 0].tolist()) == {1, 2}
    q = torch.randn(sum(q_len), cfg.q_heads, cfg.head_dim)
    k = torch.randn(sum(q_len), cfg.kv_heads, cfg.head_dim)
    v = torch.randn_like(k)
    out = attn(0, q, k, v)
    ref = mixed_attention_ref(q, cache.k[0], cache.v[0], attn.q_len, attn.lists)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert tall_prefill([40], 1, g) is None  # nothing to split from
    assert tall_prefill([64 // g, 1], 1, g) is None  # fits a 64-row tile
    assert tall_prefill([64 // g + 1, 1], 1, g).tolist() == [0]


def test_graph_shapes_counts_a_run_without_a_gpu():
    """benchmarks/graph_shapes.py drives the runtime's executor with a stand-in model: every
    graphable pass is counted once as a replay, a capture or an eager pass, and a run that keeps its
    composition (ar) has far fewer shapes than passes."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "graph_shapes.py"
    spec = importlib.util.spec_from_file_location("graph_shapes", path)
    gs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gs)
    runs = {p: gs.count_shapes("4x4096", p, 24, kv_pages=2048) for p in ("ar", "fixed-k:k=3")}
    for r in runs.values():
        assert r["graphable_passes"] == r["replay"] + r["capture"] + r["eager"] > 0
        assert 0 < r["distinct_shapes"] <= r["graphable_passes"]
    ar = runs["ar"]
    assert ar["distinct_shapes"] < ar["graphable_passes"] / 2 and ar["replay"] > 0
    assert runs["fixed-k:k=3"]["distinct_by_part"]["drafting"] > 1


def test_graph_shapes_rehearsal_meets_an_offline_runs_every_shape():
    """`count_shapes` with a shared `seen` set (graph_shapes.py --rehearse): offline, the clock does
    not shape the batches, so a second run meets no shape the first did not; the first fills `seen`."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "graph_shapes.py"
    spec = importlib.util.spec_from_file_location("graph_shapes", path)
    gs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gs)
    seen: set = set()
    first = gs.count_shapes("4x4096", "fixed-k:k=3", 16, kv_pages=2048, jitter=0.1, seed=1, stall_s=0.05, seen=seen)
    assert len(seen) == first["distinct_shapes"] > 1
    again = gs.count_shapes("4x4096", "fixed-k:k=3", 16, kv_pages=2048, jitter=0.1, seed=2, stall_s=0.025, seen=seen)
    assert set(again["_keys"]) <= set(first["_keys"]) and len(seen) == first["distinct_shapes"]


@pytest.mark.parametrize("policy,trace", [("fixed-k:k=4", "azure-conv"), ("aspire", "mooncake"), ("ar", "azure-conv")])
def test_startup_set_covers_every_pass_of_a_live_run(policy, trace):
    """The shape rule's start-up set (startup.py: `ShapeSet`, `capture`), made of made-up
    passes before any request: a run at the trace's own arrival times (real prefill chunks, the
    8B shape's head group and pool) meets no pass of a shape outside it, so serving captures
    nothing; counted with a stand-in model on the CPU (graph_shapes.py --startup)."""
    import importlib.util
    from pathlib import Path

    from spsim.traces import read_trace
    from spsim.traces.transforms import window

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "graph_shapes.py"
    spec = importlib.util.spec_from_file_location("graph_shapes", path)
    gs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gs)
    tr = window(read_trace(trace), 0.0, 6.0)
    r = gs.count_shapes("x", policy, 128, 57248, trace=tr, startup=True, max_batch=8)
    assert r["graphable_passes"] > 50 and r["distinct_shapes"] > 1
    assert r["startup"]["graphs"] >= r["distinct_shapes"]
    assert r["passes_outside_startup"] == 0, r["_missed"]
    # the prefill passes past the graph limit (token budget 8,192) are made up once at start-up too
    assert r["startup"]["eager_warm_ups"] >= (4 if policy == "ar" else 8)


@pytest.mark.parametrize("policy", ["ar", "aspire"])
def test_startup_set_covers_a_burst_of_short_prompts(policy):
    """Short prompts arriving together put more prefill chunks into one pass than the prefill
    launch's small room holds (SPLIT_ROOM); such a pass takes the room of every row, which the
    start-up set keys too (a pass of 5-8 chunks ran eager on an H100 at 4x Azure)."""
    from spsim.gpu_runtime.pass_attention import SPLIT_ROOM
    from spsim.traces.trace import Trace

    gs = _graph_shapes()
    n = 4 + 12  # four long requests decoding, then twelve short prompts at once
    tr = Trace(np.array([f"g{i}" for i in range(n)], object), np.r_[np.zeros(4), np.full(12, 0.5)],
               np.r_[np.full(4, 3000), np.full(12, 40)], np.full(n, 64))
    r = gs.count_shapes("x", policy, 64, 8000, trace=tr, startup=True, max_batch=16)
    rooms = {k[4][-1][1] // 8 - k[1] // 32 for k in r["_keys"] if k[0][1]}  # the prefill launch's chunk room
    assert 16 in rooms and 16 > SPLIT_ROOM, rooms  # the burst's pass: twelve chunks, every row's room
    assert r["passes_outside_startup"] == 0, r["_missed"]


@pytest.mark.parametrize("policy", ["ar", "fixed-k:k=4"])
def test_startup_set_covers_one_long_request_among_many(policy):
    """The pool bounds the sum of the running requests' contexts, not the longest: eight rows, one
    of them 40K tokens (the widest class), fit a pool that could not hold eight rows of that class.
    Such passes replay start-up graphs (an offline run of 50 Mooncake requests on an H100 ran 355
    passes of 33 rows, one of 88K tokens, eagerly before the set held them: `ShapeSet.lone_tops`,
    and page-id capacities that key no class)."""
    from spsim.traces.trace import Trace

    gs = _graph_shapes()
    n = 8
    tr = Trace(np.array([f"g{i}" for i in range(n)], object), np.zeros(n),
               np.r_[40000, np.full(n - 1, 600)], np.full(n, 48))
    r = gs.count_shapes("x", policy, 48, 6000, trace=tr, startup=True, max_batch=8, offline=True)
    widest = max(len(k[3]) and k[3][0] for k in r["_keys"])
    assert r["graphable_passes"] > 40 and widest >= 8 * 8192, widest  # rows beside the long one decode
    assert r["passes_outside_startup"] == 0, r["_missed"]


def test_startup_eager_warm_ups_compile_what_eager_passes_launch():
    """A pass past the graph's token limit plans its decode rows by their own contexts: many rows
    (or long ones) take the long tile, and a lone row of a few thousand tokens splits more ways
    than the kernel merges in place; it launches the in-place merge's variant all the same, the
    one the graphs capture (an `ar` run of Azure at 4x on an H100 once compiled the other
    mid-run). The start-up's eager warm-ups launch every variant such passes do. 8B shape,
    host-side plans only."""
    gs = _graph_shapes()
    specs = [dict(prefill=[(chunk, 0)], verifies=[(1, ctx)] * rows)
             for chunk in (2100, 4000) for rows in (1, 3, 16, 70) for ctx in (64, 700, 3000, 20000)]
    warm, eager = gs.eager_launch_keys("ar", specs)
    met = set().union(*eager)
    assert {k[5] for k in met} == {1} and {k[2] for k in met if k[0] == 0} == {64, 128}, met  # both tiles, fused
    assert met <= warm, sorted(met - warm)


def test_graphed_passes_near_the_token_limit_are_in_the_startup_set():
    """A pass of a prefill chunk beside decode rows whose real tokens fit the graph's limit, but not
    once its requests are padded (dummy rows of one token each), runs eager: graphing it needs a
    token class past the limit that the start-up set does not capture (a fixed-k run of Azure at 4x
    on an H100 met one: 2,560 padded tokens, off the set, a kernel compiled mid-run). Every
    pass the executor graphs has its key in the set; 18 of these 171 did not before."""
    gs = _graph_shapes()
    specs = [dict(prefill=[(c, 0)], drafts=[(3000, 1)] * d, verifies=[(5, 3000)] * v)
             for c in range(2030, 2049) for d in (0, 3, 5) for v in (0, 1, 2)]
    assert gs.startup_misses("fixed-k:k=4", specs) == []


@pytest.mark.parametrize("policy", ["fixed-k:k=4", "entropy", "aspire"])
def test_startup_set_covers_verify_attn_passes_that_only_draft(policy):
    """verify-attn keeps the verifications' page scores: a pass where every request drafts and
    none verifies has no score rows, yet under the shape rule it must key as the start-up set's
    passes do (scores kept into the scratch slot), else it runs eager (49 of 95 passes of this
    case did on the H100 before). Small offline case, as benchmarks/startup_coverage.py runs it."""
    import importlib.util
    from pathlib import Path

    from spsim.traces.trace import Trace

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "graph_shapes.py"
    spec = importlib.util.spec_from_file_location("graph_shapes", path)
    gs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gs)
    rng = np.random.default_rng(1)
    n = 6
    tr = Trace(np.array([f"g{i}" for i in range(n)], object), np.zeros(n), rng.integers(1500, 6000, n), np.full(n, 48))
    r = gs.count_shapes("x", policy, 48, 8000, trace=tr, startup=True, max_batch=4, draft_kv="verify-attn",
                        draft_budget=256, max_draft=6, offline=True)
    assert r["graphable_passes"] > 50
    assert r["passes_outside_startup"] == 0, r["_missed"]


def test_startup_reserve_follows_the_settings_shape_set():
    """The KV pool sets aside memory for the start-up graphs by the settings' shape set (not one
    fixed figure): more for a drafting policy's larger set than for `ar`'s, more at a larger max
    batch, and at least what start-up took on an H100 at max batch 256 (graphs: ar 4.4, aspire
    11.3 GiB; with the eager passes past the graph limit at 8,192 tokens: ar 6.5, fixed-k 9.4 GiB)."""
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import startup_reserve_bytes
    from spsim.gpu_runtime.model_config import get_config

    lc = get_config("llama-3.1-8b")

    def gib(policy, **kw):
        cfg = ServingConfig(model="llama-3.1-8b", gpu="h200", policy=policy, acceptance="sparsespec-llama8b", **kw)
        return startup_reserve_bytes(lc, cfg, 57248) / 2**30

    ar, aspire, small = gib("ar"), gib("aspire"), gib("aspire", max_batch=16)
    assert 6.5 <= ar < aspire and aspire >= 11.3 and gib("fixed-k:k=4") >= 9.4
    assert small < aspire
    # the eager passes' share follows the largest chunk
    assert gib("ar", token_budget=2048) < ar - 1.5


def test_startup_eager_passes_run_on_the_padded_path(policy="aspire"):
    """`ShapeSet.eager_passes` (run once at start-up so the kernels of passes past the graph limit
    compile before the first request) assemble and run on the rule's padded path: chunks past the
    limit beside each drafting state, on the scratch pages, finite logits (tiny model, CPU)."""
    from spsim.build import build
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.dispatch import reference_only
    from spsim.gpu_runtime.engine import RuntimeOptions, load, new_server, prompt_source
    from spsim.gpu_runtime.startup import shape_set_for
    from spsim.policies.kv import PagedKVPool
    from spsim.policies.request import RequestTable
    from spsim.traces.trace import Trace

    cfg = ServingConfig(model="tiny", policy=policy, acceptance="sparsespec-llama8b", kv_pages=600, token_budget=1024)
    opts = RuntimeOptions(device="cpu", pad_passes=True, shape_rule=True)
    model, tok = load(cfg, opts)
    tr = Trace(np.array(["a"], object), np.zeros(1), np.array([100]), np.array([4]))
    serving = build(cfg, prefix_cache=False, capacity=600, max_context=model.cfg.max_context)
    table = RequestTable(tr.prompt_tokens, tr.output_tokens, np.zeros(1))
    b = serving.new_batcher(table, None, None, PagedKVPool)
    with reference_only():
        _, ex, _ = new_server(model, cfg, opts, serving, b, table, prompt_source(tr, model, tok, cfg, opts), 600,
                              False, False, store_slots=4)
        ss = shape_set_for(ex.padding.rule, serving.batcher_config, model.cfg, serving.method, 600, token_limit=256)
        specs = list(ss.eager_passes())
        # 8 chunk passes (+4 beside drafts); then a drafting pass per power of two of pages up to
        # the longest context, so the selection's block sizes compile at start-up
        assert len(specs) >= (8 if policy == "ar" else 12)
        if policy != "ar":
            from spsim.buckets import bucket, pow2

            blocks = {pow2(bucket(-(-(c + p + 2) // cfg.page_size), 128)) for s in specs[13:] if len(s.get("drafts", ())) == 1 for c, p in s["drafts"]}
            longest = pow2(bucket(-(-(ss.rule.max_context + 2) // cfg.page_size), 128))  # a draft at the longest context
            assert blocks == {1 << i for i in range(7, longest.bit_length())}, (blocks, longest)
        assert all(n > 256 for s in specs for n, _ in s["prefill"])
        # chunks past the limit: one 16 divides and one it does not (Triton's two specialisations),
        # and the budget's largest once, alone
        chunks = [n for s in specs for n, _ in s["prefill"]]
        assert {n % 16 == 0 for n in chunks if n < 1024} == {True, False} and max(chunks) == 1024
        assert chunks.count(1024) == 1
        for spec in specs:
            attn, t, rows, _, _ = ex.synthetic(**spec)
            assert int(t.shape[0]) > 256
            assert torch.isfinite(model(t, attn.positions, attn, logit_rows=rows)).all(), spec


def test_startup_context_ladder_loses_no_shape(monkeypatch, policy="aspire"):
    """The start-up set walks fewer contexts per width class (`ShapeSet.LADDER`) than it once did
    (four): the graphs it keys are the same as a finer ladder's (stand-in model, CPU)."""
    import importlib.util
    from pathlib import Path

    from spsim.gpu_runtime.startup import ShapeSet

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "graph_shapes.py"
    spec = importlib.util.spec_from_file_location("graph_shapes", path)
    gs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gs)

    def keys(ladder):
        monkeypatch.setattr(ShapeSet, "LADDER", ladder)
        r = gs.count_shapes("1x512", policy, 16, 6000, startup=True, max_batch=16)
        return set(map(str, r["_startup_keys"])), r["startup"]["passes"]

    default = ShapeSet.LADDER
    fine, n_fine = keys((0.0, 0.25, 0.5, 0.75, 1.0))
    ours, n_ours = keys(default)
    assert ours == fine and n_ours < n_fine
