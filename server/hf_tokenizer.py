"""A model's tokenizer as Hugging Face `transformers` sees it: chat templates rendered the way
`apply_chat_template` renders them, and the tokenizer written out as a folder that
`AutoTokenizer.from_pretrained` loads.

Real weights from a GGUF file carry their vocabulary, merges and chat template; the runtime builds
a `tokenizers.Tokenizer` from them. A client that counts tokens itself (a load generator making
prompts of a given length, a benchmark checking `usage`) needs that same tokenizer, and with no
network it cannot fetch the model's own from the Hub: `export` writes it (tokenizer.json,
tokenizer_config.json with the chat template and special tokens), and the tokens it gives are the
server's.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

# tokenizer_config.json keys of special tokens, as transformers names them
SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


class TemplateError(ValueError):
    """A chat template refused the messages (`raise_exception`) or failed to render."""


class ChatTemplate:
    """A Jinja chat template rendered as transformers' `apply_chat_template` does: in a sandbox (a
    template comes from the weights file and runs no code of its own), blocks trimmed, with
    `raise_exception`, `strftime_now`, the `loopcontrols` extension, and the special tokens as
    variables (templates write `bos_token` themselves)."""

    def __init__(self, source: str, special: dict[str, str] | None = None):
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        # transformers' tojson keeps non-ASCII as is (Jinja's own escapes it for HTML)
        env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
            x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self.source, self.special = source, dict(special or {})
        self._t = env.from_string(source)

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        from jinja2 import TemplateError as JinjaError

        try:
            return self._t.render(messages=messages, add_generation_prompt=add_generation_prompt, tools=None,
                                  documents=None, **self.special)
        except TemplateError:
            raise
        except (JinjaError, TypeError, KeyError, IndexError, ValueError) as e:
            raise TemplateError(f"the chat template failed on these messages ({type(e).__name__}: {e})") from None


def special_tokens(tokenizer, bos_token_id=None, eos_token_ids=(), unk_token_id=None, pad_token_id=None) -> dict:
    """{"bos_token": "<|im_start|>", ...} for the ids given (None or out of range: left out)."""
    out = {}
    for name, i in (("bos_token", bos_token_id), ("eos_token", next(iter(eos_token_ids or ()), None)),
                    ("unk_token", unk_token_id), ("pad_token", pad_token_id)):
        t = tokenizer.id_to_token(int(i)) if i is not None else None
        if t is not None:
            out[name] = t
    return out


def gguf_text(path: str | Path, tokenizer=None) -> dict:
    """What a GGUF file says about text, read once (parsing the file is the slow part):
    `tokenizer` (built unless given), `chat_template`, `special` tokens
    (`tokenizer.ggml.*_token_id`) and `max_context`."""
    from spsim.gpu_runtime.gguf_loader import gguf_field, open_gguf, gguf_tokenizer

    r = open_gguf(path)
    tok = tokenizer if tokenizer is not None else gguf_tokenizer(r, path)
    ids = {k: gguf_field(r, f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "unknown", "padding")}
    arch = gguf_field(r, "general.architecture", "llama")
    return {"tokenizer": tok, "chat_template": gguf_field(r, "tokenizer.chat_template") or None,
            "special": special_tokens(tok, ids["bos"], () if ids["eos"] is None else (ids["eos"],), ids["unknown"],
                                      ids["padding"]),
            "max_context": gguf_field(r, f"{arch}.context_length")}


def export(tokenizer, out: str | Path, *, chat_template: str | None = None, special: dict | None = None,
           max_context: int | None = None) -> Path:
    """Write `tokenizer` (a `tokenizers.Tokenizer`) to the folder `out` as transformers'
    `PreTrainedTokenizerFast` files; returns `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    special = dict(special or {})
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", **special,
           # the runtime adds no BOS/EOS of its own and decodes byte-exactly
           "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False}
    if max_context:
        cfg["model_max_length"] = int(max_context)
    if chat_template:
        cfg["chat_template"] = chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2, ensure_ascii=False) + "\n")
    return out


def export_gguf(weights: str | Path, out: str | Path) -> Path:
    """The tokenizer of a GGUF file (a path or an alias such as `smollm2-135m`) written to `out`,
    without loading its tensors."""
    from spsim.gpu_runtime.weights import resolve_weights

    g = gguf_text(resolve_weights(weights))
    return export(g["tokenizer"], out, chat_template=g["chat_template"], special=g["special"],
                  max_context=g["max_context"])
