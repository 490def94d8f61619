"""Programmatic dependent launch (PDL, Hopper): a kernel launched with it is scheduled while the
previous kernel in the stream drains, instead of after it.

Its programs wait (`griddepcontrol.wait`) before their first memory access, so the previous
kernel's writes are visible and no buffer it still reads is overwritten; what overlaps is the
launch itself and the programs' start. Each such kernel also lets its own successor launch
(`griddepcontrol.launch_dependents`) once all its programs have started, which for a kernel of
many waves is its last wave. In a batch-1 decode of an 8B model, a layer is a dozen kernels of a
few microseconds each, so the gaps between them are a visible share of the pass.

`SPSIM_PDL=0` turns it off (A/B timing); it is off under the Triton interpreter.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from .interpret import INTERPRET

ENABLED = not INTERPRET and os.environ.get("SPSIM_PDL", "1") != "0"


def kw() -> dict:
    """Launch arguments for a kernel that takes the `PDL` constexpr."""
    return {"launch_pdl": True, "PDL": True} if ENABLED else {}


@triton.jit
def enter(PDL: tl.constexpr):
    """First statement of a PDL kernel: wait for the previous kernel, then release the next."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
