"""Pick the Triton kernels where they are built for (Hopper, or the CPU interpreter), else the
plain-PyTorch reference with a warning: the kernels are tuned and tested on an H200 only."""

from __future__ import annotations

import os
import warnings

_warned: set[str] = set()


def _warn_once(why: str) -> None:
    if why not in _warned:
        _warned.add(why)
        warnings.warn(f"spsim.gpu_runtime: {why}; using the PyTorch reference path (slow, and the "
                      "runtime is untested there)", RuntimeWarning, stacklevel=3)


_REFERENCE_ONLY = [False]


class reference_only:
    """Within this block the PyTorch reference paths run even where Triton would (the runtime on
    the CPU: the Triton interpreter is for testing the kernels, far too slow to serve with)."""

    def __enter__(self):
        self._was = _REFERENCE_ONLY[0]
        _REFERENCE_ONLY[0] = True

    def __exit__(self, *exc):
        _REFERENCE_ONLY[0] = self._was


def use_triton(device) -> bool:
    import torch

    if _REFERENCE_ONLY[0]:
        return False
    dev = torch.device(device)
    try:
        import triton  # noqa: F401
    except ImportError:
        _warn_once("triton is not installed")
        return False
    if dev.type == "cuda":
        major, _ = torch.cuda.get_device_capability(dev)
        if major != 9:
            _warn_once(f"the Triton kernels target Hopper (sm_90), this GPU is sm_{major}x")
            return False
        return True
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        return True
    _warn_once(f"no Triton kernels on device {dev.type!r}")
    return False


def attention(q, k_cache, v_cache, q_len, lists, out=None, page_scores=None, plan=None, sm_scale=None):
    """Mixed-pass attention (see `attention.mixed_attention`) on whichever path this device has."""
    if use_triton(q.device):
        from . import attention as a

        plan = plan or a.plan_attention(q_len, lists, q.shape[1])
        return a.mixed_attention(q, k_cache, v_cache, plan, out=out, sm_scale=sm_scale, page_scores=page_scores)
    from .reference import mixed_attention_ref

    res = mixed_attention_ref(q, k_cache, v_cache, q_len, lists, sm_scale=sm_scale, page_scores=page_scores)
    if out is not None:
        out.copy_(res)
        return out
    return res


def quest_scores(q, meta, page_table, num_pages, sink: int, recent: int):
    """Quest page bounds (see `quest.quest_scores`) on whichever path this device has."""
    if use_triton(q.device):
        from .quest import quest_scores as qs

        return qs(q, meta, page_table, num_pages, sink, recent)
    from .reference import quest_scores_ref

    return quest_scores_ref(q, meta.kmin, meta.kmax, page_table, num_pages.cpu().numpy(), sink, recent)
