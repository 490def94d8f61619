"""Request traces: the canonical format, readers for public formats, generators and transforms."""

from .trace import SCHEMA_VERSION, Trace  # noqa: F401
