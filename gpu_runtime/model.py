"""A Llama-family transformer (Llama 3.x, Qwen2.5, SmolLM2) in plain PyTorch, in the spirit of
gpt-fast: RMSNorm, RoPE (theta, Llama-3 scaling), grouped-query attention, SwiGLU, optional QKV
bias, tied embeddings.

Attention is not in here. `Transformer.forward` takes a flat batch (every request's query tokens
back to back, with their positions) and, in each layer, hands `(layer, q, k, v)` to an attention
callback that stores k/v in its KV cache and returns the attention output. `kv_cache.PagedAttention`
is the paged backend over `dispatch.attention` (Triton on Hopper and under TRITON_INTERPRET,
the PyTorch reference elsewhere); an engine can pass its own (sparse drafts, page scores, ...).

`reference_logits` is a separate dense implementation (one sequence, no cache, explicit causal
softmax attention) over the same weights, for tests.

Parameter names are this file's own (QKV and gate/up fused into one GEMM each);
`weights.py` maps them to and from Hugging Face names.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from .model_config import LlamaConfig


class Attention(Protocol):
    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q `[T, q_heads, head_dim]`, k and v `[T, kv_heads, head_dim]` (RoPE applied) for the
        pass's T tokens; store k/v, return the attention output `[T, q_heads, head_dim]`. k and v
        are None where the attention's optional `rope_write(layer, qkv, cos, sin)` returned q: it
        stored them already."""
        ...


def rope_inv_freq(cfg: LlamaConfig) -> torch.Tensor:
    """Inverse frequencies `[head_dim / 2]` (fp64), with Llama-3 scaling if configured (as HF's
    `_compute_llama3_parameters`: long wavelengths divided by `factor`, short kept, a smooth blend
    between)."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    s = cfg.rope_scaling
    if s is None:
        return inv
    old = s.original_max_position_embeddings
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / s.low_freq_factor, inv / s.factor, inv)
    smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= old / s.high_freq_factor) & (wavelen <= old / s.low_freq_factor)
    return torch.where(medium, blended, scaled)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Norms and RoPE run in fp32 (fp64 for fp64 models), as HF does."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _fused(x: torch.Tensor):
    """The fused small-op kernels (`fused.py`) where they apply to `x` (CUDA, 16-bit), else None.
    Imported on first use: CPU installs need not have Triton."""
    if not x.is_cuda:
        return None
    from . import fused

    return fused if fused.enabled(x) else None


def linear(lin: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`lin(x)`; one token on a GPU: the PDL matrix-vector kernel (`gemv.py`)."""
    y = _one_token(x, lin.weight, lin.bias)
    return lin(x) if y is None else y


def _one_token(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    if x.shape[0] == 1 and _fused(x) is not None:
        from . import gemv

        if gemv.ENABLED and gemv.usable(x, weight):
            return gemv.gemv(x, weight, bias)
    return None


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF (non-interleaved) rotation: the head's two halves are the pair's two coordinates.
    x `[T, H, D]`, cos/sin `[T, D/2]`."""
    x1, x2 = x.to(cos.dtype).chunk(2, dim=-1)
    c, s = cos[:, None], sin[:, None]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (f := _fused(x)) is not None:
            return f.rmsnorm(x, self.weight, self.eps)
        h = x.to(_compute_dtype(x.dtype))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)

    def add_forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(x + y, norm(x + y))`: the residual add and the next norm, fused on GPUs."""
        if (f := _fused(x)) is not None:
            return f.add_rmsnorm(x, y, self.weight, self.eps)
        x = x + y
        return x, self(x)


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        d, hq, hkv = cfg.head_dim, cfg.q_heads, cfg.kv_heads
        self.attn_norm = RMSNorm(cfg.hidden, cfg.rms_norm_eps)
        self.wqkv = nn.Linear(cfg.hidden, (hq + 2 * hkv) * d, bias=cfg.qkv_bias)  # q | k | v rows
        self.wo = nn.Linear(hq * d, cfg.hidden, bias=False)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.rms_norm_eps)
        self.w_gate_up = nn.Linear(cfg.hidden, 2 * cfg.intermediate, bias=False)  # gate | up rows
        self.w_down = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, layer: int, x: torch.Tensor, delta: torch.Tensor | None, cos: torch.Tensor,
                sin: torch.Tensor, attention: Attention) -> tuple[torch.Tensor, torch.Tensor]:
        """`(residual, delta)`: the layer's output is `residual + delta`, left unsummed so the next
        layer's norm adds it (one kernel fewer per layer). `delta` None: `x` is the input itself."""
        c = self.cfg
        t = x.shape[0]
        if delta is None:
            h = self.attn_norm(x)
        else:
            x, h = self.attn_norm.add_forward(x, delta)
        qkv = linear(self.wqkv, h)
        f = _fused(x)
        rope_write = getattr(attention, "rope_write", None) if f is not None else None
        if rope_write is not None and (q := rope_write(layer, qkv, cos, sin)) is not None:
            o = attention(layer, q, None, None)  # RoPE and the K/V write were one launch
        else:
            if f is not None:  # RoPE on q and k in one launch
                q, k = f.rope_qk(qkv, cos, sin, c.q_heads, c.kv_heads, c.head_dim)
            else:
                q = qkv[:, :c.q_heads * c.head_dim]
                k = qkv[:, c.q_heads * c.head_dim:(c.q_heads + c.kv_heads) * c.head_dim]
                q = apply_rope(q.view(t, c.q_heads, c.head_dim), cos, sin)
                k = apply_rope(k.view(t, c.kv_heads, c.head_dim), cos, sin)
            v = qkv[:, (c.q_heads + c.kv_heads) * c.head_dim:]
            o = attention(layer, q, k, v.view(t, c.kv_heads, c.head_dim))
        x, h = self.mlp_norm.add_forward(x, linear(self.wo, o.reshape(t, c.q_heads * c.head_dim)))
        gate_up = linear(self.w_gate_up, h)
        if f is not None:
            return x, linear(self.w_down, f.silu_mul(gate_up))
        gate, up = gate_up.chunk(2, dim=-1)
        return x, self.w_down(F.silu(gate) * up)


class Transformer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        """Parameters with meaningless contents: build with `random`, `from_state_dict` or a
        loader (`weights.load_model`)."""
        super().__init__()
        self.cfg = cfg
        # _weight: skips the default init (normal_ on meta tensors imports half of torch)
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden, _weight=torch.empty(cfg.vocab, cfg.hidden))
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tied_embeddings else nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        # Not a buffer (Module.to(dtype) would round it); made on first use, where the positions are.
        self._inv_freq: torch.Tensor | None = None

    # --- construction ---
    @classmethod
    def empty(cls, cfg: LlamaConfig, device="cpu", dtype: torch.dtype | None = None) -> "Transformer":
        """Allocated on `device` (default dtype: the config's), contents undefined."""
        dtype = dtype or cfg.torch_dtype
        with torch.device("meta"):
            m = cls(cfg).to(dtype)
        return m.to_empty(device=device).requires_grad_(False).eval()

    @classmethod
    def from_state_dict(cls, cfg: LlamaConfig, sd: dict[str, torch.Tensor]) -> "Transformer":
        """A model over the given tensors (this file's names; no copy)."""
        with torch.device("meta"):
            m = cls(cfg)
        m.load_state_dict(sd, assign=True, strict=True)
        return m.requires_grad_(False).eval()

    @classmethod
    def random(cls, cfg: LlamaConfig, seed: int = 0, device="cpu", dtype: torch.dtype | None = None) -> "Transformer":
        """Seeded random weights, scaled so activations stay O(1) at any depth in bf16: linear
        weights N(0, 1/fan_in), embeddings N(0, 1) (N(0, 1/hidden) when tied), norms 1, biases
        N(0, 0.02^2). One seed gives different values on different devices (their generators)."""
        m = cls.empty(cfg, device, dtype)
        gen = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith("bias"):
                    p.normal_(0.0, 0.02, generator=gen)
                elif name == "embed.weight":  # tied: also the LM head, so logits stay O(1)
                    p.normal_(0.0, 1.0 / math.sqrt(cfg.hidden) if cfg.tied_embeddings else 1.0, generator=gen)
                else:
                    p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]), generator=gen)
        return m

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    # --- forward ---
    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv, cdt = self._inv_freq, _compute_dtype(self.dtype)
        if inv is None or inv.device != positions.device or inv.dtype != cdt:
            inv = self._inv_freq = rope_inv_freq(self.cfg).to(device=positions.device, dtype=cdt)
        ang = positions.to(inv.dtype)[:, None] * inv[None, :]
        return ang.cos(), ang.sin()

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attention: Attention,
                logit_rows: torch.Tensor | None = None) -> torch.Tensor:
        """One pass over a flat batch.

        tokens, positions: `[T]` int64 on the model's device (requests' tokens back to back; a
        token's position is its index in its sequence). attention: called once per layer, in
        order. logit_rows: indices into the T tokens whose logits are wanted (e.g. each prefill
        chunk's last token and every verify token); default all. Returns logits `[rows, vocab]`,
        fp32 (fp64 for fp64 models).
        """
        x = self.embed(tokens)
        cos, sin = self.rope(positions)
        delta = None
        for i, layer in enumerate(self.layers):
            x, delta = layer(i, x, delta, cos, sin, attention)
        if delta is not None:
            x = x + delta
        if logit_rows is not None:
            x = x[logit_rows]
        return self.logits(self.norm(x))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        y = _one_token(h, w, None)
        return (F.linear(h, w) if y is None else y).to(_compute_dtype(h.dtype))


@torch.no_grad()
def reference_logits(model: Transformer, tokens: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Dense reference: logits `[S, vocab]` of one sequence of S tokens from position 0, computed in
    `dtype` (default the model's) on the model's weights. Written apart from `Transformer.forward`
    (no cache, no batching, own RoPE and attention) so that the two check each other."""
    c = model.cfg
    dt = dtype or model.dtype
    w = {k: p.to(dt) for k, p in model.state_dict().items()}
    s, d, g = tokens.shape[0], c.head_dim, c.group
    cdt = _compute_dtype(dt)

    def norm(x, weight):
        xf = x.to(cdt)
        return weight * (xf / torch.sqrt((xf * xf).mean(-1, keepdim=True) + c.rms_norm_eps)).to(dt)

    # RoPE angles, frequency by frequency as in the HF formula.
    freqs = []
    r = c.rope_scaling
    for i in range(d // 2):
        f = c.rope_theta ** (-2.0 * i / d)
        if r is not None:
            old = r.original_max_position_embeddings
            wl = 2 * math.pi / f
            if wl > old / r.low_freq_factor:
                f = f / r.factor
            elif wl >= old / r.high_freq_factor:
                a = (old / wl - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor)
                f = (1 - a) * f / r.factor + a * f
        freqs.append(f)
    pos = torch.arange(s, device=tokens.device, dtype=cdt)
    ang = pos[:, None] * torch.tensor(freqs, device=tokens.device, dtype=cdt)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def rot(x):  # x [S, H, D]: x * cos + rotate_half(x) * sin
        xf = x.to(cdt)
        half = torch.cat([-xf[..., d // 2:], xf[..., : d // 2]], -1)
        return (xf * cos[:, None] + half * sin[:, None]).to(dt)

    causal = torch.ones(s, s, dtype=torch.bool, device=tokens.device).tril()
    x = w["embed.weight"][tokens]
    for i in range(c.layers):
        p = f"layers.{i}."
        h = norm(x, w[p + "attn_norm.weight"])
        qkv = h @ w[p + "wqkv.weight"].T
        if c.qkv_bias:
            qkv = qkv + w[p + "wqkv.bias"]
        nq, nk = c.q_heads * d, c.kv_heads * d
        q = rot(qkv[:, :nq].reshape(s, c.q_heads, d))
        k = rot(qkv[:, nq:nq + nk].reshape(s, c.kv_heads, d))
        v = qkv[:, nq + nk:].reshape(s, c.kv_heads, d)
        out = torch.empty_like(q)
        for hh in range(c.q_heads):
            kv = hh // g  # query head hh reads KV head hh // group
            sc = (q[:, hh].to(cdt) @ k[:, kv].to(cdt).T) / math.sqrt(d)
            sc = sc.masked_fill(~causal, float("-inf"))
            out[:, hh] = (torch.softmax(sc, -1) @ v[:, kv].to(cdt)).to(dt)
        x = x + out.reshape(s, -1) @ w[p + "wo.weight"].T
        h = norm(x, w[p + "mlp_norm.weight"])
        gu = h @ w[p + "w_gate_up.weight"].T
        gate, up = gu[:, : c.intermediate], gu[:, c.intermediate:]
        x = x + (gate * torch.sigmoid(gate) * up) @ w[p + "w_down.weight"].T
    x = norm(x, w["norm.weight"])
    head = w["embed.weight"] if c.tied_embeddings else w["lm_head.weight"]
    return (x @ head.T).to(cdt)
