"""The GPU world: Triton attention kernels (full, verify, sparse draft, prefill), page selection,
and their plain-PyTorch references. Importable without torch: submodules import it themselves."""
