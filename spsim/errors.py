"""User-facing errors: one line, naming where the problem is, and an exit code (never a traceback)."""

from __future__ import annotations


class SpsimError(Exception):
    """An error caused by the user's input. The CLI prints `str(e)` and exits with `exit_code`."""

    exit_code = 2


class InputError(SpsimError):
    """Bad input data: `FILE:LINE: field: problem`."""

    def __init__(self, path: str, line: int | None, field: str | None, problem: str):
        self.path, self.line, self.field, self.problem = str(path), line, field, problem
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")


class SpecError(SpsimError):
    """A malformed or unknown `name:key=value` spec or parameter."""
