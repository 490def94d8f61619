"""spsim: scheduling self-speculative decoding for long-context LLM serving.

Its modules and packages form layers, each importing only from its own and the ones below
(docs/architecture.md; tests/test_layers.py checks it): the contracts both worlds share (the pass
plan `spsim.plan`, settings `spsim.config`, the spec grammar, errors, traces), the cost and
acceptance models, the scheduling brain (`spsim.policies`), the builder, the two worlds
(`spsim.simulator`, `spsim.gpu_runtime`), the tools (calibration, validation, reports), planning
and the server, and the CLI (`spsim.cli`) on top.
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
