"""Test session setup.

Kernel tests run on the CPU through Triton's interpreter unless GPU tests were selected; the
variable must be set before anything imports triton.
"""

import os
import sys


def pytest_configure(config):
    markexpr = config.getoption("-m") or ""
    if "gpu" in markexpr and "not gpu" not in markexpr:
        return
    if "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
