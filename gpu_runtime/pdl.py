"""Programmatic dependent launch (PDL, Hopper): a kernel of a pass is scheduled while the kernel
before it drains, and waits for it (`griddepcontrol.wait`) before touching memory.

A batch-1 decode step is ~350 short kernels; in a CUDA graph each gap between two of them cost
~0.75 us on the H200 (0.26 ms of a 5.84 ms step at 1 x 32K,
`benchmarks/results/runtime_profile_h200_b1x32k_graph.json`). The small kernels of a layer (norms,
RoPE, KV write, attention, its merge, SiLU-gate) are launched with PDL: each signals at its start
that the next may be scheduled (`gdc_launch_dependents`) and waits before its first load
(`gdc_wait`), so nothing is read or written before the previous kernel has finished and flushed;
a kernel only overlaps its launch and scheduling with the previous one's tail. cuBLAS kernels are
launched as PyTorch launches them (no PDL): they wait for everything before them as usual.

`SPSIM_PDL=0` turns it off (to time the difference). Off under the Triton interpreter.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .interpret import INTERPRET

ENABLED = os.environ.get("SPSIM_PDL", "1") != "0" and not INTERPRET


@triton.jit
def enter(GDC: tl.constexpr):
    """First statement of a PDL kernel: let the next kernel be scheduled, wait for the previous."""
    if GDC:
        gdc_launch_dependents()
        gdc_wait()


def on(device) -> bool:
    """Whether kernels on this device launch with PDL (CUDA; the kernels run only on sm_90)."""
    return ENABLED and getattr(device, "type", None) == "cuda"


def kw(device) -> dict:
    """Launch options of a PDL kernel: `kernel[grid](..., GDC=..., **pdl.kw(dev))`."""
    return {"GDC": True, "launch_pdl": True} if on(device) else {"GDC": False}
