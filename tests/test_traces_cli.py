"""The shipped traces through `spsim trace ...`, format detection, and errors at the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from spsim.cli import app
from spsim.errors import InputError
from spsim.traces import read_trace, shipped, stats

runner = CliRunner()


def run(*args):
    return runner.invoke(app, ["trace", *map(str, args)])


def stats_json(*args):
    r = run("stats", *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_shipped_azure_conv_has_19366_requests():
    s = stats_json("azure-conv")
    assert s["count"] == 19_366
    assert s["prompt_tokens"]["max"] == 14_050 and s["output_tokens"]["max"] == 1_000
    assert s["skipped_total"] == 0
    # the table too, and by path as well as by name
    r = run("stats", str(shipped("azure-conv")))
    assert r.exit_code == 0 and "19,366" in r.stdout


def test_shipped_mooncake_conversation():
    s = stats_json("mooncake")
    assert s["count"] == 12_031
    assert s["prompt_tokens"]["max"] == 126_195
    assert s["prompt_tokens"]["p50"] == 6_909 and s["output_tokens"]["max"] == 2_000
    assert s["prefix"]["block_size"] == 512
    assert s["span_s"] == pytest.approx(3536.999)


def test_reading_mooncake_is_fast():
    t0 = time.perf_counter()
    t = read_trace("mooncake")
    assert len(t) == 12_031
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize("name", ["mooncake", "azure-conv"])
def test_convert_to_canonical_keeps_statistics(tmp_path, name):
    dst = tmp_path / f"{name}.jsonl"
    r = run("convert", name, dst)
    assert r.exit_code == 0, r.output
    first = json.loads(dst.read_text().splitlines()[0])
    assert first["spsim_trace"] == 1
    a, b = stats_json(name), stats_json(dst)
    assert a == b
    # and the canonical file converts to itself, byte for byte
    dst2 = tmp_path / "again.jsonl"
    assert run("convert", dst, dst2).exit_code == 0
    assert dst2.read_text() == dst.read_text()


def test_ids_are_source_line_numbers():
    t = read_trace("azure-conv")
    assert t.ids[0] == "2" and t.ids[-1] == "19367"  # header is line 1
    assert read_trace("mooncake").ids[0] == "1"


def test_format_detection_and_forcing(tmp_path):
    p = tmp_path / "trace.txt"  # unknown extension: detected from the content
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,100,10\n1.5,200,20\n")
    t = read_trace(p)
    assert t.meta["source_format"] == "vidur" and t.arrival_s.tolist() == [0.0, 1.0]
    with pytest.raises(InputError, match=":1: TIMESTAMP: column missing from the azure header"):
        read_trace(p, format="azure")
    with pytest.raises(InputError, match="unknown format 'bogus'"):
        read_trace(p, format="bogus")


def test_azure_2024_timezone_and_mixed_precision(tmp_path):
    p = tmp_path / "az24.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2024-05-10 00:00:00.0094310+00:00,10,5\n"
                 "2024-05-10 00:00:01+00:00,20,6\n"
                 "2024-05-10 00:00:01.5+00:00,30,7\n")
    t = read_trace(p)
    assert t.meta["source_format"] == "azure-2024"
    assert t.arrival_s.tolist() == pytest.approx([0.0, 0.990569, 1.490569], abs=1e-9)


def test_burstgpt_failed_rows_are_counted_and_excluded(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,18,490,Conversation log\n"
                 "45,ChatGPT,1087,0,1087,Conversation log\n"
                 "118,GPT-4,417,276,693,API log\n")
    r = run("stats", p, "--json")
    assert r.exit_code == 0
    s = json.loads(r.stdout)
    assert s["count"] == 2 and s["skipped"] == {"failed request (Response tokens = 0)": 1}
    assert "skipped 1 row: 1 failed request" in r.stderr
    t = read_trace(p)
    assert t.extra["Model"].tolist() == ["ChatGPT", "GPT-4"] and t.ids.tolist() == ["2", "4"]


@pytest.mark.parametrize("text,where", [
    ("", "empty file"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests (header only)"),
    ("a,b\n1,2\n", "unknown format"),
    ('{"foo": 1}\n', "unknown format"),
    ("Timestamp,Request tokens,Response tokens\n1,5,5\n2,x,5\n", ":3: Request tokens: not a number"),
    ("Timestamp,Request tokens,Response tokens\n1,5,5\n2,,5\n", ":3: Request tokens: missing"),
    ("Timestamp,Request tokens,Response tokens\n1,5,5\n2,5\n", ":3: malformed line: expected 3 fields, found 2"),
    ("Timestamp,Request tokens,Response tokens\n1,5,5\n2,-5,5\n", ":3: Request tokens: negative"),
    ("Timestamp,Request tokens,Response tokens\n3,5,5\n2,5,5\n", ":3: Timestamp: timestamps not sorted"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5\n', ":2: malformed JSON"),
])
def test_bad_input_is_one_line_naming_the_place(tmp_path, text, where):
    p = tmp_path / ("t.jsonl" if text.startswith("{") else "t.csv")
    p.write_text(text)
    r = run("stats", p)
    assert isinstance(r.exception, InputError), r.output
    msg = str(r.exception)
    assert "\n" not in msg and msg.startswith(str(p)) and where in msg


def test_unreadable_inputs(tmp_path):
    for path, why in ((tmp_path / "nope.csv", "no such file"), (tmp_path, "is a directory")):
        r = run("stats", path)
        assert isinstance(r.exception, InputError) and why in str(r.exception)
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00garbage")
    assert isinstance(run("stats", p).exception, InputError)


def test_skip_invalid_reports_counts(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,1\n1,-3,1\n2,10,abc\n3,10,1,9\n4,5,5\n")
    r = run("stats", p, "--skip-invalid", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["count"] == 2 and s["skipped_total"] == 3
    assert s["skipped"] == {"num_prefill_tokens: negative": 1, "num_decode_tokens: not a number": 1,
                            "malformed line: expected 3 fields, found 4": 1}
    assert "skipped 3 rows" in r.stderr


def test_error_exit_code_through_main(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("Timestamp,Request tokens,Response tokens\n1,5,5\n2,5,-1\n")
    r = subprocess.run([sys.executable, "-m", "spsim.cli", "trace", "stats", str(p)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"{p}:3: Response tokens: negative" in r.stderr.replace("\n", "")


def test_head_and_transform_options(tmp_path):
    r = run("head", "mooncake", "-n", "3", "--jsonl")
    lines = r.stdout.splitlines()
    assert r.exit_code == 0 and len(lines) == 4 and json.loads(lines[0])["block_size"] == 512
    s = stats_json("mooncake", "--window", "600:1200", "--filter-prompt", "1000:", "--rescale-qps", "10")
    assert s["prompt_tokens"]["min"] >= 1000 and s["qps"] == pytest.approx(10)
    s = stats_json("azure-conv", "--sample", "500", "--seed", "3", "--clip-output", "100")
    assert s["count"] == 500 and s["output_tokens"]["max"] == 100
    s = stats_json("azure-conv", "--merge", "mooncake")  # merge comes first, on one clock
    assert s["count"] == 19_366 + 12_031 and s["prompt_tokens"]["max"] == 126_195
    r = run("stats", "mooncake", "--window", "nonsense")
    assert "--window" in str(r.exception)
    assert stats(read_trace("azure-conv"))["count"] == 19_366


def test_gen_writes_a_readable_trace(tmp_path):
    dst = tmp_path / "g.jsonl"
    r = run("gen", dst, "--preset", "long-doc-qa", "-n", "200", "--qps", "4", "--seed", "7")
    assert r.exit_code == 0, r.output
    s = stats_json(dst)
    assert s["count"] == 200 and s["prompt_tokens"]["min"] >= 4096
    dst2 = tmp_path / "g2.jsonl"
    run("gen", dst2, "--preset", "long-doc-qa", "-n", "200", "--qps", "4", "--seed", "7")
    assert dst.read_text() == dst2.read_text()
    r = run("gen", "-", "-n", "5", "--prompt", "lognormal:median=8000", "--output", "64")
    assert "sigma" in str(r.exception)
