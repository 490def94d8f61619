"""What a new user meets on bad input: the error names the file, line, column or parameter the
user can act on, in words (no Python internals), with a non-zero exit."""

from __future__ import annotations

import pytest

from spsim.errors import InputError, SpecError
from spsim.spec import build
from spsim.traces import read_trace
from traces.lengths import Fixed, Lognormal


def test_malformed_json_names_the_column_where_the_line_breaks_off(tmp_path):
    # the break-off is at the end of line 2 (column 35), not at "column 1" of the next
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5\n')
    with pytest.raises(InputError, match=r"t\.jsonl:2: malformed JSON: Expecting ',' delimiter at column 35$"):
        read_trace(str(p))


@pytest.mark.parametrize("cls, name, params, words", [
    (Fixed, "fixed", {}, "fixed: missing parameter value (expected fixed:value=...)"),
    (Lognormal, "lognormal", {"median": 100}, "lognormal: missing parameter sigma (expected lognormal:median=...,sigma=...)"),
])
def test_a_spec_missing_a_required_parameter_says_which(cls, name, params, words):
    with pytest.raises(SpecError) as e:
        build(cls, name, params)
    assert str(e.value) == words and "__init__" not in str(e.value)
