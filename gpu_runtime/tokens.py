"""Prompt token ids for traces that carry only lengths and prefix block hashes.

A full block whose hash is known (Mooncake `hash_ids`, canonical `prefix_blocks`) gets tokens that
depend on (seed, block hash) only: equal hashes give equal tokens, so requests that share a prefix
really share KV (Mooncake chains its hashes, so an equal hash means an equal prefix). Everything
else, the partial last block, blocks past the hash list and prompts of traces without blocks,
depends on (seed, request id, position). Only full blocks are hashed, as in the batcher's prefix
cache, which shares full blocks only.

`prompt_tokens` draws synthetic ids uniformly from [16, vocab) (the bottom of the vocabulary is
where tokenizers put special tokens: BOS, EOS, padding); `TextSource` cuts the same structure out of
real tokenised text. Both use the sampling module's keyed hash, on streams of their own.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from spsim.keyed import keyed_hash  # numpy only: a client (spsim bench serve) makes the same prompts

LOW_ID = 16  # synthetic ids start here (special tokens below), when the vocabulary is large enough
_BLOCK, _REQ, _TEXT_BLOCK, _TEXT_REQ = 16, 17, 18, 19  # hash streams, apart from sampling's 0..2


def _layout(length: int, blocks, block_size: int) -> tuple[np.ndarray, int]:
    """The hashes of the prompt's full blocks and the number of tokens they cover."""
    if blocks is None or block_size <= 0:
        return np.zeros(0, np.int64), 0
    hashes = np.asarray(blocks, np.int64).reshape(-1)[: length // block_size]
    return hashes, len(hashes) * block_size


def _draw(h: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return (h % np.uint64(hi - lo)).astype(np.int64) + lo  # modulo bias < vocab / 2**64


def prompt_tokens(rid: int, length: int, blocks: np.ndarray | Sequence[int] | None, block_size: int,
                  vocab: int, seed: int) -> np.ndarray:
    """`length` synthetic token ids (int64) for request `rid`, deterministic in all arguments.

    Full blocks with a hash: ids from (seed, hash); the rest: ids from (seed, rid, position).
    Ids are in [16, vocab) when vocab > 32, else in [0, vocab)."""
    lo = LOW_ID if vocab > 2 * LOW_ID else 0
    hashes, covered = _layout(length, blocks, block_size)
    out = np.empty(length, np.int64)
    if covered:
        out[:covered] = _draw(keyed_hash(seed, _BLOCK, hashes[:, None], np.arange(block_size)), lo, vocab).ravel()
    out[covered:] = _draw(keyed_hash(seed, _REQ, rid, np.arange(covered, length)), lo, vocab)
    return out


class SyntheticSource:
    """`prompt_tokens` with the vocabulary and seed bound: the same interface as TextSource."""

    def __init__(self, vocab: int, seed: int = 0):
        self.vocab, self.seed = vocab, seed

    def prompt_tokens(self, rid: int, length: int, blocks=None, block_size: int = 512) -> np.ndarray:
        return prompt_tokens(rid, length, blocks, block_size, self.vocab, self.seed)


class TextSource:
    """Prompts cut from real text (`--text FILE` with real weights), tokenised once.

    The text's ids are treated as a ring (repeated when a cut runs past the end). A full hashed
    block is the `block_size` ids starting at an offset keyed by (seed, hash), so equal hashes still
    give equal tokens; the rest of a prompt is one contiguous run starting at an offset keyed by
    (seed, rid), indexed by prompt position. Cuts start mid-sentence and blocks of one prompt come
    from unrelated places: real token statistics, not coherent documents."""

    def __init__(self, text: str, tokenizer_encode: Callable[[str], Sequence[int]], seed: int = 0):
        self.ids = np.asarray(tokenizer_encode(text), dtype=np.int64).reshape(-1)
        if len(self.ids) == 0:
            raise ValueError("TextSource: the text tokenises to no tokens")
        self.seed = seed

    def prompt_tokens(self, rid: int, length: int, blocks=None, block_size: int = 512) -> np.ndarray:
        n = np.uint64(len(self.ids))
        hashes, covered = _layout(length, blocks, block_size)
        out = np.empty(length, np.int64)
        if covered:
            off = (keyed_hash(self.seed, _TEXT_BLOCK, hashes, 0) % n).astype(np.int64)
            out[:covered] = self.ids[(off[:, None] + np.arange(block_size)) % len(self.ids)].ravel()
        off = int(keyed_hash(self.seed, _TEXT_REQ, rid, 0) % n)
        out[covered:] = self.ids[(off + np.arange(covered, length)) % len(self.ids)]
        return out
