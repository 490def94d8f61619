"""What a read leaves to report besides the trace: rows skipped and rows flagged, by reason, and
the error for a trace with no requests left (one line, exit 2, counts included).

`notes(path, trace)` gives the stderr lines every command that reads a trace prints (`spsim trace
...` does; `replay` can call it after `read_trace(path, skip_invalid=...)` the same way).
"""

from __future__ import annotations

from collections.abc import Mapping

from spsim.errors import InputError


def _by_reason(counts: Mapping[str, int]) -> str:
    return "; ".join(f"{c} {r}" for r, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _rows(n: int) -> str:
    return f"{n} row{'s' * (n != 1)}"


class EmptyTrace(InputError):
    """The input holds no request: nothing but a header, or every row skipped (`skipped` says why)."""

    def __init__(self, path: str, skipped: Mapping[str, int] | None = None):
        self.skipped = {r: int(c) for r, c in (skipped or {}).items() if c}
        n = sum(self.skipped.values())
        rows = f"all {n} rows" if n > 1 else "its only row"
        why = f"no requests: {rows} skipped ({_by_reason(self.skipped)})" if n else "no requests (header only)"
        super().__init__(path, None, None, why)


def notes(path: str, trace) -> list[str]:
    """`PATH: skipped N rows: ...` and `PATH: warning: N rows: ...` (none when there is nothing to say)."""
    out = []
    if trace.skipped:
        out.append(f"{path}: skipped {_rows(sum(trace.skipped.values()))}: {_by_reason(trace.skipped)}")
    if trace.warnings:
        out.append(f"{path}: warning: {_rows(sum(trace.warnings.values()))}: {_by_reason(trace.warnings)}")
    return out
