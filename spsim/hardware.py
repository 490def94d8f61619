"""GPU catalog: datasheet peaks plus the fraction of them real kernels reach.

Peaks are NVIDIA datasheet figures (dense, no sparsity). Memory is what the card exposes: the H200
figure was measured on this project's H200 (`torch.cuda.mem_get_info`, benchmarks/results/
h200_probe.json); the others are the totals nvidia-smi reports for those cards.

Efficiency factors come from measurements on this project's H200 (docs/anchors.md, "H200 reference measurements"):
copy bandwidth 4.27 TB/s of 4.8 (0.89) and about 790 TFLOP/s bf16 GEMM of 989 (0.80); our own probe
measured 4.24 TB/s and 794 TFLOP/s. We apply the same fractions to the other GPUs (an assumption:
they are the same generation of HBM controllers and tensor cores, except the A100).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import SpsimError

MiB = 1 << 20
H200_BW_EFF = 4.27 / 4.8  # measured copy bandwidth / datasheet
H200_FLOPS_EFF = 790 / 989  # measured bf16 GEMM / datasheet


@dataclass(frozen=True)
class GPU:
    name: str
    mem_bytes: int
    hbm_bw: float  # bytes/s, datasheet
    bf16_flops: float  # dense FLOP/s, datasheet
    fp8_flops: float | None  # dense FLOP/s; None: no fp8 tensor cores (fp8 weights run as W8A16)
    nvlink_bw: float  # bytes/s per direction per GPU (all-reduce bus bandwidth ceiling)
    sm_count: int
    bw_eff: float = H200_BW_EFF
    flops_eff: float = H200_FLOPS_EFF
    nvlink_eff: float = 0.8  # NCCL bus bandwidth reaches ~80% of the link (assumption)
    allreduce_latency_s: float = 8e-6  # small-message all-reduce on NVLink, CUDA graphs (assumption)

    @property
    def bw(self) -> float:
        """Achievable HBM bandwidth, bytes/s."""
        return self.hbm_bw * self.bw_eff

    def flops(self, dtype: str = "bf16") -> float:
        """Achievable dense tensor-core FLOP/s for GEMMs with weights in `dtype`."""
        peak = self.fp8_flops if (dtype == "fp8" and self.fp8_flops) else self.bf16_flops
        return peak * self.flops_eff

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPU":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


GPUS: dict[str, GPU] = {
    g.name: g
    for g in [
        GPU("h100-sxm", mem_bytes=81559 * MiB, hbm_bw=3.35e12, bf16_flops=989e12, fp8_flops=1979e12,
            nvlink_bw=450e9, sm_count=132),
        GPU("h100-nvl", mem_bytes=95830 * MiB, hbm_bw=3.9e12, bf16_flops=835e12, fp8_flops=1671e12,
            nvlink_bw=300e9, sm_count=132),  # NVLink bridge: 600 GB/s both directions
        # The all-reduce constants measured on 2 H200s (NCCL in CUDA graphs, 8 KiB .. 512 MiB, fitted;
        # benchmarks/results/allreduce_h200x2.json): 10.9 us and 63 % of the link, where the other
        # GPUs keep the assumed 8 us and 80 %.
        GPU("h200", mem_bytes=150_109_880_320, hbm_bw=4.8e12, bf16_flops=989e12, fp8_flops=1979e12,
            nvlink_bw=450e9, sm_count=132, nvlink_eff=0.63, allreduce_latency_s=10.9e-6),
        GPU("a100-80gb", mem_bytes=81920 * MiB, hbm_bw=2.039e12, bf16_flops=312e12, fp8_flops=None,
            nvlink_bw=300e9, sm_count=108),
    ]
}

_ALIASES = {
    "h100": "h100-sxm", "h100-sxm5": "h100-sxm", "h100-80gb": "h100-sxm", "h100sxm": "h100-sxm",
    "h100-pcie-nvl": "h100-nvl", "h100nvl": "h100-nvl",
    "h200-sxm": "h200", "h200-141gb": "h200", "h200sxm": "h200",
    "a100": "a100-80gb", "a100-sxm": "a100-80gb", "a100-sxm4-80gb": "a100-80gb", "a100-80g": "a100-80gb",
}


def get_gpu(name: str | GPU) -> GPU:
    """Look a GPU up by name or alias, case-insensitively."""
    if isinstance(name, GPU):
        return name
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = key.removeprefix("nvidia-")
    key = _ALIASES.get(key, key)
    if key not in GPUS:
        raise SpsimError(f"unknown GPU {name!r} (known: {', '.join(GPUS)})")
    return GPUS[key]
