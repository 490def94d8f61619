"""Mixed-pass attention kernel under the Triton CPU interpreter, against the PyTorch reference.

Tiny shapes (the interpreter runs each program in numpy). fp32 and fp16 inputs only: the
interpreter cannot do bf16 arithmetic (the GPU tests in tests/gpu cover bf16)."""

import math

import numpy as np
import pytest
import torch

from spsim.gpu_runtime import interpret
from spsim.buckets import bucket, pow2

# TRITON_INTERPRET=1 must be set before triton is first imported. If something in this pytest
# process imported triton compiled already, these tests are run in a fresh process instead (below).
FRESH = interpret.can_interpret()
A, _ = interpret.load_interpreted() if FRESH else (None, None)

from spsim.gpu_runtime.reference import mixed_attention_ref  # noqa: E402
from spsim.gpu_runtime.testing import Req, make_batch, rel_err, rng_for  # noqa: E402

TOL = {torch.float32: 1e-5, torch.float16: 2e-3}  # relative L2 error (fp32 compute in the interpreter)


@pytest.fixture(autouse=True)
def _interpreted(request):
    if not FRESH and request.node.name != "test_kernels_interpreted_or_rerun":
        pytest.skip("triton was imported compiled before this module: test_kernels_interpreted_or_rerun runs it")


def test_kernels_interpreted_or_rerun():
    if FRESH:
        from triton.runtime.interpreter import InterpretedFunction
        assert isinstance(A._attn_fwd, InterpretedFunction)
    else:
        assert interpret.rerun_in_subprocess(__file__) == 0


def run_case(name, reqs, hkv=2, g=4, d=64, ps=16, dtype=torch.float32, scores=False, **plan_kw):
    rng = rng_for(name)
    b = make_batch(reqs, hkv, g, d, ps, dtype, "cpu", rng)
    plan = A.plan_attention(b.q_len, b.lists, hkv * g, **plan_kw)
    out = torch.full_like(b.q, float("nan"))  # poisoned: every element must be written
    ps_k = ps_r = None
    if scores:
        ps_k = torch.full((b.lists.num_rows, int(b.lists.count_np.max())), float("nan"))
        ps_r = ps_k.clone()
    A.mixed_attention(b.q, b.k_cache, b.v_cache, plan, out=out, page_scores=ps_k)
    ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, b.lists, page_scores=ps_r)
    assert not torch.isnan(out).any(), "unwritten or NaN output"
    err = rel_err(out, ref)
    assert err < TOL[dtype], f"relative error {err:.2e}"
    if scores:
        m = ~torch.isnan(ps_r)
        assert not torch.isnan(ps_k[m]).any()
        assert torch.allclose(ps_k[m], ps_r[m], rtol=1e-4, atol=1e-4)
    return plan, b


def test_single_partial_page_and_partial_last_page():
    # ctx 0: one token, one partial page; ctx 20 at page 16: two pages, the last partial
    run_case("single_partial", [Req("decode", 0), Req("decode", 20), Req("verify", 5, q=3)])


@pytest.mark.parametrize("g", [1, 4, 8])
def test_gqa_groups(g):
    run_case(f"gqa{g}", [Req("decode", 40), Req("verify", 33, q=5)], hkv=2, g=g)


def test_verify_longer_than_a_page():
    run_case("verify_gt_page", [Req("verify", 30, q=21), Req("verify", 3, q=17)], ps=16)


def test_many_splits_and_merge():
    plan, _ = run_case("many_splits", [Req("decode", 700), Req("verify", 500, q=9), Req("draft", 900, budget=320)],
                       tokens_per_split=64)
    assert plan.merge.shape[0] > 0 and int(plan.merge[:, 4].max()) >= 8  # really split, merged


@pytest.mark.parametrize("merge_slots", [1, 2, 8])
def test_merge_steps(merge_slots):
    """Merges whose slot counts are and are not multiples of the merge step (17 splits of 64 tokens)."""
    rng = rng_for(f"merge_steps_{merge_slots}")
    b = make_batch([Req("decode", 1080), Req("verify", 500, q=9), Req("draft", 900, budget=320)], 2, 4, 64, 16,
                   torch.float32, "cpu", rng)
    plan = A.plan_attention(b.q_len, b.lists, 8, tokens_per_split=64, block_n=32)
    plan.merge_slots = merge_slots
    out = torch.full_like(b.q, float("nan"))
    A.mixed_attention(b.q, b.k_cache, b.v_cache, plan, out=out)
    ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, b.lists)
    assert int(plan.merge[:, 4].max()) == 17 and not torch.isnan(out).any()
    assert rel_err(out, ref) < TOL[torch.float32]


def test_auto_split_small_batch():
    plan, _ = run_case("auto_split", [Req("decode", 600)], hkv=1, g=4, num_sms=4, min_split_tokens=128)
    assert plan.merge.shape[0] == 1  # one long request alone is still spread over programs


def test_draft_budget_at_least_context():
    run_case("draft_full_budget", [Req("draft", 50, budget=4096), Req("draft", 70, budget=32)])


def test_mixed_batch_all_kinds_one_launch():
    reqs = [Req("prefill", 40, q=37), Req("decode", 90), Req("draft", 200, budget=64),
            Req("verify", 75, q=9), Req("prefill", 0, q=19), Req("draft", 33, budget=16)]
    plan, _ = run_case("mixed", reqs, tokens_per_split=64)
    kinds = set(np.asarray(plan.q_len.tolist()))
    assert {1, 9, 37, 19} <= kinds


def test_tall_requests_split_into_their_own_launch():
    """Prefill chunks planned apart run as a second launch with its own tile height; outputs and
    page scores as the reference; without `split`, or with every request in it, one launch."""
    reqs = [Req("decode", 90), Req("prefill", 40, q=37), Req("verify", 75, q=9), Req("draft", 200, budget=64),
            Req("prefill", 0, q=19)]
    plan, b = run_case("split_tall", reqs, scores=True, split=np.array([1, 4]))
    assert plan.tall is not None and len(plan.parts()) == 2
    assert plan.block_m == 64 and plan.tall.block_m == 128  # the 9-token verification sets the short tile
    short_reqs = set(plan.work[:, 0].tolist())
    tall_reqs = set(plan.tall.work[:, 0].tolist())
    assert short_reqs == {0, 2, 3} and tall_reqs == {1, 4}
    padded = A.pad_plan(plan)
    assert padded.tall.work.shape[0] >= len(tall_reqs)
    one, _ = run_case("split_tall_none", reqs)
    assert one.tall is None and one.block_m == 128
    alone, _ = run_case("split_tall_all", [Req("prefill", 40, q=37), Req("prefill", 0, q=19)], split=np.array([0, 1]))
    assert alone.tall is None and alone.block_m == 128


@pytest.mark.parametrize("dtype,d,ps", [(torch.float16, 64, 16), (torch.float16, 128, 32), (torch.float32, 64, 128)])
def test_dtypes_head_dims_page_sizes(dtype, d, ps):
    run_case(f"dtype_{dtype}_{d}_{ps}", [Req("verify", 2 * ps + 3, q=4), Req("draft", 5 * ps, budget=3 * ps)],
             hkv=2, g=2, d=d, ps=ps, dtype=dtype)


def test_verify_page_scores():
    run_case("scores", [Req("verify", 70, q=9), Req("decode", 17)], scores=True)


def test_page_scores_over_several_query_tiles():
    """A long query (prefill chunk: 80 tokens x 4 heads = 320 rows, three tiles) scores each page
    with the max over all its tiles, as the reference does (a plain store kept the last tile's)."""
    run_case("scores_tiles", [Req("verify", 300, q=80), Req("decode", 40)], scores=True)


def test_empty_split_is_harmless():
    """A split with no keys (start == end) writes m = -1e30, l = 0 and must not disturb the merge."""
    rng = rng_for("empty_split")
    b = make_batch([Req("decode", 200)], 1, 4, 64, 16, torch.float32, "cpu", rng)
    plan = A.plan_attention(b.q_len, b.lists, 4, tokens_per_split=64, block_n=64)
    w = plan.work.clone()
    w[0, 4] = w[1, 4]  # first split takes the second's range; the second becomes empty
    w[1, 3] = w[1, 4]
    plan.work = w
    out = torch.full_like(b.q, float("nan"))
    A.mixed_attention(b.q, b.k_cache, b.v_cache, plan, out=out)
    ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, b.lists)
    assert rel_err(out, ref) < 1e-5


def test_scale_and_large_logits():
    """fp32 accumulation with large logits (online softmax must rescale, not overflow)."""
    rng = rng_for("large_logits")
    b = make_batch([Req("verify", 100, q=9)], 2, 4, 64, 16, torch.float32, "cpu", rng)
    q = b.q * 30
    plan = A.plan_attention(b.q_len, b.lists, 8, tokens_per_split=64)
    out = A.mixed_attention(q, b.k_cache, b.v_cache, plan, sm_scale=1 / math.sqrt(64))
    ref = mixed_attention_ref(q, b.k_cache, b.v_cache, b.q_len, b.lists)
    assert torch.isfinite(out).all() and rel_err(out, ref) < 1e-5


@pytest.mark.parametrize("fused", [True, False])
def test_merge_fused_or_separate_and_plan_reused(fused):
    """Both merges give the reference; a fused plan's arrival counters are reset by the merging
    program, so the same plan run again (as a CUDA graph replays it) is right again."""
    reqs = [Req("decode", 700), Req("verify", 300, q=9), Req("draft", 900, budget=128), Req("decode", 3)]
    plan, b = run_case(f"merge_{fused}", reqs, tokens_per_split=64, block_n=32, fused_merge=fused)
    assert plan.merge.shape[0] >= 3 and plan.fused_merge is fused
    assert int(plan.arrived.abs().sum()) == 0  # counters back at zero after the launch
    out = torch.full_like(b.q, float("nan"))
    A.mixed_attention(b.q, b.k_cache, b.v_cache, plan, out=out)
    ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, b.lists)
    assert rel_err(out, ref) < TOL[torch.float32]


def test_fused_merge_chosen_by_split_count():
    """Auto: units of at most FUSED_MAX_SPLITS splits merge in the main kernel, more in a merge launch."""
    rng = rng_for("fuse_rule")
    b = make_batch([Req("decode", 640), Req("decode", 100)], 2, 4, 64, 16, torch.float32, "cpu", rng)
    few = A.plan_attention(b.q_len, b.lists, 8, tokens_per_split=192, block_n=32)
    many = A.plan_attention(b.q_len, b.lists, 8, tokens_per_split=32, block_n=32)
    assert int(few.merge[:, 4].max()) <= A.FUSED_MAX_SPLITS and few.fused_merge
    assert int(many.merge[:, 4].max()) > A.FUSED_MAX_SPLITS and many.merge_launch and not few.merge_launch
    long = many.merge[:, 4] > A.FUSED_MAX_SPLITS  # merged by the launch, the others in place
    assert (many.merge[long, 0] >= 0).all() and (many.merge[~long, 0] < 0).all()


@pytest.mark.parametrize("fused", [True, False])
def test_padded_plan_same_output_and_reusable(fused):
    """`pad_plan` rounds the work and merge lists up with padding rows the kernels skip: the output
    is the unpadded plan's, bit for bit, and a shorter plan's lists copied into the padded ones'
    front (as a CUDA graph replay loads them, padding rows refilled) still compute that pass."""
    rng = rng_for(f"padded_plan_{fused}")
    b = make_batch([Req("decode", 720), Req("verify", 500, q=9), Req("draft", 900, budget=320)], 2, 4, 64, 16,
                   torch.float32, "cpu", rng)
    plain = A.plan_attention(b.q_len, b.lists, 8, tokens_per_split=64, fused_merge=fused)
    out_plain = A.mixed_attention(b.q, b.k_cache, b.v_cache, plain)
    padded = A.pad_plan(A.plan_attention(b.q_len, b.lists, 8, tokens_per_split=64, fused_merge=fused))
    n_work, n_merge = plain.work.shape[0], plain.merge.shape[0]
    assert padded.work.shape[0] == pow2(n_work, A.PAD_WORK) > n_work and padded.merge.shape[0] == pow2(n_merge, A.PAD_MERGE)
    assert padded.num_slots == pow2(plain.num_slots, A.PAD_SLOTS)
    assert (padded.work[n_work:, 0] == -1).all() and (padded.merge[n_merge:, 0] == -1).all()
    out = torch.full_like(b.q, float("nan"))
    A.mixed_attention(b.q, b.k_cache, b.v_cache, padded, out=out)
    assert torch.equal(out, out_plain)
    # a pass with longer splits (fewer items) loaded into the padded plan's tensors, graph-style
    fewer = A.pad_plan(A.plan_attention(b.q_len, b.lists, 8, tokens_per_split=128, fused_merge=fused))
    assert fewer.work.shape[0] <= padded.work.shape[0]
    for dst, src in ((padded.work, fewer.work), (padded.merge, fewer.merge)):
        dst.fill_(-1)
        dst[:src.shape[0]].copy_(src)
    out2 = torch.full_like(b.q, float("nan"))
    A.mixed_attention(b.q, b.k_cache, b.v_cache, padded, out=out2)
    ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, b.lists)
    assert rel_err(out2, ref) < TOL[torch.float32]


def test_bucket_sizes():
    sizes = [bucket(n) for n in range(1, 5000)]
    assert all(s >= n for n, s in zip(range(1, 5000), sizes))
    assert all(s <= max(16, 1.25 * n) + 1e-9 for n, s in zip(range(1, 5000), sizes))
    assert len(set(sizes)) < 40  # few distinct sizes


def test_long_tile_over_many_items():
    """Full decode over many work items switches to LONG_TILE (narrower blocks, same splits) and
    still matches the reference; a few items keep the short tile."""
    reqs = [Req("decode", 300), Req("decode", 257), Req("decode", 128)]
    plan, _ = run_case("long_tile", reqs, num_sms=1, tokens_per_split=128)  # 12 items >= 4 waves of 1 SM
    assert (plan.block_n, plan.num_warps, plan.num_stages) == A.LONG_TILE
    few, _ = run_case("short_tile", reqs, num_sms=64, tokens_per_split=128)
    assert (few.block_n, few.num_warps, few.num_stages) == A.SHORT_TILE
    assert few.work.shape == plan.work.shape  # the same items either way


def test_pdl_is_off_under_the_interpreter():
    """The interpreter cannot run `griddepcontrol`: kernels launch without PDL there (the fused
    merge and every kernel above ran this way)."""
    from spsim.gpu_runtime import pdl

    assert A._attn_fwd.__class__.__name__ == "InterpretedFunction"
    assert not pdl.ENABLED and pdl.kw() == {}


def test_fusion_is_decided_per_unit():
    """Auto in one plan: units of at most FUSED_MAX_SPLITS splits merge in the main kernel, longer
    ones in the merge launch (their work rows name no merge row, the launch skips the others);
    padded, both paths are compiled in and the output is the reference, twice over (counters reset)."""
    rng = rng_for("fuse_per_unit")
    b = make_batch([Req("decode", 900), Req("decode", 100), Req("verify", 300, q=9)], 2, 4, 64, 16,
                   torch.float32, "cpu", rng)
    plan = A.plan_attention(b.q_len, b.lists, 8, tokens_per_split=64, block_n=32)
    splits = plan.merge[:, 4]
    fused_rows = plan.merge[:, 0] < 0
    assert (splits[fused_rows] <= A.FUSED_MAX_SPLITS).all() and (splits[~fused_rows] > A.FUSED_MAX_SPLITS).all()
    assert fused_rows.any() and (~fused_rows).any() and plan.fused_merge and plan.merge_launch
    named = plan.work[:, 6][plan.work[:, 6] >= 0].unique()
    assert set(named.tolist()) == set(torch.nonzero(fused_rows).flatten().tolist())
    ref = mixed_attention_ref(b.q, b.k_cache, b.v_cache, b.q_len, b.lists)
    for p in (plan, A.pad_plan(A.plan_attention(b.q_len, b.lists, 8, tokens_per_split=64, block_n=32))):
        for _ in range(2):
            out = torch.full_like(b.q, float("nan"))
            A.mixed_attention(b.q, b.k_cache, b.v_cache, p, out=out)
            assert rel_err(out, ref) < TOL[torch.float32]
            assert int(p.arrived.abs().sum()) == 0
