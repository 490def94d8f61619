"""Prompt token ids from trace lengths and prefix block hashes (gpu_runtime/tokens.py)."""

import numpy as np
import pytest

from spsim.gpu_runtime.tokens import LOW_ID, SyntheticSource, TextSource, prompt_tokens

BS, V = 16, 32000


def test_deterministic_exact_length_and_range():
    for length in (0, 1, 15, 16, 17, 100):
        a = prompt_tokens(3, length, [7, 8, 9], BS, V, seed=1)
        assert a.dtype == np.int64 and a.shape == (length,)
        assert np.array_equal(a, prompt_tokens(3, length, np.array([7, 8, 9]), BS, V, seed=1))
        assert ((a >= LOW_ID) & (a < V)).all()
    assert not np.array_equal(prompt_tokens(3, 100, None, BS, V, 1), prompt_tokens(3, 100, None, BS, V, 2))
    small = prompt_tokens(0, 1000, None, BS, 20, 0)  # tiny vocabulary: the whole range
    assert small.min() == 0 and small.max() == 19


def test_equal_hashes_equal_blocks():
    a = prompt_tokens(1, 5 * BS + 3, [10, 11, 12, 13, 14, 15], BS, V, 0)  # 5 full blocks + 3-token tail
    b = prompt_tokens(2, 3 * BS, [10, 11, 99], BS, V, 0)
    c = prompt_tokens(3, 2 * BS + 5, [10, 11, 12], BS, V, 0)  # block 12 is partial here: not shared
    assert np.array_equal(a[: 2 * BS], b[: 2 * BS]) and np.array_equal(a[: 2 * BS], c[: 2 * BS])
    assert not np.array_equal(a[2 * BS: 3 * BS], b[2 * BS:])
    assert not np.array_equal(a[2 * BS: 2 * BS + 5], c[2 * BS:])
    # a block's tokens depend on its hash, not on where it sits
    d = prompt_tokens(4, 2 * BS, [12, 10], BS, V, 0)
    assert np.array_equal(d[:BS], a[2 * BS: 3 * BS]) and np.array_equal(d[BS:], a[:BS])
    # positions past the hash list come from the request
    e = prompt_tokens(5, 3 * BS, [10], BS, V, 0)
    assert np.array_equal(e[:BS], a[:BS]) and not np.array_equal(e[BS: 2 * BS], a[BS: 2 * BS])


def test_requests_without_blocks_differ():
    a = prompt_tokens(1, 200, None, BS, V, 0)
    b = prompt_tokens(2, 200, None, BS, V, 0)
    assert (a != b).mean() > 0.99
    assert np.array_equal(a[:50], prompt_tokens(1, 50, None, BS, V, 0))  # prefix-stable in length
    src = SyntheticSource(V, seed=0)
    assert np.array_equal(src.prompt_tokens(1, 200, [5], BS), prompt_tokens(1, 200, [5], BS, V, 0))


def _encode(text):
    return [ord(c) for c in text]  # a character tokenizer: ids are recognisable


def test_text_source_cuts_real_ids():
    text = "the quick brown fox jumps over the lazy dog; " * 3
    ids = np.array(_encode(text))
    src = TextSource(text, _encode, seed=4)
    a = src.prompt_tokens(1, 3 * BS + 7, [21, 22, 23], BS)
    assert a.shape == (3 * BS + 7,) and a.dtype == np.int64
    ring = np.concatenate([ids, ids])
    for blk in (a[:BS], a[BS: 2 * BS], a[2 * BS: 3 * BS], a[3 * BS:]):  # every cut is a run of the text
        assert any(np.array_equal(ring[i: i + len(blk)], blk) for i in range(len(ids)))
    b = src.prompt_tokens(2, 2 * BS, [21, 99], BS)
    assert np.array_equal(a[:BS], b[:BS])
    assert np.array_equal(a, src.prompt_tokens(1, 3 * BS + 7, [21, 22, 23], BS))
    # longer than the text: it repeats
    long = src.prompt_tokens(3, 5 * len(ids), None, BS)
    assert np.array_equal(long[: len(ids)], long[len(ids): 2 * len(ids)])
    assert set(long.tolist()) == set(ids.tolist())
    with pytest.raises(ValueError):
        TextSource("", _encode)
