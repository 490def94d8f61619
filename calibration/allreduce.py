"""The all-reduce tensor parallelism does twice per layer, measured and fitted.

The cost model's tensor-parallel term is `allreduce_latency_s + bytes * 2 (tp - 1) / tp /
(nvlink_bw * nvlink_eff)` per all-reduce (a ring: each byte crosses the links 2 (tp - 1) / tp
times). `measure` times `torch.distributed.all_reduce` of `[rows, hidden]` activations, one process
per GPU, as a runtime runs it: NCCL inside a CUDA graph (a replay of `graph_reps` all-reduces, so
launch overhead is not counted), over the rows the simulator prices (1 .. 8K tokens) and a few
large messages for the bus bandwidth. `fit` turns the points into the two GPU constants by least
squares on relative error. On the CPU (tests) the same code runs with gloo, eagerly.

    python3 benchmarks/allreduce_gpu.py --out allreduce.json       # a machine with >= 2 GPUs
"""

from __future__ import annotations

import os
import socket
import time

import numpy as np

ROWS = (1, 8, 32, 128, 512, 2048, 8192)
BIG_MIB = (64, 256, 512)  # large messages: the bus bandwidth


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, hidden: int, rows, big_mib, reps: int, graph_reps: int, out_q):
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    t_start = time.perf_counter()
    if cuda:
        torch.cuda.set_device(dev)
    dtype = torch.bfloat16 if cuda else torch.float32  # gloo has no bf16 all-reduce
    esize = torch.empty(0, dtype=dtype).element_size()
    sizes = [(r, r * hidden) for r in rows] + [(None, (m << 20) // esize) for m in big_mib]
    res = []
    for r, numel in sizes:
        x = torch.ones(numel, dtype=dtype, device=dev)
        if cuda:
            # warm-up on a side stream, then a graph of `graph_reps` all-reduces (NCCL can be captured)
            s = torch.cuda.Stream(dev)
            s.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(s):
                for _ in range(3):
                    dist.all_reduce(x)
            torch.cuda.current_stream(dev).wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(graph_reps):
                    dist.all_reduce(x)
            ts = []
            for _ in range(reps):
                dist.barrier()
                torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                g.replay()
                torch.cuda.synchronize(dev)
                ts.append((time.perf_counter() - t0) / graph_reps)
            del g  # a captured NCCL graph left alive can hang the communicator's teardown
            torch.cuda.synchronize(dev)
        else:
            for _ in range(2):
                dist.all_reduce(x)
            ts = []
            for _ in range(reps):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                ts.append(time.perf_counter() - t0)
        res.append({"rows": r, "bytes": int(numel * x.element_size()), "seconds": float(np.median(ts)),
                    "samples": len(ts)})
        if rank == 0:
            print(f"all-reduce {res[-1]['bytes']:>11,d} B: {res[-1]['seconds'] * 1e6:9.1f} us "
                  f"(at {time.perf_counter() - t_start:.1f} s)", flush=True)
    if rank == 0:
        out_q.put({"backend": "nccl" if cuda else "gloo", "graphs": cuda, "dtype": str(dtype).replace("torch.", ""),
                   "device": torch.cuda.get_device_name(dev) if cuda else "cpu", "points": res})
    dist.destroy_process_group()


def measure(world: int = 2, hidden: int = 4096, rows=ROWS, big_mib=BIG_MIB, reps: int = 20,
            graph_reps: int = 20) -> dict:
    """All-reduce times over `world` processes (GPUs when there are enough, else gloo on the CPU)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, hidden, tuple(rows), tuple(big_mib), reps, graph_reps, q))
             for r in range(world)]
    for p in procs:
        p.start()
    try:
        out = q.get(timeout=300)
    except Exception as e:  # queue.Empty: a worker died or hung before measuring
        for p in procs:
            p.kill()
        raise RuntimeError(f"all-reduce workers gave no result in 300 s (exit codes {[p.exitcode for p in procs]})") from e
    for p in procs:
        p.join(timeout=30)
    # The measurement is in hand: a worker still tearing NCCL down after 30 s is ended, not waited on.
    hung = [p for p in procs if p.exitcode is None]
    for p in hung:
        p.kill()
    bad = [p.exitcode for p in procs if p.exitcode not in (0, None) and p not in hung]
    if bad:
        raise RuntimeError(f"all-reduce workers exited with {bad}")
    out["workers_killed_after_result"] = len(hung)
    out.update(world=world, hidden=hidden)
    return out


def fit(points: list[dict], world: int, nvlink_bw: float) -> dict:
    """`allreduce_latency_s` and `nvlink_eff` (the ring's bus bandwidth over the link's) from
    measured points, least squares on relative error; with per-point errors."""
    b = np.asarray([p["bytes"] for p in points], np.float64) * 2 * (world - 1) / world
    t = np.asarray([p["seconds"] for p in points], np.float64)
    # t = a + b / bw  ->  relative residuals: 1 - (a + b c) / t, linear in (a, c = 1 / bw)
    A = np.stack([1 / t, b / t], axis=1)
    (lat, inv_bw), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    lat, inv_bw = max(float(lat), 0.0), max(float(inv_bw), 1e-15)
    pred = lat + b * inv_bw
    rel = pred / t - 1
    return {"allreduce_latency_s": lat, "bus_bandwidth_bytes_s": 1 / inv_bw,
            "nvlink_eff": (1 / inv_bw) / nvlink_bw, "max_abs_rel": float(np.abs(rel).max()),
            "median_abs_rel": float(np.median(np.abs(rel))),
            "per_point": [{"rows": p["rows"], "bytes": p["bytes"], "measured_s": p["seconds"],
                           "fitted_s": float(q)} for p, q in zip(points, pred)]}
