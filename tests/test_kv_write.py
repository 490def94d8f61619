"""The fused K/V write + Quest page bounds kernel (Triton CPU interpreter) against the PyTorch path:
the same cache and the same bounds, exactly, for passes mixing prefill chunks that start mid-page,
decodes, verifications and drafts."""

import numpy as np
import pytest
import torch

from spsim.gpu_runtime import interpret

FRESH = interpret.can_interpret()
if FRESH:
    interpret.load_interpreted()

from spsim.gpu_runtime import kv_write as KW  # noqa: E402
from spsim.gpu_runtime.selection import PageMeta  # noqa: E402


@pytest.fixture(autouse=True)
def _interpreted(request):
    if not FRESH and request.node.name != "test_kernel_interpreted_or_rerun":
        pytest.skip("triton was imported compiled before this module: test_kernel_interpreted_or_rerun runs it")


def test_kernel_interpreted_or_rerun():
    if FRESH:
        from triton.runtime.interpreter import InterpretedFunction

        assert isinstance(KW._kv_write, InterpretedFunction)
    else:
        assert interpret.rerun_in_subprocess(__file__) == 0


def test_run_lengths():
    assert KW.run_lengths(np.array([5, 5, 5, 2, 7, 7])).tolist() == [3, 0, 0, 1, 2, 0]
    assert KW.run_lengths(np.array([], np.int64)).tolist() == []


def _pass(rng, ps, num_pages):
    """A pass's (page, off) per token: requests with their own pages, each bringing 1..40 new tokens
    after 0..50 cached ones (runs that start mid-page, cross pages, or start a fresh page)."""
    free = list(rng.permutation(num_pages))
    page, off, starts = [], [], []
    for _ in range(int(rng.integers(1, 6))):
        start, n = int(rng.integers(0, 50)), int(rng.integers(1, 41))
        table = [free.pop() for _ in range(-(-(start + n) // ps))]
        p = np.arange(start, start + n)
        page.append(np.asarray(table)[p // ps])
        off.append(p % ps)
        starts.append((table, start))
    return np.concatenate(page), np.concatenate(off), starts


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fused_write_matches_torch(dtype, seed):
    rng = np.random.default_rng(seed)
    ps, hkv, d, num_pages = 16, 2, 16, 64
    page, off, starts = _pass(rng, ps, num_pages)
    t = len(page)
    gen = torch.Generator().manual_seed(seed)
    kc0 = torch.randn(num_pages, hkv, ps, d, generator=gen).to(dtype)
    vc0 = torch.randn(num_pages, hkv, ps, d, generator=gen).to(dtype)
    # bounds of the tokens already cached (what earlier passes left), random for other pages
    meta_a, meta_b = (PageMeta(num_pages, hkv, d, dtype, "cpu") for _ in range(2))
    for m in (meta_a, meta_b):
        m.kmin.copy_(kc0.amin(2))
        m.kmax.copy_(kc0.amax(2))
    qkv = torch.randn(t, 3 * hkv, d, generator=gen).to(dtype)  # k, v as strided views of one tensor
    k, v = qkv[:, hkv:2 * hkv], qkv[:, 2 * hkv:]
    pg, of = torch.as_tensor(page), torch.as_tensor(off)

    kc_a, vc_a = kc0.clone(), vc0.clone()  # PyTorch path
    meta_a.append(k, pg, of)
    kc_a[pg, :, of] = k
    vc_a[pg, :, of] = v

    kc_b, vc_b = kc0.clone(), vc0.clone()  # fused kernel
    KW.write_kv(kc_b, vc_b, k, v, pg, of, torch.as_tensor(KW.run_lengths(page)), meta_b)
    assert torch.equal(kc_a, kc_b) and torch.equal(vc_a, vc_b)
    assert torch.equal(meta_a.kmin, meta_b.kmin) and torch.equal(meta_a.kmax, meta_b.kmax)
    # a page the pass starts: its bounds are those of the pass's tokens alone
    for p in np.unique(page[off == 0]):
        n = int(off[page == p].max()) + 1
        assert torch.equal(meta_b.kmin[p], kc_b[p, :, :n].amin(1))
        assert torch.equal(meta_b.kmax[p], kc_b[p, :, :n].amax(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("bounds", [True, False])
def test_rope_and_write_in_one_kernel_match_the_two(dtype, seed, bounds):
    """`rope_write_kv` (the default; SPSIM_ROPE_WRITE=0 turns it off) gives the bits of `fused.rope_qk` then `write_kv`: the
    rotated q, the cache, and the page bounds its run heads rebuild from re-rotated keys."""
    from spsim.gpu_runtime import fused

    rng = np.random.default_rng(seed)
    ps, hq, hkv, d, num_pages = 16, 4, 2, 16, 64
    page, off, _ = _pass(rng, ps, num_pages)
    t = len(page)
    gen = torch.Generator().manual_seed(seed)
    kc0 = torch.randn(num_pages, hkv, ps, d, generator=gen).to(dtype)
    vc0 = torch.randn(num_pages, hkv, ps, d, generator=gen).to(dtype)
    qkv = torch.randn(t, (hq + 2 * hkv) * d, generator=gen).to(dtype)
    ang = torch.randn(t, d // 2, generator=gen)
    cos, sin = ang.cos(), ang.sin()
    pg, of = torch.as_tensor(page), torch.as_tensor(off)
    run = torch.as_tensor(KW.run_lengths(page))
    metas = [PageMeta(num_pages, hkv, d, dtype, "cpu") for _ in range(2)] if bounds else [None, None]
    for m in metas:
        if m is not None:
            m.kmin.copy_(kc0.amin(2))
            m.kmax.copy_(kc0.amax(2))

    kc_a, vc_a = kc0.clone(), vc0.clone()  # two launches
    q_a, k_a = fused.rope_qk(qkv, cos, sin, hq, hkv, d)
    v = qkv[:, (hq + hkv) * d:].view(t, hkv, d)
    KW.write_kv(kc_a, vc_a, k_a, v, pg, of, run, metas[0])

    kc_b, vc_b = kc0.clone(), vc0.clone()  # one
    q_b = KW.rope_write_kv(qkv, cos, sin, hq, kc_b, vc_b, pg, of, run, metas[1])
    assert torch.equal(q_a, q_b) and torch.equal(kc_a, kc_b) and torch.equal(vc_a, vc_b)
    assert not torch.equal(kc_b, kc0)  # it wrote something
    if bounds:
        assert torch.equal(metas[0].kmin, metas[1].kmin) and torch.equal(metas[0].kmax, metas[1].kmax)
    assert KW.rope_write_kv(qkv[:0], cos[:0], sin[:0], hq, kc_b, vc_b, pg[:0], of[:0]).shape == (0, hq, d)
