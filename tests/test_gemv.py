"""The one-token linear-layer kernel (`gpu_runtime/gemv.py`, Triton CPU interpreter) against
`F.linear`: several K tiles (the next one's load in flight), rows past N masked, with and without
bias; and the tile rule. The GPU tests run it in bf16 inside the model."""

import pytest
import torch
import torch.nn.functional as F

from spsim.gpu_runtime import interpret

FRESH = interpret.can_interpret()
if FRESH:
    interpret.load_interpreted()

from spsim.gpu_runtime import gemv as G  # noqa: E402


@pytest.fixture(autouse=True)
def _interpreted(request):
    if not FRESH and request.node.name not in ("test_kernel_interpreted_or_rerun", "test_default_config"):
        pytest.skip("triton was imported compiled before this module: test_kernel_interpreted_or_rerun runs it")


def test_kernel_interpreted_or_rerun():
    if FRESH:
        from triton.runtime.interpreter import InterpretedFunction

        assert isinstance(G._gemv, InterpretedFunction)
    else:
        assert interpret.rerun_in_subprocess(__file__) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("cfg", [(4, 16, 1), (16, 64, 4), (1, 16, 1)], ids=["3-tiles", "1-tile", "1-row"])
@pytest.mark.parametrize("bias", [False, True])
def test_gemv_matches_linear(dtype, cfg, bias):
    g = torch.Generator().manual_seed(1)
    n, k = 42, 64 if cfg[1] == 64 else 48
    x = torch.randn(1, k, generator=g).to(dtype)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(dtype)
    b = torch.randn(n, generator=g).to(dtype) if bias else None
    y = G.gemv(x, w, b, cfg)
    assert y.shape == (1, n) and y.dtype == dtype
    ref = F.linear(x.float(), w.float(), None if b is None else b.float())
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(y.float(), ref, rtol=tol, atol=tol)


def test_default_config():
    # K tiles: the largest power of two up to 2048 that divides K; 4K weights a tile
    assert G.default_config(6144, 4096) == (2, 2048, 4)
    assert G.default_config(4096, 14336) == (2, 2048, 4)
    assert G.default_config(4608, 3584) == (8, 512, 4)
    assert G.default_config(10, 48) == (16, 16, 4)
    for n, k in ((6144, 4096), (4096, 14336), (576, 1536), (49152, 576)):
        bn, bk, _ = G.default_config(n, k)
        assert k % bk == 0 and bk & (bk - 1) == 0 and bn & (bn - 1) == 0
    x, w = torch.zeros(1, 64, dtype=torch.bfloat16), torch.zeros(8, 64, dtype=torch.bfloat16)
    assert G.usable(x, w) and not G.usable(torch.zeros(2, 64, dtype=torch.bfloat16), w)
    assert not G.usable(x.float(), w.float()) and not G.usable(x, w.t().contiguous().t())
