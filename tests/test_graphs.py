"""Graph replay of decode-like passes: the static buffers a captured graph reads are loaded right.

On the CPU (`capture=False`, kernels under the Triton interpreter) the same buffer path runs
eagerly; passes of one shape reuse one set of buffers, a new shape makes another, and every pass
gives the logits of the plain path. The GPU test captures real graphs (tests/gpu)."""

from __future__ import annotations

import numpy as np
import pytest

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
    g = GraphedPasses(model, cache, capture=False, meta=meta)
    rng = np.random.default_rng(1)
    perm = rng.permutation(96)
    tables = [perm[0:30].tolist(), perm[30:60].tolist(), perm[60:90].tolist()]
    # two passes of one shape (contexts grow by a token), then one of another (a verify of 3)
    for ctxs, q in (([100, 230, 50], [1, 1, 1]), ([101, 231, 51], [1, 1, 1]), ([102, 232, 52], [3, 1, 1])):
        attn = PassAttention(cache, [0, 1, 2], tables, ctxs, q, 0, DraftRows(), 0, 2048, {}, None)
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
