"""Triton kernel compilations in this process, counted: a kernel specialisation first met while
serving stalls that pass by its compile (0.1-0.6 s on an H100), so a run reports how many it met
(`runtime.kernel_compiles`) and start-up how many it took on itself.

Counted through Triton's `jit_cache_hook`, which Triton calls once per specialisation a process
first launches (an on-disk cache hit included: loading is cheaper than compiling, not free). The
interpreter (CPU tests) compiles nothing and counts nothing.
"""

from __future__ import annotations


class CompileCounter:
    """Per-kernel counts of first launches since `reset`, and the first `KEEP` specialisations
    (Triton's repr: the kernel, its warps and each argument's type, divisibility and constexpr
    value), so a run that compiled says what the start-up left out. Chains any hook already
    installed."""

    KEEP = 16

    def __init__(self):
        self.by_kernel: dict[str, int] = {}
        self.specialisations: list[str] = []
        self.installed = False
        self._prev = None

    def install(self) -> "CompileCounter":
        if self.installed:
            return self
        try:
            from triton import knobs
        except ImportError:  # no Triton (or one without knobs): nothing to count
            return self
        self._prev = knobs.runtime.jit_cache_hook
        knobs.runtime.jit_cache_hook = self._hook
        self.installed = True
        return self

    def _hook(self, *args, **kwargs):
        fn = kwargs.get("fn")
        name = getattr(fn, "name", None) or "kernel"
        self.by_kernel[name] = self.by_kernel.get(name, 0) + 1
        if len(self.specialisations) < self.KEEP and kwargs.get("repr"):
            self.specialisations.append(str(kwargs["repr"]))
        return self._prev(*args, **kwargs) if self._prev is not None else None

    def reset(self) -> None:
        self.by_kernel, self.specialisations = {}, []

    @property
    def count(self) -> int:
        return sum(self.by_kernel.values())

    def stats(self) -> dict:
        return {"count": self.count, "by_kernel": dict(sorted(self.by_kernel.items())),
                "specialisations": list(self.specialisations)}


COMPILES = CompileCounter()  # one per process: Triton's hook is process-wide
