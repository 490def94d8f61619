"""`spsim models` (issue 39, item 10): GPU memory labelled as what it is, the memory the card
exposes in GiB (the H200 showed "150 GB": 150.1e9 bytes, 139.8 GiB, datasheet 141 GB)."""

from __future__ import annotations

from typer.testing import CliRunner

from spsim.cli import app
from spsim.hardware import GPUS


def test_gpu_memory_is_the_exposed_gib():
    r = CliRunner().invoke(app, ["models"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "memory exposed (GiB)" in r.output
    rows = {line.split()[1]: line.split()[3] for line in r.output.splitlines() if line.startswith("│ ") and "." in line}
    assert rows["h200"] == "139.8" and rows["h100-sxm"] == "79.6" and rows["a100-80gb"] == "80.0"
    assert GPUS["h200"].mem_bytes == 150_109_880_320  # the memory model keeps the bytes
