"""The runtime's vectorised host preparation equals the per-request loops it replaced."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from spsim.gpu_runtime.attention import _units, plan_attention  # noqa: E402
from spsim.gpu_runtime.kv_cache import PagedAttention, PagedKVCache  # noqa: E402
from spsim.gpu_runtime.model_config import get_config  # noqa: E402
from spsim.gpu_runtime.pages import full_page_lists, token_slots, upload  # noqa: E402
from spsim.gpu_runtime.pass_attention import DraftRows, PassAttention  # noqa: E402
from spsim.plan import DraftMethod  # noqa: E402


def _units_loop(nqb, hkv, qb_size):
    n = len(nqb)
    u_req = np.repeat(np.arange(n), nqb * hkv)
    u_head = np.concatenate([np.repeat(np.arange(hkv), k) for k in nqb]) if n else np.zeros(0, np.int64)
    u_qb = np.concatenate([np.tile(np.arange(k) * qb_size, hkv) for k in nqb]) if n else np.zeros(0, np.int64)
    return u_req, u_head, u_qb


@pytest.mark.parametrize("seed", range(20))
def test_units_equal_loop(seed):
    rng = np.random.default_rng(seed)
    nqb = rng.integers(0, 5, rng.integers(0, 12)).astype(np.int64)
    hkv, qb = int(rng.choice([1, 2, 8])), int(rng.choice([1, 4, 16]))
    for a, b in zip(_units(nqb, hkv, qb), _units_loop(nqb, hkv, qb)):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.int64


def _slots_loop(tables, start, q_len, ps):
    pos, page, off = [], [], []
    for t, s, n in zip(tables, start, q_len):
        p = np.arange(s, s + n)
        pos.append(p)
        page.append(np.asarray(t, np.int64)[p // ps])
        off.append(p % ps)
    cat = lambda a: np.concatenate(a) if a else np.zeros(0, np.int64)  # noqa: E731
    return cat(pos), cat(page), cat(off)


@pytest.mark.parametrize("seed", range(30))
def test_token_slots_equal_loop(seed):
    rng = np.random.default_rng(seed)
    ps = int(rng.choice([1, 4, 16]))
    n = int(rng.integers(0, 10))
    q_len = rng.integers(0, 40, n)
    start = rng.integers(0, 200, n)
    tables = [rng.permutation(1000)[:-(-(s + q) // ps) + int(rng.integers(0, 3))] for s, q in zip(start, q_len)]
    if n and seed % 2:
        tables = [t.tolist() for t in tables]
    for a, b in zip(token_slots(tables, start, q_len, ps), _slots_loop(tables, start, q_len, ps)):
        np.testing.assert_array_equal(a, b)


def test_full_page_lists_short_table():
    with pytest.raises(AssertionError):
        full_page_lists([np.arange(2)], [40], 2, 16, "cpu")


def test_upload_cpu_dtypes():
    a = np.arange(5)
    t = upload([a, a.reshape(5, 1), np.zeros(0)], [np.int32, np.int64, np.int32], "cpu")
    assert [x.dtype for x in t] == [torch.int32, torch.int64, torch.int32]
    assert t[1].shape == (5, 1) and t[2].shape == (0,)
    np.testing.assert_array_equal(t[0].numpy(), a)


@pytest.mark.gpu
def test_upload_cuda():
    arrs = [np.arange(3), np.arange(7).reshape(7, 1), np.zeros(0), np.arange(5)]
    dts = [np.int32, np.int64, np.int32, np.int64]
    for a, dt, t in zip(arrs, dts, upload(arrs, dts, "cuda")):
        assert t.is_contiguous() and tuple(t.shape) == a.shape
        np.testing.assert_array_equal(t.cpu().numpy(), a.astype(dt))


def _cache():
    cfg = get_config("llama-3.1-8b").replace(layers=1, hidden=64, intermediate=64, vocab=64, kv_heads=2, q_heads=4,
                                            head_dim=16)
    return PagedKVCache(cfg, 64, 4, "cpu", torch.float32)


def test_pass_attention_sets_what_paged_attention_sets():
    cache = _cache()
    rng = np.random.default_rng(0)
    start, q_len = [5, 0, 17, 9], [1, 6, 3, 1]
    tables = [rng.permutation(64)[:-(-(s + q) // 4) + 1] for s, q in zip(start, q_len)]
    ref = PagedAttention(cache, tables, start, q_len)
    pa = PassAttention(cache, list(range(4)), tables, start, q_len, 0, DraftRows(), DraftMethod.STATIC, 64, None, None)
    assert set(vars(ref)) <= set(vars(pa))
    for k, v in vars(ref).items():
        w = getattr(pa, k)
        if isinstance(v, torch.Tensor):
            assert v.dtype == w.dtype and torch.equal(v, w), k
        elif isinstance(v, np.ndarray):
            np.testing.assert_array_equal(v, w)
        elif k == "lists":
            for f in ("start", "count", "last_len", "indices"):
                assert torch.equal(getattr(v, f), getattr(w, f)), f
        elif k != "cache":
            assert v == w, k
    with pytest.raises(ValueError, match="request 1"):
        PassAttention(cache, [0, 1], [tables[0], tables[1][:1]], start[:2], q_len[:2], 0, DraftRows(), DraftMethod.STATIC,
                      64, None, None)


def test_plan_small_and_many_units():
    """Many units (more than SMs): the split search's early end gives the search's answer."""
    for n, ctx in ((3, 250), (100, 200)):
        tables = [np.arange(i, i + 64) % 64 for i in range(n)]
        lists = full_page_lists(tables, [ctx] * n, 2, 4, "cpu")
        p = plan_attention(np.ones(n, np.int64), lists, 4, num_sms=132)
        q = plan_attention(np.ones(n, np.int64), lists, 4, num_sms=132, tokens_per_split=p.tokens_per_split)
        assert torch.equal(p.work, q.work)


def test_copy_all_equals_copy_into():
    from spsim.gpu_runtime.graphs import _copy_all, _copy_into

    def make():
        return [torch.zeros(8, dtype=torch.int32), torch.zeros(3, 2, dtype=torch.int64), torch.zeros(4, dtype=torch.bool),
                torch.zeros(5, dtype=torch.int64)]
    src = [torch.arange(6, dtype=torch.int32), torch.ones(3, 2, dtype=torch.int64),
           torch.tensor([True, False, True, True]), torch.arange(5, dtype=torch.int32)]  # last: another dtype
    a, b = make(), make()
    for d, s in zip(a, src):
        _copy_into(d, s)
    _copy_all(b, src)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and torch.equal(x, y)


@pytest.mark.parametrize("seed", range(12))
def test_packed_upload_round_trips_aligned(seed):
    """One packed copy (the GPU's path, here on the CPU): every array comes back equal, with its
    dtype and shape, each view at a 16-byte boundary (Triton specialises pointers on it)."""
    rng = np.random.default_rng(seed)
    kinds = [np.int64, np.int32, np.bool_, np.float64]
    arrays, dtypes = [], []
    for _ in range(rng.integers(1, 9)):
        shape = tuple(int(x) for x in rng.integers(0, 6, rng.integers(1, 3)))
        dt = kinds[rng.integers(len(kinds))]
        arrays.append(rng.integers(-50, 50, shape))
        dtypes.append(dt)
    out = upload(arrays, dtypes, "cpu", pack=True)
    plain = upload(arrays, dtypes, "cpu", pack=False)
    for a, dt, t, p in zip(arrays, dtypes, out, plain):
        assert t.dtype == p.dtype and tuple(t.shape) == a.shape
        assert np.array_equal(t.numpy(), np.asarray(a, dt))
        assert t.data_ptr() % 16 == 0
    if len(out) > 1:  # one buffer under all of them
        assert len({t.untyped_storage().data_ptr() for t in out}) == 1
