"""Model shapes: what the cost model and the memory accounting need to know about a model.

Shapes are copied from each model's Hugging Face `config.json`. Parameter counts are derived from
the shapes (and checked against the published totals in tests/test_cost.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import SpsimError

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


def dtype_bytes(dtype: str) -> int:
    key = dtype.strip().lower().replace("bfloat16", "bf16").replace("float16", "fp16")
    key = {"e4m3": "fp8", "fp8_e4m3": "fp8", "float8": "fp8"}.get(key, key)
    if key not in DTYPE_BYTES:
        raise SpsimError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BYTES)})")
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class ModelConfig:
    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_context: int  # tokens; longer requests are rejected
    tied_embeddings: bool = False
    qkv_bias: bool = False
    published_params: float = 0.0  # the model card's figure, for a sanity check only

    # --- derived sizes (counts of parameters) ---
    @property
    def layer_linear_params(self) -> int:
        """Parameters of one layer's linear projections (q, k, v, o, gate, up, down)."""
        q = self.hidden * self.q_heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.q_heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return q + kv + o + mlp

    @property
    def layer_small_params(self) -> int:
        """Norms and biases: kept in bf16 even in fp8 checkpoints."""
        bias = (self.q_heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return 2 * self.hidden + bias

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        body = self.layers * (self.layer_linear_params + self.layer_small_params) + self.hidden
        return body + self.embed_params + (0 if self.tied_embeddings else self.lm_head_params)

    # --- bytes ---
    def weight_bytes(self, dtype: str = "bf16") -> int:
        """All weights held in GPU memory. fp8 applies to the linear layers; embeddings, LM head and
        norms stay bf16, as in the published fp8 checkpoints."""
        lin = self.layers * self.layer_linear_params * dtype_bytes(dtype)
        rest = self.layers * self.layer_small_params + self.hidden + self.embed_params
        rest += 0 if self.tied_embeddings else self.lm_head_params
        return lin + 2 * rest

    def pass_weight_bytes(self, dtype: str = "bf16") -> int:
        """Weights streamed by one forward pass: every linear layer and the LM head (the embedding
        table is gathered row by row, so only the LM head's copy of it is read in full)."""
        lin = self.layers * self.layer_linear_params * dtype_bytes(dtype)
        return lin + 2 * (self.layers * self.layer_small_params + self.hidden + self.lm_head_params)

    def kv_bytes_per_token(self, dtype: str = "bf16") -> int:
        """K and V of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes(dtype)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


# name, layers, hidden, q heads, KV heads, head dim, intermediate, vocab, max context (tokens),
# tied embeddings, QKV bias, the model card's parameter count
_TABLE = [
    ("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 131072, False, False, 8.03e9),
    ("llama-3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, 131072, True, False, 3.21e9),
    # Qwen2.5: config.json says 32768; the model card's 131072 needs YaRN rope scaling, which
    # long-context serving turns on, so we take the long window
    ("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, 131072, False, True, 7.61e9),
    ("qwen2.5-14b", 48, 5120, 40, 8, 128, 13824, 152064, 131072, False, True, 14.7e9),
    ("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, 131072, False, False, 70.6e9),
    # the small models the runtime serves on a CPU (`spsim run --device cpu`): here so a trace
    # recorded there replays with `spsim replay --model` under the same shape
    ("llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, 131072, True, False, 1.24e9),
    ("smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, 8192, True, False, 134.5e6),
    ("tiny", 2, 64, 4, 2, 32, 160, 512, 4096, False, False, 0.0),  # the runtime's CPU test shape (random weights)
]
MODELS: dict[str, ModelConfig] = {row[0]: ModelConfig(*row) for row in _TABLE}

_ALIASES = {
    "8b": "llama-3.1-8b", "llama3-8b": "llama-3.1-8b", "llama-3-8b": "llama-3.1-8b", "llama3.1-8b": "llama-3.1-8b",
    "meta-llama/llama-3.1-8b": "llama-3.1-8b", "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "llama-3.1-8b-instruct": "llama-3.1-8b",
    "3b": "llama-3.2-3b", "llama3-3b": "llama-3.2-3b", "llama3.2-3b": "llama-3.2-3b",
    "meta-llama/llama-3.2-3b-instruct": "llama-3.2-3b", "llama-3.2-3b-instruct": "llama-3.2-3b",
    "qwen-7b": "qwen2.5-7b", "qwen2.5-7b-instruct": "qwen2.5-7b", "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen-14b": "qwen2.5-14b", "qwen2.5-14b-instruct": "qwen2.5-14b", "qwen/qwen2.5-14b-instruct": "qwen2.5-14b",
    "70b": "llama-3.1-70b", "llama3-70b": "llama-3.1-70b", "llama-3-70b": "llama-3.1-70b",
    "llama3.1-70b": "llama-3.1-70b", "llama-3.1-70b-instruct": "llama-3.1-70b",
    "meta-llama/llama-3.1-70b-instruct": "llama-3.1-70b",
}


def get_model(name: str | ModelConfig) -> ModelConfig:
    """Look a model up by name or alias, case-insensitively."""
    if isinstance(name, ModelConfig):
        return name
    key = str(name).strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in MODELS:
        raise SpsimError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    return MODELS[key]
