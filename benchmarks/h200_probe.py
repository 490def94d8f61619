"""One-off H200 probe for the roofline constants: device memory, copy bandwidth, bf16 GEMM rate, and the
time of an 8B-shaped stack of linear layers (weights read once per pass) at 1..512 tokens.
Run on the device machine: `python3 benchmarks/h200_probe.py > $OUT/h200_probe.json`."""
import json

import torch

dev = torch.device("cuda")
props = torch.cuda.get_device_properties(0)
free, total = torch.cuda.mem_get_info()
out = {"device": props.name, "total_memory_bytes": total, "free_bytes": free, "sm_count": props.multi_processor_count,
       "torch": torch.__version__}


def bench(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters / 1e3


a = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
b = torch.empty_like(a)
t = bench(lambda: b.copy_(a))
out["copy_bw_Bps"] = 2 * a.numel() / t  # read + write
del a, b
x = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
t = bench(lambda: x @ x)
out["gemm_8192_bf16_flops"] = 2 * 8192 ** 3 / t
del x
# 8B shape (Llama-3.1-8B): 32 layers of qkv, o, gate+up, down, then the LM head; weights in bf16.
H, I, V, L = 4096, 14336, 128256, 32
layers = [(torch.randn(6144, H, dtype=torch.bfloat16, device=dev) * 0.01, torch.randn(H, H, dtype=torch.bfloat16, device=dev) * 0.01,
           torch.randn(2 * I, H, dtype=torch.bfloat16, device=dev) * 0.01, torch.randn(H, I, dtype=torch.bfloat16, device=dev) * 0.01)
          for _ in range(L)]
head = torch.randn(V, H, dtype=torch.bfloat16, device=dev) * 0.01


def fwd(h):
    for wqkv, wo, wgu, wd in layers:
        q = h @ wqkv.T
        h = h + q[:, :H] @ wo.T
        g = h @ wgu.T
        h = h + (torch.nn.functional.silu(g[:, :I]) * g[:, I:]) @ wd.T
    return h[-1:] @ head.T


out["linear_stack_s"] = {}
for n in (1, 16, 64, 96, 128, 192, 256, 384, 512, 1024):
    h = torch.randn(n, H, dtype=torch.bfloat16, device=dev)
    out["linear_stack_s"][n] = bench(lambda: fwd(h), iters=10)
print(json.dumps(out, indent=1))
