"""Acceptance models: which drafted tokens the target model accepts (simulated world only)."""

from .base import AcceptanceModel  # noqa: F401
