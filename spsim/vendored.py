"""Pure-Python packages a checkout carries as wheels in vendor/wheels/ for machines that lack them
(the GPU machine has no simpy, starlette or uvicorn): a pure-Python wheel imports straight from its
zip, so it is put on the path where importing the package fails."""

from __future__ import annotations

import sys
from pathlib import Path

from .errors import SpsimError


def ensure_vendored(module: str, who: str) -> None:
    """`module` importable: installed, else its pure-Python wheel from a checkout's vendor/wheels/
    put on the path (the GPU machine lacks simpy, starlette and uvicorn)."""
    import importlib

    try:
        importlib.import_module(module)
        return
    except ImportError:
        pass
    wheels = sorted((Path(__file__).resolve().parent.parent / "vendor" / "wheels").glob(f"{module}-*.whl"))
    if not wheels:
        raise SpsimError(f"{who} needs the Python package {module} (pip install {module}; a checkout carries it in "
                         "vendor/wheels/)")
    sys.path.append(str(wheels[-1]))
    importlib.import_module(module)
