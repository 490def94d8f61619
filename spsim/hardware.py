"""GPU catalog: datasheet peaks plus the fraction of them real kernels reach.

Peaks are NVIDIA datasheet figures (dense, no sparsity). Memory is what the card exposes: the H200
figure was measured on this project's H200 (`torch.cuda.mem_get_info`, benchmarks/results/
h200_probe.json); the others are the totals nvidia-smi reports for those cards.

Efficiency factors come from measurements on this project's H200 (docs/anchors.md, "H200 reference measurements"):
copy bandwidth 4.27 TB/s of 4.8 (0.89) and about 790 TFLOP/s bf16 GEMM of 989 (0.80); our own probe
measured 4.24 TB/s and 794 TFLOP/s. We apply the same fractions to the other GPUs (an assumption:
they are the same generation of HBM controllers and tensor cores, except the A100).

Tensor-parallel all-reduce (`GPU.allreduce_latency`): the latency of one small-message all-reduce
over `tp` GPUs is `allreduce_latency_s + 2 (tp - allreduce_ranks) * allreduce_step_s`: the latency
measured on `allreduce_ranks` = 2 GPUs plus one fixed cost per extra step of NCCL's ring (2 (tp - 1)
steps per all-reduce; NCCL's own tuner prices small all-reduces the same way, `baseLat + 2 (nRanks
- 1) * hwLat`, src/graph/tuning.cc). `ALLREDUCE_STEP_S` is fitted by benchmarks/allreduce_tp_fit.py to our 2-GPU
measurement (H200, NCCL in CUDA graphs, 10.9 us; benchmarks/results/allreduce_h200x2.json) and
three published 8 x H100 NCCL bf16 tables (128 B .. 512 KiB: 19.2-25.2 us, intercept 22.3 us; the
sources are listed in benchmarks/results/allreduce_tp_fit.json): 0.95 us per step, so 22.3 us at
TP 8 on H100/H200. The A100 has its own three constants from published 8 x A100 (NVLink 3, NVSwitch)
NCCL figures (`A100_ALLREDUCE`, fitted by benchmarks/allreduce_a100_fit.py, sources in
benchmarks/results/allreduce_a100_fit.json): 10.2 us at 2 GPUs, 16.95 us at 8, so 0.563 us per ring
step, and 77 % of NVLink (NCCL bus bandwidth at 1 GiB); it was 8 us assumed, the H100's step and 80 %.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import SpsimError

MiB = 1 << 20
H200_BW_EFF = 4.27 / 4.8  # measured copy bandwidth / datasheet
H200_FLOPS_EFF = 790 / 989  # measured bf16 GEMM / datasheet
# Seconds per extra ring step of a small all-reduce beyond 2 GPUs (module docstring; fitted by
# benchmarks/allreduce_tp_fit.py, results in benchmarks/results/allreduce_tp_fit.json).
ALLREDUCE_STEP_S = 0.953e-6
# All-reduce constants measured on 2 H200s (NCCL in CUDA graphs, 8 KiB .. 512 MiB, fitted;
# benchmarks/results/allreduce_h200x2.json). The H100 SXM shares them: the same NVLink 4 (18 links,
# 450 GB/s per direction) and HGX NVSwitch baseboard, and the 8-GPU figures the step is fitted to
# are H100's.
HOPPER_SXM_ALLREDUCE = dict(nvlink_eff=0.63, allreduce_latency_s=10.9e-6)
# A100 SXM (NVLink 3, NVSwitch): fitted by benchmarks/allreduce_a100_fit.py to published NCCL figures
# (2 GPUs: NVIDIA/nccl issue 583; 8 GPUs and bus bandwidth: microsoft/mscclpp docs/performance-ndmv4.md);
# results in benchmarks/results/allreduce_a100_fit.json, checked by tests/test_allreduce_tp.py.
A100_ALLREDUCE = dict(nvlink_eff=0.7715, allreduce_latency_s=10.2e-6, allreduce_step_s=0.5627e-6)


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
    allreduce_latency_s: float = 8e-6  # small-message all-reduce over `allreduce_ranks` GPUs on NVLink, CUDA graphs (assumption)
    allreduce_ranks: int = 2  # the number of GPUs `allreduce_latency_s` holds for (measured or assumed)
    allreduce_step_s: float = ALLREDUCE_STEP_S  # per ring step beyond `allreduce_ranks` GPUs (fitted; module docstring)

    @property
    def bw(self) -> float:
        """Achievable HBM bandwidth, bytes/s."""
        return self.hbm_bw * self.bw_eff

    def flops(self, dtype: str = "bf16") -> float:
        """Achievable dense tensor-core FLOP/s for GEMMs with weights in `dtype`."""
        peak = self.fp8_flops if (dtype == "fp8" and self.fp8_flops) else self.bf16_flops
        return peak * self.flops_eff

    def allreduce_latency(self, tp: int) -> float:
        """Seconds of the latency term of one all-reduce over `tp` GPUs: none at tp <= 1,
        `allreduce_latency_s` at tp = `allreduce_ranks` (2 in the catalog), and `allreduce_step_s`
        per ring step more or fewer (a ring all-reduce takes 2 (tp - 1) steps)."""
        if tp <= 1:
            return 0.0
        return self.allreduce_latency_s + 2 * (tp - self.allreduce_ranks) * self.allreduce_step_s

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPU":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


GPUS: dict[str, GPU] = {
    g.name: g
    for g in [
        GPU("h100-sxm", mem_bytes=81559 * MiB, hbm_bw=3.35e12, bf16_flops=989e12, fp8_flops=1979e12,
            nvlink_bw=450e9, sm_count=132, **HOPPER_SXM_ALLREDUCE),
        GPU("h100-nvl", mem_bytes=95830 * MiB, hbm_bw=3.9e12, bf16_flops=835e12, fp8_flops=1671e12,
            nvlink_bw=300e9, sm_count=132),  # NVLink bridge: 600 GB/s both directions
        # 2-GPU all-reduce constants measured here (HOPPER_SXM_ALLREDUCE): 10.9 us and 63 % of the
        # link, shared with the H100 SXM; the H100 NVL keeps the assumed 8 us and 80 %; the A100 has its
        # own published figures (A100_ALLREDUCE).
        GPU("h200", mem_bytes=150_109_880_320, hbm_bw=4.8e12, bf16_flops=989e12, fp8_flops=1979e12,
            nvlink_bw=450e9, sm_count=132, **HOPPER_SXM_ALLREDUCE),
        GPU("a100-80gb", mem_bytes=81920 * MiB, hbm_bw=2.039e12, bf16_flops=312e12, fp8_flops=None,
            nvlink_bw=300e9, sm_count=108, **A100_ALLREDUCE),
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
