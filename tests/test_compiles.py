"""Triton compiles counted per run (gpu_runtime/compiles.py): the hook counts by kernel, chains a
hook installed before it, and resets between runs."""

from types import SimpleNamespace


def test_compile_counter_counts_by_kernel_and_chains():
    from triton import knobs  # the test extra installs Triton (its interpreter runs the kernel tests)

    from spsim.gpu_runtime.compiles import CompileCounter

    seen = []
    before = knobs.runtime.jit_cache_hook
    knobs.runtime.jit_cache_hook = lambda **kw: seen.append(kw["fn"].name)
    try:
        c = CompileCounter().install()
        assert c.installed and c.install() is c  # installing twice keeps one hook
        hook = knobs.runtime.jit_cache_hook
        for name in ("attn", "attn", "topk"):
            assert hook(fn=SimpleNamespace(name=name), key=None, repr=f"{name}[num_warps=4](n: i32)") is None
        # (None: Triton goes on compiling) the specialisations say which variant each was
        assert c.stats() == {"count": 3, "by_kernel": {"attn": 2, "topk": 1},
                             "specialisations": ["attn[num_warps=4](n: i32)"] * 2 + ["topk[num_warps=4](n: i32)"]}
        assert seen == ["attn", "attn", "topk"]  # the earlier hook still sees every compile
        for _ in range(2 * c.KEEP):
            hook(fn=SimpleNamespace(name="x"), key=None, repr="x[]()")
        assert len(c.stats()["specialisations"]) == c.KEEP  # the first few: a run's JSON stays small
        c.reset()
        assert c.count == 0 and c.stats()["specialisations"] == []
    finally:
        knobs.runtime.jit_cache_hook = before
