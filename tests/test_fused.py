"""The fused small-op kernels against the PyTorch code they replace (CPU, Triton interpreter, fp32;
the GPU tests run them in bf16 inside the model)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_fused_ops_match_torch():
    import torch.nn.functional as F

    from spsim.gpu_runtime import fused
    from spsim.gpu_runtime.model import RMSNorm, apply_rope

    g = torch.Generator().manual_seed(0)
    t, hidden, heads, d = 5, 48, 3, 16
    x, y = torch.randn(t, hidden, generator=g), torch.randn(t, hidden, generator=g)
    norm = RMSNorm(hidden, 1e-5)
    norm.weight.data = torch.randn(hidden, generator=g)
    torch.testing.assert_close(fused.rmsnorm(x, norm.weight, 1e-5), norm(x), rtol=1e-5, atol=1e-5)
    res, h = fused.add_rmsnorm(x, y, norm.weight, 1e-5)
    torch.testing.assert_close(res, x + y)
    torch.testing.assert_close(h, norm(x + y), rtol=1e-5, atol=1e-5)
    qkv = torch.randn(t, (heads + 2) * d, generator=g)  # a strided view, as the model passes it
    q = qkv[:, :heads * d].view(t, heads, d)
    ang = torch.randn(t, d // 2, generator=g)
    torch.testing.assert_close(fused.rope(q, ang.cos(), ang.sin()), apply_rope(q, ang.cos(), ang.sin()),
                               rtol=1e-5, atol=1e-5)
    qk, kk = fused.rope_qk(qkv, ang.cos(), ang.sin(), heads, 1, d)  # q and k heads in one launch
    k = qkv[:, heads * d:(heads + 1) * d].view(t, 1, d)
    torch.testing.assert_close(qk, apply_rope(q, ang.cos(), ang.sin()), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(kk, apply_rope(k, ang.cos(), ang.sin()), rtol=1e-5, atol=1e-5)
    gu = torch.randn(t, 2 * 70, generator=g)
    gate, up = gu.chunk(2, dim=-1)
    torch.testing.assert_close(fused.silu_mul(gu), F.silu(gate) * up, rtol=1e-5, atol=1e-5)
