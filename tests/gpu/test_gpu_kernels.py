"""The kernel tests on the GPU in bf16 (run on the device: `python3 -m pytest -m gpu tests/gpu`).

Tolerances: relative L2 error against the fp32 PyTorch reference <= 1.5e-2 in bf16 (P is rounded to
bf16 before the P.V product, as in FlashAttention), <= 2e-3 in fp16."""

import numpy as np
import pytest
import torch

from spsim.gpu_runtime import selection as S
from spsim.gpu_runtime.pages import pages_for, selected_page_lists
from spsim.gpu_runtime.reference import mixed_attention_ref, quest_scores_ref
from spsim.gpu_runtime.testing import Req, make_batch, rel_err, rng_for

pytestmark = pytest.mark.gpu

# The kernel modules import triton; imported only when a GPU test runs, so that collecting this
# file on a CPU machine does not import triton compiled (the CPU tests need it interpreted).
A = QK = None


@pytest.fixture(autouse=True)
def _kernels():
    global A, QK
    from spsim.gpu_runtime import attention, quest

    A, QK = attention, quest

TOL = {torch.bfloat16: 1.5e-2, torch.float16: 2e-3}
DEV = "cuda"


def run_case(name, reqs, hkv=2, g=4, d=128, ps=16, dtype=torch.bfloat16, **plan_kw):
    rng = rng_for(name)
    b = make_batch(reqs, hkv, g, d, ps, dtype, DEV, rng)
    plan = A.plan_attention(b.q_len, b.lists, hkv * g, **plan_kw)
    out = torch.full_like(b.q, float("nan"))
    A.mixed_attention(b.q, b.k_cache, b.v_cache, plan, out=out)
    ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, b.lists)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten or NaN output"
    err = rel_err(out, ref)
    assert err < TOL[dtype], f"relative error {err:.2e}"
    return plan


@pytest.mark.parametrize("g", [1, 4, 8])
@pytest.mark.parametrize("d,ps", [(128, 16), (64, 64), (128, 128)])
def test_gqa_head_dims_page_sizes(g, d, ps):
    run_case(f"gpu_gqa{g}_{d}_{ps}", [Req("decode", 0), Req("decode", 3 * ps + 5), Req("verify", 2 * ps, q=ps + 3),
                                       Req("draft", 9 * ps + 1, budget=4 * ps)], g=g, d=d, ps=ps)


def test_mixed_all_kinds_many_splits():
    reqs = [Req("prefill", 300, q=200), Req("decode", 5000), Req("draft", 7000, budget=2048),
            Req("verify", 4000, q=9), Req("prefill", 0, q=77), Req("draft", 40, budget=2048), Req("decode", 1)]
    plan = run_case("gpu_mixed", reqs, hkv=8, g=4)
    assert plan.merge.shape[0] > 0
    run_case("gpu_mixed_fine", reqs, hkv=8, g=4, tokens_per_split=64)


@pytest.mark.parametrize("tall,bn,nw,st", [(False, 128, 8, 3), (False, 128, 8, 4), (False, 64, 4, 3), (False, 64, 4, 4),
                                             (False, 64, 8, 4), (True, 64, 4, 3), (True, 64, 4, 4), (True, 32, 4, 4),
                                             (True, 32, 4, 5), (True, 64, 8, 3)])
@pytest.mark.parametrize("fused", [True, False])
def test_tile_configs(tall, bn, nw, st, fused):
    """The (BLOCK_N, warps, stages) the sweeps try on short (decode, draft) and 64-row (with a
    verify) tiles, both merges, 17+ splits per unit (merge steps of 8 with a remainder)."""
    reqs = [Req("decode", 3000), Req("draft", 4000, budget=1024), Req("decode", 7)]
    if tall:
        reqs.append(Req("verify", 2500, q=9))
    plan = run_case(f"gpu_tiles_{tall}_{bn}_{nw}_{st}", reqs, hkv=8, g=4, block_n=bn, num_warps=nw, num_stages=st,
                    tokens_per_split=128, fused_merge=fused)
    assert plan.block_m == (64 if tall else 16) and int(plan.merge[:, 4].max()) > 17


def test_fused_merge_graph_replays():
    """The last split to arrive merges and resets its counter: 20 replays of one CUDA graph, with
    new queries each time, all match the reference (a stale counter or an unpublished partial
    would show as a wrong or unwritten output)."""
    rng = rng_for("gpu_fused_replay")
    reqs = [Req("decode", 30000), Req("verify", 9000, q=9), Req("draft", 20000, budget=2048), Req("decode", 40)]
    b = make_batch(reqs, 8, 4, 128, 16, torch.bfloat16, DEV, rng)
    plan = A.plan_attention(b.q_len, b.lists, 32, fused_merge=True)
    assert plan.fused_merge and int(plan.merge[:, 4].max()) >= 8
    out = torch.empty_like(b.q)
    A.mixed_attention(b.q, b.k_cache, b.v_cache, plan, out=out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        A.mixed_attention(b.q, b.k_cache, b.v_cache, plan, out=out)
    for i in range(20):
        b.q.copy_(torch.randn_like(b.q))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, b.lists)
        assert not torch.isnan(out).any(), f"replay {i}: unwritten output"
        assert rel_err(out, ref) < TOL[torch.bfloat16], f"replay {i}"
    assert int(plan.arrived.abs().sum()) == 0


def test_fp16():
    run_case("gpu_fp16", [Req("verify", 3000, q=9), Req("draft", 3000, budget=512)], dtype=torch.float16)


def _num_compiled(fn) -> int:
    return sum(len(c[0]) for c in fn.device_caches.values())


def test_no_recompile_when_lengths_change():
    rng = rng_for("gpu_recompile")
    seen = None
    for i in range(4):
        n = int(rng.integers(2, 6))
        reqs = [Req("decode", int(rng.integers(1, 3000))) for _ in range(n)] + [Req("verify", int(rng.integers(20, 900)), q=9)]
        b = make_batch(reqs, 8, 4, 128, 16, torch.bfloat16, DEV, rng)
        A.mixed_attention(b.q, b.k_cache, b.v_cache, A.plan_attention(b.q_len, b.lists, 32))
        torch.cuda.synchronize()
        if seen is None:
            seen = (_num_compiled(A._attn_fwd), _num_compiled(A._attn_merge))
        assert (_num_compiled(A._attn_fwd), _num_compiled(A._attn_merge)) == seen


def test_quest_select_and_draft_attention():
    rng = rng_for("gpu_quest")
    hkv, g, d, ps = 8, 4, 128, 16
    b = make_batch([Req("decode", 5000), Req("decode", 900), Req("decode", 20)], hkv, g, d, ps, torch.bfloat16, DEV, rng)
    kv = b.lists.kv_len_np.reshape(3, hkv)[:, 0]
    meta = S.PageMeta(b.k_cache.shape[0], hkv, d, torch.bfloat16, DEV)
    for r, n in enumerate(kv):
        pos = torch.arange(int(n), device=DEV)
        pages = b.page_table[r].long()[pos // ps]
        meta.append(b.k_cache[pages, :, pos % ps], pages, pos % ps)
    npg = torch.as_tensor(pages_for(kv, ps), dtype=torch.int32, device=DEV)
    got = QK.quest_scores(b.q, meta, b.page_table, npg, 1, 1)
    ref = quest_scores_ref(b.q, meta.kmin, meta.kmax, b.page_table, npg.cpu().numpy(), 1, 1)
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(got), fin)
    assert rel_err(got[fin], ref[fin]) < 1e-5  # fp32 arithmetic on bf16 bounds
    sel, counts = S.select_quest(b.q, meta, b.page_table, kv, np.array([512, 512, 512]), ps)
    lists = selected_page_lists(b.page_table, sel, counts, kv, hkv, ps)
    out = torch.full_like(b.q, float("nan"))
    A.mixed_attention(b.q, b.k_cache, b.v_cache, A.plan_attention(b.q_len, lists, hkv * g), out=out)
    ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, lists)
    assert not torch.isnan(out).any() and rel_err(out, ref) < TOL[torch.bfloat16]


def test_topk_kernel_matches_torch():
    rng = rng_for("gpu_topk")
    s = torch.as_tensor(rng.standard_normal((64, 8192)), dtype=torch.float32, device=DEV)
    s[:, 0] = s[:, -1] = float("inf")
    s[::2, 5000:] = float("-inf")  # shorter requests
    s[1, 100:200] = 0.25  # ties
    counts = np.where(np.arange(64) % 3 == 0, 128, 4000)
    got = QK.topk_pages(s, torch.as_tensor(counts, dtype=torch.int32, device=DEV), int(counts.max()))
    order = torch.sort(-s, dim=1, stable=True).indices  # ties to the lower page, as the kernel
    for i, c in enumerate(counts):
        assert torch.equal(got[i, :c], order[i, :c].sort().values)
        assert (got[i, c:] == -1).all()
