"""Acceptance models: which drafted tokens the target model accepts. The simulator draws its
outcomes from one; the runtime, given a preset, draws the same keyed outcomes instead of the model's own.

`make_acceptance(spec, seed)` builds one from a spec (`fixed:p=0.8`, `position:p0=0.9,decay=0.02`,
a preset such as `sparsespec-llama8b:temperature=0.7`); `DEFAULT_ACCEPTANCE` is the simulator's
embedded default; `list_presets()` names the presets. See docs/acceptance.md.
"""

# Names resolve on first use (PEP 562): importing this package (e.g. for its CLI) does not
# import scipy.
_LAZY = {
    "AcceptanceModel": "base", "LatentAcceptance": "latent", "LatentParams": "latent",
    "DEFAULT_ACCEPTANCE": "presets", "list_presets": "presets", "load_preset": "presets",
    "make_acceptance": "presets", "FixedAcceptance": "simple", "PositionAcceptance": "simple",
}
__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(name)
