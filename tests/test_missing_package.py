"""A command whose packages are missing names the one install command (issue 39, item 3)."""

import re
import tomllib
from pathlib import Path

from spsim.cli import GPU_EXTRA, missing_package


def test_every_gpu_extra_package_points_at_the_extra():
    extra = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    names = {re.split(r"[<>=\[ ]", d)[0] for d in extra["project"]["optional-dependencies"]["gpu"]}
    assert names == set(GPU_EXTRA)
    for name in GPU_EXTRA:
        assert "pip install 'spsim[gpu]'" in missing_package(name)


def test_another_package_is_named_alone():
    line = missing_package("simpy")
    assert "pip install simpy" in line and "gpu" not in line
