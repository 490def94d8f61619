"""One rule for empty results: a trace command whose result has no requests says so once, on one
line, and exits 2; zero or negative counts are bad option values (exit 2).

Before: a header-only file exited 2 but all rows skipped, `head -n -3`, `--window 5:2` and
`--first 0` exited 0 with nothing in them.
"""

from __future__ import annotations

import sys

import pytest

from spsim import cli
from spsim.errors import InputError
from spsim.traces import read_trace
from spsim.traces.report import EmptyTrace


def main(capsys, *args) -> tuple[int, str, str]:
    """Run `spsim ARGS` in this process (as the installed command does): exit code, stdout, stderr."""
    saved, sys.argv = sys.argv, ["spsim", *map(str, args)]
    try:
        cli.main()
        code = 0
    except SystemExit as e:
        code = e.code or 0
    finally:
        sys.argv = saved
    got = capsys.readouterr()
    return code, got.out, got.err


def one_error_line(err: str, *words: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and all(w in lines[0] for w in words), lines[0]
    assert err.count("no requests") <= 1
    return lines[0]


@pytest.fixture
def vidur(tmp_path):
    p = tmp_path / "v.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,1\n1,-3,1\n2,10,abc\n")
    return p


@pytest.mark.parametrize("cmd", [["stats"], ["head"], ["convert", "-"]])
def test_every_row_skipped_is_an_error_once(capsys, vidur, tmp_path, cmd):
    vidur.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,-1,1\n1,-3,1\n2,10,abc\n")
    args = [cmd[0], vidur, *cmd[1:], "--skip-invalid"]
    code, out, err = main(capsys, "trace", *args)
    assert code == 2 and out == ""
    line = one_error_line(err, str(vidur), "no requests", "3 rows skipped")
    assert "2 num_prefill_tokens: negative" in line and "1 num_decode_tokens: not a number" in line


def test_header_only_files(capsys, tmp_path):
    for name, text in (("h.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n"),
                       ("h.jsonl", '{"spsim_trace": 1, "source_format": "vidur"}\n'),
                       ("s.jsonl", '{"spsim_trace": 1, "skipped": {"x: negative": 4}}\n')):
        p = tmp_path / name
        p.write_text(text)
        code, out, err = main(capsys, "trace", "stats", p)
        assert code == 2 and out == ""
        one_error_line(err, str(p), "no requests")


def test_burstgpt_with_only_failed_requests(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,0,472,Conversation log\n")
    with pytest.raises(EmptyTrace) as e:
        read_trace(p)
    assert e.value.skipped == {"failed request (Response tokens = 0)": 1}
    assert isinstance(e.value, InputError) and e.value.line is None


@pytest.mark.parametrize("args,words", [
    (["head", "mooncake", "-n", "-3"], ["-n", ">= 1", "-3"]),
    (["head", "mooncake", "-n", "0"], ["-n", ">= 1"]),
    (["stats", "mooncake", "--first", "0"], ["--first", ">= 1"]),
    (["convert", "mooncake", "-", "--first", "-2"], ["--first", ">= 1"]),
    (["stats", "mooncake", "--sample", "0"], ["--sample", ">= 1"]),
    (["stats", "mooncake", "--window", "5:2"], ["--window", "5:2"]),
    (["stats", "mooncake", "--filter-prompt", "10:5"], ["--filter-prompt", "10:5"]),
    (["stats", "mooncake", "--window", "100000:"], ["mooncake", "no requests", "--window 100000:"]),
    (["convert", "mooncake", "-", "--filter-output", "100000:"], ["no requests", "--filter-output 100000:"]),
    (["head", "azure-conv", "--merge", "mooncake", "--window", "1e6:2e6"], ["no requests", "--window"]),
])
def test_empty_results_and_bad_counts_exit_2_once(capsys, args, words):
    code, out, err = main(capsys, "trace", *args)
    assert code == 2 and out == "", (out, err)
    one_error_line(err, *words)


def test_nonempty_results_still_work(capsys, vidur):
    code, out, err = main(capsys, "trace", "stats", vidur, "--skip-invalid", "--json")
    assert code == 0 and '"count": 1' in out and "skipped 2 rows" in err
    code, out, _ = main(capsys, "trace", "head", "mooncake", "-n", "1", "--jsonl", "--window", "0:0.5")
    assert code == 0 and len(out.splitlines()) == 2
