"""The calibrated model prices the tokens a padded pass really computes, by the runtime's own rule."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spsim.cost import CalibratedCostModel, CalibratedParams
from spsim.cost.batch import PlanBatch
from spsim.cost.padding import (TABLE_N, bucket_vec, pad_count_vec, padded, padded_vec, pow2_vec,
                                rule_size_vec)
from spsim.buckets import RULE_SKIP, bucket, pad_count, pow2, rule_size
from spsim.gpu_runtime.padding import PassPadding
from spsim.plan import PassPlan


def test_vector_rules_are_the_runtimes():
    n = np.arange(0, 70000)
    assert np.array_equal(pad_count_vec(n), [pad_count(int(x)) for x in n])
    for least in (1, 8, 16, 128):
        m = n[n >= 1]
        assert np.array_equal(bucket_vec(m, least), [bucket(int(x), least) for x in m])
        assert np.array_equal(pow2_vec(m, least), [pow2(int(x), least) for x in m])
    big = np.array([2 ** 40 - 1, 2 ** 40, 2 ** 40 + 1, 3 * 2 ** 45])
    assert np.array_equal(pow2_vec(big), [pow2(int(x)) for x in big])


def test_looked_up_rules_are_the_runtimes():
    # arrays inside the tables take the lookup, the one above the arithmetic: both the scalar rules
    n = np.arange(0, TABLE_N)
    assert np.array_equal(pad_count_vec(n), [pad_count(int(x)) for x in n])
    for least in (1, 8, 16):
        assert np.array_equal(bucket_vec(n, least), [bucket(int(x), least) for x in n])
        assert np.array_equal(pow2_vec(n[1:], least), [pow2(int(x), least) for x in n[1:]])
        assert np.array_equal(rule_size_vec(n[1:], least), [rule_size(int(x), least) for x in n[1:]])
        m = np.arange(TABLE_N - 3, TABLE_N + 300)
        assert np.array_equal(rule_size_vec(m, least), [rule_size(int(x), least) for x in m])


def test_the_rule_pads_past_its_skipped_token_classes():
    # 448 and 896 tokens ran as slow as the next power of two: no pass is padded to them, in the
    # runtime's rule or the cost model's (the arithmetic path too: an array reaching past the tables)
    n = np.arange(1, 6000)
    assert not {rule_size(int(x)) for x in n} & set(RULE_SKIP)
    for s in RULE_SKIP:
        assert rule_size(s) == rule_size(s - 40) == pow2(s)
        assert rule_size_vec(np.array([s - 40, TABLE_N + 1])).tolist()[0] == pow2(s)
    assert rule_size(385) == 512 and rule_size(384) == 384 and rule_size(513) == 640


def _runtime(tokens: int, logits: int, n_dr: int, n_ver: int, coarse: bool) -> tuple[int, int]:
    """What the executor adds to a graphable pass (gpu_runtime/executor.py, `launch`), replayed
    with the runtime's PassPadding on a pass of `tokens` real tokens and `logits` logits rows."""
    pad = PassPadding(1000, 16, coarse=coarse)
    row = tokens + len(pad.drafters(n_dr)) + len(pad.verifiers(n_ver))
    spare = list(range(row - tokens))
    q = pad.filler_tokens(row)
    spare += [0] * q
    return row + q, len(pad.logit_rows(list(range(logits)), spare))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.integers(0, 3000), st.booleans())
def test_padded_counts_are_the_executors(n_dr, n_ver, extra, coarse):
    """Tokens and logits rows: drafts (one each), verifications (`extra` tokens over them), as the
    executor pads them; the scalar and vector twins agree."""
    if n_dr + n_ver == 0:
        return
    tokens = n_dr + n_ver + (extra if n_ver else 0)
    logits = tokens
    mode = "pow2" if coarse else "bucket"
    want = _runtime(tokens, logits, n_dr, n_ver, coarse)
    assert padded(tokens, logits, n_dr, n_ver, mode, 256) == want
    t, lg = padded_vec([tokens], [logits], [n_dr], [n_ver], mode, 256)
    assert (int(t[0]), int(lg[0])) == want
    assert padded(tokens, logits, n_dr, n_ver, "none", 256) == (tokens, logits)


def _plans():
    dec = lambda n, q=1: PassPlan(verify_ids=np.arange(n), verify_query=np.full(n, q, np.int64),  # noqa: E731
                                  verify_context=np.full(n, 4096, np.int64))
    pre = lambda n: PassPlan(prefill_ids=np.array([0]), prefill_tokens=np.array([n]),  # noqa: E731
                             prefill_context=np.array([0]))
    return dec, pre


def test_padding_prices_the_filler_and_leaves_eager_passes_alone():
    P = replace(CalibratedParams(), prefill_graph_tokens=2048)
    none = CalibratedCostModel("llama-3.1-8b", "h200", params=P)
    bucket_ = none.with_params(padding="bucket")
    coarse = none.with_params(padding="pow2")
    dec, pre = _plans()
    # 1,100 prefill tokens: bucket pads to 1,280 (180 filler tokens fit the 256 scratch tokens);
    # powers of two would need 948: the coarse runtime runs them unpadded
    # (the filler's tokens in the linear layers; its attention, over itself, left out)
    assert bucket_.time(pre(1100)) - none.time(pre(1100)) == pytest.approx(
        none.pass_overhead(1280, num_logits=8) - none.pass_overhead(1100, num_logits=1), rel=1e-9)
    assert bucket_.time(pre(1100)) > none.time(pre(1100))
    assert coarse.time(pre(1100)) == pytest.approx(none.time(pre(1100)), rel=1e-12)
    # past the graphs' limit the pass runs eagerly, unpadded
    assert bucket_.time(pre(4000)) == pytest.approx(none.time(pre(4000)), rel=1e-12)
    # five decodes: one dummy verification (pad_count 6), the filler to bucket(7, 8) = 8 tokens
    assert bucket_.pass_overhead(8, num_logits=8) == pytest.approx(
        bucket_.time(dec(5)) - none.time(dec(5)) + none.pass_overhead(5, num_logits=5), rel=1e-9)
    plans = [dec(5), dec(16, 9), pre(1100), pre(4000), pre(300)]
    for cm in (bucket_, coarse):
        batch = cm.times(PlanBatch.of(plans))
        for i, p in enumerate(plans):
            assert batch[i] == pytest.approx(cm.time(p), rel=1e-12)


def test_unknown_padding_mode_is_refused():
    with pytest.raises(ValueError, match="padding must be one of"):
        CalibratedParams.from_dict({"padding": "sometimes"})


def _runtime_rule(tokens: int, logits: int, n_pre: int, n_dr: int, n_ver: int) -> tuple[int, int]:
    """What the executor adds under the shape rule (executor.py `launch`, `ruled`): dummy verifiers
    up to the padded request count, the filler (always: its pages cycle over the scratch pages)."""
    from spsim.gpu_runtime.shapes import ShapeRule

    pad = PassPadding(1000, 16, rule=ShapeRule(16, 32768, 16, 128))
    n = n_pre + n_dr + n_ver
    row = tokens + pad.rows(n) - n
    spare = list(range(row - tokens))
    q = pad.filler_tokens(row)
    assert q >= 1 and len(pad.filler_table(q)) * 16 >= q
    spare += [0] * q
    return row + q, len(pad.logit_rows(list(range(logits)), spare, (pad.rows(n), row + q) if n else None))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), st.integers(0, 40), st.integers(0, 40), st.integers(0, 3000))
def test_rule_padding_is_the_executors(n_pre, n_dr, n_ver, extra):
    """The cost model's "rule" mode adds what the runtime's shape rule adds, prefill chunks
    counted among the padded requests; scalar and vector twins agree."""
    if n_pre + n_dr + n_ver == 0:
        return
    tokens = n_dr + n_ver + (extra if n_ver or n_pre else 0)
    logits = n_pre + n_dr + n_ver
    want = _runtime_rule(tokens, logits, n_pre, n_dr, n_ver)
    assert padded(tokens, logits, n_dr, n_ver, "rule", 256, n_pre, 17) == want
    t, lg = padded_vec([tokens], [logits], [n_dr], [n_ver], "rule", 256, [n_pre], 17)
    assert (int(t[0]), int(lg[0])) == want
    assert want[0] <= max(8, 2 * (tokens + n_dr + n_ver + n_pre + 1), 1.25 * (tokens + 2 * (n_pre + n_dr + n_ver)) + 1)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), st.integers(0, 300), st.integers(0, 300), st.integers(0, 2600))
def test_rule_graphs_the_passes_the_executor_graphs(n_pre, n_dr, n_ver, extra):
    """Under the shape rule the cost model prices as eager exactly the passes the runtime leaves
    ungraphed: those whose tokens, padded with the rule's dummy rows and a filler token, pass the
    limit (executor.py `_prepare`); scalar and vector twins agree."""
    n = n_pre + n_dr + n_ver
    if n == 0:
        return
    tokens = n_dr + n_ver + extra
    cm = CalibratedCostModel("llama-3.1-8b", "h200", params=replace(CalibratedParams(), padding="rule",
                                                                     prefill_graph_tokens=2048))
    runtime_graphs = tokens + pow2(n) - n < 2048  # what the executor's dummies and filler make of it
    assert bool(cm.ruled(tokens, n)) == runtime_graphs
    assert bool(cm.eager(n_pre > 0, tokens, n)) == (not runtime_graphs)
    assert bool(cm.eager(np.array([n_pre > 0]), np.array([tokens]), np.array([n]))[0]) == (not runtime_graphs)
