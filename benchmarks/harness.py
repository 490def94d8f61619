"""What every benchmark result records beside its numbers: the benchmark, the date, the command, the
machine and the versions it ran with. One place for it, so results of different benchmarks (and of
the same benchmark on different machines) say the same things the same way.

    from harness import header, write
    doc = {**header("sim_speed"), "rows": rows}
    write(args.out, doc)

Importable from a checkout without an install (the GPU machine): it needs only the standard library,
and asks for torch, triton, numpy, simpy and spsim only where they are already importable.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"


def now() -> str:
    """UTC time, to the second (every result's `date`)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _loaded_or_importable(name: str):
    if name in sys.modules:
        return sys.modules[name]
    if importlib.util.find_spec(name) is None:
        return None
    try:
        return __import__(name)
    except Exception:  # a broken optional install must not stop a benchmark
        return None


def versions(*extra: str) -> dict:
    """Python and the versions of the libraries a result depends on (those that are installed)."""
    out = {"python": platform.python_version()}
    for name in ("spsim", "numpy", "simpy", "torch", "triton", *extra):
        mod = sys.modules.get(name) if name in ("torch", "triton") else _loaded_or_importable(name)
        v = getattr(mod, "__version__", None) if mod is not None else None
        if v is not None:
            out[name] = str(v)
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.version, "cuda", None):
        out["cuda"] = torch.version.cuda
    try:  # which code produced the numbers: the checkout's commit, where there is one
        out["git"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def machine() -> dict:
    """CPU, cores, load and, where torch has been imported and sees one, the GPU."""
    out = {"platform": platform.platform(), "cpu": platform.processor() or platform.machine(),
           "cores": os.cpu_count(), "host": platform.node()}
    if hasattr(os, "getloadavg"):
        out["loadavg"] = [round(x, 2) for x in os.getloadavg()]  # timings on a shared machine need it
    torch = sys.modules.get("torch")  # only if the benchmark uses it: importing torch costs seconds
    if torch is not None and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["gpus"] = torch.cuda.device_count()
    return out


def gpu_slug(name: str) -> str:
    """A file-name tag for a GPU name: "NVIDIA H100 80GB HBM3" -> "h100" (its model word)."""
    words = name.split()
    return next((w.lower() for w in words if w[:1].isalpha() and w[1:2].isdigit()), words[-1].lower() if words else "gpu")


def header(benchmark: str, libs: tuple[str, ...] = (), **extra) -> dict:
    """The metadata block every result file starts with (`libs`: versions to record beyond the usual)."""
    return {"benchmark": benchmark, "date": now(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "machine": machine(), "versions": versions(*libs), **extra}


def write(path: str | Path, doc: dict) -> Path:
    """Write a result as indented JSON, creating its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path


def emit(doc: dict, path: str | Path | None = None) -> None:
    """Print a result as indented JSON, and write it to `path` where one is given."""
    text = json.dumps(doc, indent=1) + "\n"
    if path:
        Path(path).write_text(text)
    print(text)
