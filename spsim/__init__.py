"""spsim: scheduling self-speculative decoding for long-context LLM serving.

The top-level package holds what both worlds (simulator and GPU runtime) share: the pass plan and
its outcome (`spsim.plan`), the spec grammar (`spsim.spec`), user-facing errors (`spsim.errors`)
and the CLI (`spsim.cli`). The parts live in `spsim.traces`, `spsim.policies`, `spsim.simulator`,
`spsim.calibration` and `spsim.gpu_runtime`.
"""

__version__ = "0.1.0"


def _source_checkout_parts() -> None:
    """Run from a source checkout (e.g. on the GPU machine, where the repository root is the
    working directory and shadows an editable install): find spsim.<part> in the top-level
    folders the design card fixes."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "gpu_runtime" / "__init__.py").is_file():
        if str(root) not in __path__:
            __path__.append(str(root))


_source_checkout_parts()
