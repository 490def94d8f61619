"""Options of the commands that run the real model (`run`, `validate`, `serve`), each said once so
the three commands take and describe them alike."""

from __future__ import annotations

import typer

DEVICE = typer.Option("cuda", "--device", help="cuda or cpu (small models: tiny, smollm2-135m).")
DTYPE = typer.Option(None, "--dtype", help="bf16, fp16, fp32 or fp64 (default: bf16 on GPUs, the config's on the CPU).")
CUDA_GRAPHS = typer.Option(True, "--cuda-graphs/--no-cuda-graphs", help="Replay passes without prefill (decode, "
                           "verify, drafting) from CUDA graphs (GPU only).")
STARTUP_SHAPES = typer.Option(
    True, "--startup-shapes/--no-startup-shapes", help="Capture a CUDA graph of every pass shape the settings "
    "allow before the first request (the shape rule: docs/runtime.md), none while serving; a pass of another shape "
    "runs eager, counted by reason (GPU only). On an H100 (8B, max batch 256) 434-1,102 graphs took 20-64 s and "
    "7-13 GiB, set aside from the KV pool. --no-startup-shapes captures shapes as they recur instead.")
COARSE_SHAPES = typer.Option(
    False, "--coarse-shapes", help="Pad passes to powers of two (rows, tokens, page-table and selection widths): "
    "fewer CUDA-graph shapes under policies that mix drafting and verifying requests, more padding (on the H200, "
    "45 s of Azure under fixed-k: 111 passes not replayed against 464). The simulator prices the same padding; the "
    "shipped profiles were measured without it.")
OVERLAP = typer.Option(None, "--overlap/--no-overlap", help="Plan and prepare each pass while the previous one runs "
                       "(default: on GPUs with preset acceptance; real acceptance needs each verification's result "
                       "first).")
