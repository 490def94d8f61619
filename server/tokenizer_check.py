"""`spsim bench tokenizer`: export a GGUF's tokenizer for clients, and measure it.

A load generator counts prompt and output tokens with its own copy of the tokenizer; its figures
mean what the server's do only if both tokenize alike. This loads the exported folder with
transformers, as such a client would, and counts on a text how many prompts (raw and through the
chat template) get the server's exact tokens, and how fast each side tokenizes (the server
tokenizes each prompt on its HTTP thread, so this bounds the prompt tokens per second it can take in).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

# used when no --text is given: prose, digits, code, whitespace runs and non-Latin scripts, the
# places byte-level BPE pre-tokenizers differ
SAMPLE = """Once upon a time, in a land far away, there lived a curious fox.
The quick brown fox jumps over the lazy dog 1234567890 times; pi is 3.14159.
def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)
  Leading spaces,   inner runs,\ttabs and trailing spaces
Déjà vu: naïve café, Straße, 東京タワー, Москва, emoji 🙂🚀.
It's what we'll do; they've said I'm sure you'd agree.
<|im_start|>user\nSpecial tokens in text<|im_end|>"""


def check(weights: str, out: str | Path | None = None, text: str | None = None, repeat: int = 20) -> dict:
    """Export the tokenizer of the GGUF `weights` to `out` (a temporary folder if None), reload it
    with transformers and compare it with the server's on each non-empty line of `text`."""
    from transformers import AutoTokenizer

    from spsim.gpu_runtime.weights import resolve_weights

    from .hf_tokenizer import export, gguf_text
    from .text import TextCodec

    g = gguf_text(resolve_weights(weights))
    tok = g["tokenizer"]
    codec = TextCodec(tok, g["chat_template"], tok.get_vocab_size(), g["special"])
    lines = [x for x in (text if text is not None else SAMPLE).splitlines() if x.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        folder = export(tok, out or tmp, chat_template=g["chat_template"], special=g["special"],
                        max_context=g["max_context"])
        hf = AutoTokenizer.from_pretrained(str(folder))
    ours = [codec.encode(x) for x in lines]
    text_equal = sum(hf.encode(x) == ids for x, ids in zip(lines, ours))
    chat_equal = None
    if g["chat_template"]:
        msgs = [[{"role": "user", "content": x}] for x in lines]
        chat_equal = sum(list(hf.apply_chat_template(m, add_generation_prompt=True, tokenize=True)) == codec.chat(m)
                         for m in msgs)
    n_tokens = sum(map(len, ours)) * repeat

    def rate(encode) -> float:
        t0 = time.perf_counter()
        for _ in range(repeat):
            for x in lines:
                encode(x)
        return n_tokens / max(time.perf_counter() - t0, 1e-9)

    return {"weights": str(weights), "folder": str(out) if out else None, "prompts": len(lines),
            "text_equal": text_equal, "chat_equal": chat_equal, "chat_template": bool(g["chat_template"]),
            "tokens": n_tokens // repeat, "server_tokens_per_s": rate(codec.encode),
            "transformers_tokens_per_s": rate(hf.encode)}
