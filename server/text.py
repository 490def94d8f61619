"""Prompts in, text out: the tokenizer (with its chat template) of real weights, or token ids as
text for a model without one (random weights): a prompt is a list of token ids and the output is
its token ids separated by spaces."""

from __future__ import annotations


class PromptError(ValueError):
    """A prompt this model cannot take; `param` names the request field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


class TextCodec:
    def __init__(self, tokenizer=None, chat_template: str | None = None, vocab: int = 0,
                 special: dict[str, str] | None = None):
        """`special`: the special tokens' text by transformers' name (`bos_token`, ...), which chat
        templates may write."""
        self.tokenizer, self.vocab = tokenizer, int(vocab)
        self._template = None
        if chat_template:
            from .hf_tokenizer import ChatTemplate

            self._template = ChatTemplate(chat_template, special)

    def token_ids(self, ids, param: str) -> list[int]:
        out = []
        for x in ids:
            if isinstance(x, bool) or not isinstance(x, int):
                raise PromptError(param, f"{param}: token ids must be integers (got {x!r})")
            if not 0 <= x < self.vocab:
                raise PromptError(param, f"{param}: token id {x} is outside the vocabulary [0, {self.vocab})")
            out.append(x)
        return out

    def encode(self, text: str, param: str = "prompt") -> list[int]:
        if self.tokenizer is None:
            raise PromptError(param, f"{param}: this model has no tokenizer (random weights): send the prompt "
                                     "as a list of token ids")
        return list(self.tokenizer.encode(text).ids)

    def chat(self, messages: list[dict]) -> list[int]:
        if self.tokenizer is None:
            raise PromptError("messages", "messages: this model has no tokenizer (random weights): use "
                                          "/v1/completions with a prompt of token ids")
        if self._template is None:
            raise PromptError("messages", "messages: the weights carry no chat template: use /v1/completions")
        from .hf_tokenizer import TemplateError

        try:
            text = self._template.render(messages, add_generation_prompt=True)
        except TemplateError as e:
            raise PromptError("messages", f"messages: {e}") from None
        # as apply_chat_template: the template writes any special tokens itself
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decoder(self) -> "Detokenizer":
        return Detokenizer(self.tokenizer)


class Detokenizer:
    """Output text, as it grows: the text of all ids so far, minus what was already handed out. A
    multi-byte character split across tokens waits for its last token."""

    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""

    def add(self, ids: list[int]) -> str:
        """Append `ids`; returns the new text."""
        if not ids:
            return ""
        if self.tokenizer is None:
            new = " ".join(str(x) for x in ids)
            new = (" " if self.ids else "") + new
            self.ids += ids
            self.text += new
            return new
        self.ids += ids
        full = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if full.endswith("\ufffd"):  # an incomplete character: wait for its next token
            return ""
        new = full[len(self.text):]
        self.text = full
        return new
