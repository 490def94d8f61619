"""The attention work-list split rule has two forms, the runtime's (`split_blocks_for`, numpy, over
every unit of every head) and the cost model's (`split_of_units`, Python ints, one head's units):
they give the same split and the same number of work items."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spsim.worklist import split_blocks_for, split_of_units


@settings(max_examples=400, deadline=None)
@given(units=st.lists(st.integers(0, 4096), min_size=1, max_size=200), heads=st.sampled_from([1, 2, 4, 8]),
       bn=st.sampled_from([16, 32, 64, 128]), sms=st.sampled_from([8, 66, 132]))
def test_the_cost_models_split_is_the_runtimes(units, heads, bn, sms):
    every = np.repeat(np.array(units, np.int64), heads)
    want = split_blocks_for(every, num_sms=sms, bn=bn)
    split, items = split_of_units(units, heads, bn, num_sms=sms)
    assert split == want
    assert items == int(np.maximum(1, -(-every // want)).sum())


def test_the_rule_on_two_passes():
    # one 32K-token row (256 blocks of 128): the shortest splits that still fit one wave of 132 SMs
    assert split_of_units([256], 1, 128) == (2, 128)
    assert split_blocks_for(np.array([256]), bn=128) == 2
    # 16 such rows x 8 KV heads: the 4096-token floor (32 blocks), many waves
    assert split_of_units([256] * 16, 8, 128) == (32, 1024)
    assert split_blocks_for(np.full(128, 256), bn=128) == 32
