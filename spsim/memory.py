"""KV memory accounting: how many KV pages a replica holds, which decides batch size.

Per GPU of a tensor-parallel group: memory x (1 - reserve_frac) - weights / tp, divided by the bytes
one page costs on that GPU (its share of the KV heads, every layer, K and V, plus the page's
selection metadata: per-page min and max keys, 2/page_size of the key memory). A page holds
`page_size` tokens of one request; the batcher counts pages, provisional (drafted) tokens included.
"""

from __future__ import annotations

from .config import ServingConfig as Defaults  # its class attributes: the defaults
from .errors import SpsimError
from .hardware import GPU, get_gpu
from .models import ModelConfig, dtype_bytes, get_model

# Activations, CUDA graphs, the allocator's slack, the CUDA context: vLLM's default
# gpu_memory_utilization=0.9 leaves the same 10%.
DEFAULT_RESERVE_FRAC = 0.10


def kv_heads_per_gpu(model: ModelConfig, tp: int) -> int:
    """KV heads each GPU holds; with tp > kv_heads they are replicated, one per GPU."""
    return -(-model.kv_heads // tp)


def check_tp(model: ModelConfig, tp: int) -> None:
    if not isinstance(tp, int) or tp < 1:
        raise SpsimError(f"tensor parallel size must be a positive integer, got {tp!r}")
    if model.q_heads % tp:
        raise SpsimError(f"{model.name}: tp={tp} does not divide its {model.q_heads} attention heads")


def page_bytes(model: ModelConfig | str, page_size: int = Defaults.page_size, kv_dtype: str = Defaults.kv_dtype,
               tp: int = Defaults.tp, selection_metadata: bool = True) -> int:
    """Bytes one KV page costs on each GPU of the tensor-parallel group."""
    model = get_model(model)
    check_tp(model, tp)
    if page_size < 1:
        raise SpsimError(f"page size must be positive, got {page_size}")
    key_bytes = page_size * model.layers * kv_heads_per_gpu(model, tp) * model.head_dim * dtype_bytes(kv_dtype)
    meta = 2 * key_bytes // page_size if selection_metadata else 0  # min and max key per page
    return 2 * key_bytes + meta


def weight_bytes_per_gpu(model: ModelConfig, weight_dtype: str, tp: int) -> int:
    return -(-model.weight_bytes(weight_dtype) // tp)


def kv_budget_bytes(model: ModelConfig | str, gpu: GPU | str, weight_dtype: str = Defaults.weight_dtype,
                    tp: int = Defaults.tp, reserve_frac: float = DEFAULT_RESERVE_FRAC) -> int:
    """Bytes per GPU left for KV pages; raises SpsimError if the weights do not fit."""
    model, gpu = get_model(model), get_gpu(gpu)
    check_tp(model, tp)
    if not 0 <= reserve_frac < 1:
        raise SpsimError(f"reserve fraction must be in [0, 1), got {reserve_frac}")
    usable = int(gpu.mem_bytes * (1 - reserve_frac))
    weights = weight_bytes_per_gpu(model, weight_dtype, tp)
    if weights >= usable:
        need = next((t for t in (2, 4, 8, 16, 32) if t > tp and model.q_heads % t == 0
                     and weight_bytes_per_gpu(model, weight_dtype, t) < usable), None)
        hint = f"; use tp>={need}" if need else ""
        raise SpsimError(
            f"{model.name} weights in {weight_dtype} need {weights / 1e9:.1f} GB per GPU at tp={tp}, "
            f"more than the {usable / 1e9:.1f} GB usable on {gpu.name} ({reserve_frac:.0%} reserved){hint}")
    return usable - weights


def kv_capacity_pages(model: ModelConfig | str, gpu: GPU | str, page_size: int = Defaults.page_size,
                      kv_dtype: str = Defaults.kv_dtype, weight_dtype: str = Defaults.weight_dtype,
                      tp: int = Defaults.tp, reserve_frac: float = DEFAULT_RESERVE_FRAC,
                      selection_metadata: bool = True) -> int:
    """KV pages (of `page_size` tokens) one replica of `tp` GPUs can hold."""
    free = kv_budget_bytes(model, gpu, weight_dtype, tp, reserve_frac)
    return free // page_bytes(model, page_size, kv_dtype, tp, selection_metadata)
