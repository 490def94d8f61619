"""Prefix blocks against the prompt they describe (Mooncake `hash_ids`, 512 tokens a block).

More blocks than ceil(prompt / block_size) cannot happen: an error naming line and field (or a
counted skip). Far fewer than the prompt's full blocks (under half) is possible but suspicious:
the row is kept and counted in `trace.warnings`, which `stats`, stderr and the canonical header show.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spsim.cli import app
from spsim.errors import InputError
from spsim.traces import read_trace, write_trace

TOO_MANY = "more blocks than the prompt holds (at most ceil(input_length / 512))"
FEW = "hash_ids: covers under half of the prompt's full 512-token blocks"


def mooncake(tmp_path, rows: list[tuple[int, list | None]]):
    p = tmp_path / "m.jsonl"
    lines = []
    for i, (prompt, ids) in enumerate(rows):
        d = {"timestamp": 1000 * i, "input_length": prompt, "output_length": 5}
        if ids is not None:
            d["hash_ids"] = ids
        lines.append(json.dumps(d))
    p.write_text("\n".join(lines) + "\n")
    return p


def test_more_blocks_than_the_prompt_holds_is_an_error(tmp_path):
    p = mooncake(tmp_path, [(1024, [0, 1]), (1025, [0, 1, 2]), (1000, [0, 1, 2]), (5, [])])
    with pytest.raises(InputError) as e:
        read_trace(p)
    assert (e.value.line, e.value.field, e.value.problem) == (3, "hash_ids", TOO_MANY)
    t = read_trace(p, skip_invalid=True)
    assert t.ids.tolist() == ["1", "2", "4"] and t.skipped == {f"hash_ids: {TOO_MANY}": 1}
    assert t.warnings == {}


def test_far_fewer_blocks_are_kept_and_counted(tmp_path):
    # full blocks 195, 195 (under half covered: warnings), 1 and 4 (half or more: fine); no hash_ids: fine
    p = mooncake(tmp_path, [(100_000, list(range(10))), (100_000, []), (1000, [0, 1]), (2048, [7, 8]),
                            (100_000, None)])
    t = read_trace(p)
    assert len(t) == 5 and t.warnings == {FEW: 2}
    r = CliRunner().invoke(app, ["trace", "stats", str(p), "--json"])
    assert r.exit_code == 0
    s = json.loads(r.stdout)
    assert s["warnings"] == {FEW: 2} and s["warnings_total"] == 2
    assert f"{p}: warning: 2 rows: 2 {FEW}" in r.stderr
    # carried in the canonical header, and not counted again when read back
    write_trace(t, tmp_path / "c.jsonl")
    head = json.loads((tmp_path / "c.jsonl").read_text().splitlines()[0])
    assert head["warnings"] == {FEW: 2}
    back = read_trace(tmp_path / "c.jsonl")
    assert back.warnings == {FEW: 2} and "warnings" not in back.meta


def test_canonical_with_a_block_size_is_checked_too(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"spsim_trace": 1, "block_size": 16}\n'
                 '{"id": "a", "arrival_s": 0, "prompt_tokens": 32, "output_tokens": 1, "prefix_blocks": [1, 2]}\n'
                 '{"id": "b", "arrival_s": 1, "prompt_tokens": 32, "output_tokens": 1, "prefix_blocks": [1, 2, 3]}\n')
    with pytest.raises(InputError, match=r":3: prefix_blocks: more blocks than the prompt holds"):
        read_trace(p)
    p.write_text('{"id": "b", "arrival_s": 1, "prompt_tokens": 32, "output_tokens": 1, "prefix_blocks": [1, 2, 3]}\n')
    assert len(read_trace(p)) == 1  # no block size: nothing to check against


def test_shipped_mooncake_is_consistent():
    t = read_trace("mooncake")
    assert t.skipped == {} and t.warnings == {}
