"""TRITON_INTERPRET=1 (CPU tests) support shared by the kernel modules.

Read once, when a kernel module is imported: triton decides per `@triton.jit` at decoration time
whether a function is compiled or interpreted, so the variable must be set before these modules load.
"""

from __future__ import annotations

import os

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _numpy2_index_fix() -> None:
    """Triton 3.6's interpreter turns a loaded scalar (a 1-element array) into a loop bound with
    `int(array)`, which numpy >= 2.4 refuses; take the element instead. Interpreter only."""
    from triton.runtime import interpreter as it

    if getattr(it._patch_lang_tensor, "_spsim_fixed", False):
        return
    orig = it._patch_lang_tensor

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._spsim_fixed = True
    it._patch_lang_tensor = patched


if INTERPRET:
    _numpy2_index_fix()


def can_interpret() -> bool:
    """Whether this process can still run the kernels interpreted: triton's own `@jit` helpers
    (tl.max, tl.sum, ...) are fixed compiled or interpreted when triton is imported, so triton must
    not have been imported before TRITON_INTERPRET=1 was set."""
    import sys

    if "triton" not in sys.modules:
        return True
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.standard.max, InterpretedFunction)


def rerun_in_subprocess(test_file: str) -> int:
    """Run a test file in a fresh interpreter with TRITON_INTERPRET=1 (for when `can_interpret`
    is false in this process); returns pytest's exit code."""
    import subprocess
    import sys

    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file], env=env).returncode


def load_interpreted():
    """For CPU tests: the kernel modules with their kernels interpreted, whatever was imported
    before (triton itself may already be loaded; only our modules' decoration time matters).
    Returns `(attention, quest)` (`kv_write` is loaded alike)."""
    import importlib
    import sys

    os.environ["TRITON_INTERPRET"] = "1"
    from triton.runtime.interpreter import InterpretedFunction

    mods = [importlib.import_module(f"spsim.gpu_runtime.{m}") for m in ("interpret", "attention", "quest", "kv_write")]
    if not (mods[0].INTERPRET and isinstance(mods[1]._attn_fwd, InterpretedFunction)
            and isinstance(mods[2]._quest_score, InterpretedFunction)
            and isinstance(mods[3]._kv_write, InterpretedFunction)):
        mods = [importlib.reload(m) for m in mods]
    assert isinstance(mods[1]._attn_fwd, InterpretedFunction), sys.modules.get("triton")
    return mods[1], mods[2]
