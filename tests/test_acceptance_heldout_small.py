"""CI's small version of benchmarks/acceptance_heldout.py: the runtime's `tiny` model (random
weights, in process) serves three "texts" (prompt seeds), their events go through the same
leave-one-text-out fit (`spsim acceptance fit --holdout-by text`) and replay (`spsim compare
--seeds 10`) as the benchmark, and the result rows say what the benchmark's do (issue 40)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import acceptance_heldout as H  # noqa: E402
import heldout_record as R  # noqa: E402


def _record_in_process(work: Path, texts: dict, configs: list) -> dict:
    from spsim.config import ServingConfig
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace, write_outputs
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config
    from spsim.traces import read_trace

    torch.set_num_threads(1)
    model = Transformer.random(get_config("tiny", dtype="fp64"), seed=0)
    work.mkdir(parents=True, exist_ok=True)
    trace = read_trace(R.write_trace(work / "trace.jsonl", [192] * 4, 20))
    paths = {}
    for i, text in enumerate(texts):
        for policy, method, budget in configs:
            cfg = ServingConfig(policy=policy, model="tiny", offline=True, kv_pages=200, page_size=16,
                                draft_budget=budget, draft_kv=method, seed=i)
            out = R.run_dir(work, text, policy, method, budget)
            write_outputs(out, run_trace(trace, cfg, RuntimeOptions(device="cpu"), model=model), trace)
            paths[(text, policy, method, budget)] = out / "events.jsonl"
    return paths


def _spsim_in_process(*args) -> str:
    """The benchmark's `spsim` command line run in this process: the same commands, without an
    interpreter start and import per call (12 calls)."""
    from typer.testing import CliRunner

    from spsim.cli import app

    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, f"spsim {' '.join(map(str, args))}: {r.output}{r.exception!r}"
    return r.stdout


def test_leave_one_text_out_small(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "spsim", _spsim_in_process)
    texts = {f"t{i}": ("synthetic", None) for i in range(3)}
    configs = [("fixed-k:k=4", "verify-quest", 64)]
    paths = _record_in_process(tmp_path, texts, configs)
    rows = H.leave_one_text_out(paths, tmp_path, texts, configs, "tiny", say=lambda m: None)
    assert [r["text"] for r in rows] == list(texts)
    for r in rows:
        real = H.real_run(paths[(r["text"], *configs[0])])["real"]
        assert r["real"] == real and 0 <= real <= 4  # the held-out text's own real run
        assert r["lo"] <= r["predicted"] <= r["hi"] and r["half_width_rel"] > 0
        assert r["model_chosen"] in ("constant", "position", "latent")
        assert r["inside"] == (r["lo"] <= r["real"] <= r["hi"])
        assert abs(r["error_rel"] - (r["predicted"] / r["real"] - 1)) < 1e-12
    s = H.summarise(rows)
    assert s["splits"] == 3 and s["median_abs_error"] == float(np.median([abs(r["error_rel"]) for r in rows]))
