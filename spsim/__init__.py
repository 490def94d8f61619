"""spsim: scheduling self-speculative decoding for long-context LLM serving.

The top-level package holds what both worlds (simulator and GPU runtime) share: the pass plan and
its outcome (`spsim.plan`), the spec grammar (`spsim.spec`), user-facing errors (`spsim.errors`)
and the CLI (`spsim.cli`). The parts live in `spsim.traces`, `spsim.policies`, `spsim.simulator`,
`spsim.calibration` and `spsim.gpu_runtime`.
"""

__version__ = "0.1.0"
