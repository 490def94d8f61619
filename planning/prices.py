"""What a GPU costs per hour, for goodput per dollar.

The defaults are illustrative on-demand prices per GPU-hour of US cloud offers as listed in 2025
(rounded; they vary by provider, region and commitment by 2x or more). They are not quotes: give
your own with `--prices FILE`, a JSON object `{"h200": 3.5, "h100-sxm": 2.5}` (USD per GPU-hour;
GPUs not in the file keep the defaults). Costs count GPUs only (replicas x --tp), not hosts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from spsim.errors import InputError, SpsimError
from spsim.hardware import get_gpu

DEFAULT_PRICES = {  # USD per GPU-hour, illustrative (see the module doc)
    "h200": 3.80,
    "h100-sxm": 3.00,
    "h100-nvl": 2.80,
    "a100-80gb": 1.80,
}
SOURCE = "spsim defaults (illustrative 2025 on-demand prices; override with --prices)"


def load_prices(path: str | Path | None) -> tuple[dict[str, float], str]:
    """The price table and where it came from."""
    prices = dict(DEFAULT_PRICES)
    if path is None:
        return prices, SOURCE
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise SpsimError(f"--prices {p}: cannot read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise InputError(p, e.lineno, None, f"not JSON ({e.msg})") from None
    if not isinstance(doc, dict):
        raise InputError(p, 1, None, 'expected a JSON object {"h200": 3.5, ...} (USD per GPU-hour)')
    for name, v in doc.items():
        try:
            gpu = get_gpu(name).name
        except SpsimError as e:
            raise InputError(p, _line(p, name), name, str(e)) from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise InputError(p, _line(p, name), name, f"price must be a number > 0 (USD per GPU-hour), got {v!r}")
        prices[gpu] = float(v)
    return prices, f"{p} (defaults for GPUs it does not list)"


def _line(p: Path, key: str) -> int | None:
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if f'"{key}"' in line:
            return i
    return None
