"""The runtime's small CPU models (`smollm2-135m`, `tiny`, `llama-3.2-1b`) are simulator shapes too,
so a trace recorded with `spsim run --device cpu` replays under the same shape (issue 40)."""

import json
import subprocess
import sys

import pytest

from spsim.gpu_runtime.model_config import CONFIGS
from spsim.models import MODELS, get_model


def test_every_runtime_config_is_a_simulator_shape():
    assert set(CONFIGS) == set(MODELS)
    assert abs(get_model("smollm2-135m").params / 134.5e6 - 1) < 0.01  # the model card's 135M
    assert abs(get_model("llama-3.2-1b").params / 1.24e9 - 1) < 0.01
    assert CONFIGS["tiny"].dtype == "fp32" and CONFIGS["smollm2-135m"].rope_theta == 100000.0


@pytest.mark.parametrize("model", ["smollm2-135m", "tiny"])
def test_replay_accepts_the_runtime_models(tmp_path, model):
    tr = tmp_path / "t.jsonl"
    tr.write_text(json.dumps({"spsim_trace": 1}) + "\n" + "".join(
        json.dumps({"id": f"q{i}", "arrival_s": 0.0, "prompt_tokens": 1024, "output_tokens": 24}) + "\n"
        for i in range(3)))
    p = subprocess.run([sys.executable, "-m", "spsim.cli", "replay", str(tr), "--model", model, "--offline",
                        "--policy", "fixed-k:k=4", "--draft-kv", "verify-quest", "--draft-budget", "128", "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["completed"] == 3 and d["total_output_tokens"] == 72
