"""`spsim serve` measured by a real client on the GPU: the client's TPOT and throughput against the
simulator's prediction for the same requests, and against `spsim run` on the same trace.

    python3 benchmarks/serve_gpu.py --out benchmarks/results [--policies ar,aspire] [--window 45] [--rates 1,4]

Per policy: `spsim serve --startup-shapes` starts in a subprocess (Llama-3.1-8B shape, random bf16
weights, preset acceptance sparsespec-llama8b, fixed KV pages, loopback), a few requests warm it up, then `spsim
bench serve` (in this process) replays the Azure conversation requests arriving in the first
--window seconds at the trace's own times and at each multiple of that rate in --rates; the server
stops; the simulator predicts each replay (`spsim validate --measured`); `spsim run` serves the
same trace at each rate in this process for the served-vs-run TPOT gap. Writes
`serve_gpu_<gpu>.json` after each policy. From a checkout without an install (simpy, starlette
and uvicorn from vendor/wheels/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from harness import gpu_slug, header

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # a checkout without an install


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--policies", default="ar,aspire")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--window", type=float, default=45.0, help="seconds of Azure conversation arrivals")
    ap.add_argument("--rates", default="1,4", help="multiples of the trace's own rate")
    ap.add_argument("--kv-pages", type=int, default=16384)
    ap.add_argument("--acceptance", default="sparsespec-llama8b")
    ap.add_argument("--profile", default=None, help="cost profile of this GPU (default: spsim's shipped one)")
    ap.add_argument("--no-run", action="store_true", help="skip the spsim run comparison")
    a = ap.parse_args()

    import httpx
    import numpy as np
    import torch

    from spsim.config import ServingConfig
    from spsim.server.bench import bench_serve
    from spsim.traces import read_trace
    from spsim.validate import ensure_simpy, select, validate_measured
    from spsim.vendored import ensure_vendored

    ensure_simpy()
    ensure_vendored("starlette", "serve_gpu")
    ensure_vendored("uvicorn", "serve_gpu")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor()
    gpu = gpu_slug(name) if dev == "cuda" else "cpu"
    tr = select(read_trace("azure-conv"), None, a.window)
    rates = [float(x) for x in a.rates.split(",")]
    span = float(tr.arrival_s[-1] - tr.arrival_s[0])
    native = (len(tr) - 1) / span
    rows = []
    wheels = os.pathsep.join(str(p) for p in sorted((ROOT / "vendor" / "wheels").glob("*.whl")))

    def write():
        res = {**header("serve_gpu"), "model": a.model, "weights": "random bf16", "acceptance": a.acceptance,
               "trace": f"azure-conv, first {a.window:g} s ({len(tr)} requests, {native:.2f} req/s)",
               "kv_pages": a.kv_pages, "profile": a.profile, "rows": rows}
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"serve_gpu_{gpu}.json").write_text(json.dumps(res, indent=1, default=float) + "\n")

    Path(a.out).mkdir(parents=True, exist_ok=True)
    for policy in filter(None, a.policies.split(",")):
        cfg = ServingConfig(model=a.model, policy=policy, acceptance=a.acceptance, kv_pages=a.kv_pages,
                            profile=a.profile).validate()
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), wheels,
                                                                          os.environ.get("PYTHONPATH")]))}
        t0 = time.perf_counter()
        # the server's log goes to a file: an unread pipe fills and stalls the server
        log = open(Path(a.out) / f"serve_{policy.replace(':', '_')}.log", "w+")
        srv = subprocess.Popen([sys.executable, "-m", "spsim.cli", "serve", "--model", a.model, "--device", dev,
                                "--policy", policy, "--acceptance", a.acceptance, "--kv-pages", str(a.kv_pages),
                                "--port", str(port), "--drain-s", "1", "--startup-shapes"]
                               + (["--profile", a.profile] if a.profile else []), env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        row = {"policy": policy, "replays": []}
        try:
            while True:
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if srv.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"spsim serve exited: {log.read()[-2000:]}")
                time.sleep(0.5)
            row["server_start_s"] = round(time.perf_counter() - t0, 2)
            vocab = httpx.get(url + "/v1/models").json()["data"][0]["vocab_size"]
            warm = select(tr, 8, None)
            bench_serve(warm, url, a.model, np.zeros(len(warm)), None, vocab, cfg.seed, (10.0, 0.1))
            for m in rates:
                arr = (tr.arrival_s - tr.arrival_s[0]) / m
                s, _ = bench_serve(tr, url, a.model, arr, None, vocab, cfg.seed, (cfg.slo_ttft_s, cfg.slo_tpot_s))
                row["replays"].append({"rate_x": m, "measured": s})
                print(f"{policy} x{m:g}: {s['completed']} done, {s['errors']} errors, TPOT mean "
                      f"{s['mean_tpot_ms']:.2f} ms, {s['output_throughput']:.1f} tok/s", flush=True)
        finally:
            srv.terminate()
            try:
                srv.wait(60)
            except subprocess.TimeoutExpired:
                srv.kill()
            log.seek(0)
            row["server_last_line"] = log.read().strip().splitlines()[-1:]
            log.close()
        for rep in row["replays"]:
            q = None if rep["rate_x"] == 1 else native * rep["rate_x"]
            v = validate_measured(tr, cfg.with_(qps=q), rep["measured"], padded=dev == "cuda", shape_rule=True)
            rep["predicted"] = {k: {kk: m[kk] for kk in ("measured", "predicted", "rel_error", "within")}
                                for k, m in v["metrics"].items() if m["target"] is not None}
            rep["targets_met"] = v["targets_met"]
        if not a.no_run:
            from spsim.gpu_runtime.engine import RuntimeOptions, load, release_served, run_trace

            opts = RuntimeOptions(device=dev, record_events=False, shape_rule=True, startup_shapes=True)
            model, tok = load(cfg, opts)  # one model for every rate: one start-up capture, as the server's
            keys = ("mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "output_throughput", "completed")
            row["spsim_run"], row["served_minus_run_tpot_ms"] = [], {}
            for rep in row["replays"]:  # the same trace and rate in this process, no HTTP
                q = None if rep["rate_x"] == 1 else native * rep["rate_x"]
                r = run_trace(tr, cfg.with_(qps=q), opts, model=model, tokenizer=tok).result.summary
                row["spsim_run"].append({"rate_x": rep["rate_x"], **{k: r.get(k) for k in keys}})
                served = rep["measured"]["mean_tpot_ms"]
                if served is not None and r["mean_tpot_ms"] is not None:
                    row["served_minus_run_tpot_ms"][f"{rep['rate_x']:g}x"] = served - r["mean_tpot_ms"]
            del model, tok
            release_served()
        rows.append(row)
        write()
        print(json.dumps({k: v for k, v in row.items() if k != "replays"}, default=float), flush=True)


if __name__ == "__main__":
    main()
