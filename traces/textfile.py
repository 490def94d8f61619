"""Trace files as text: plain or gzip, with undecodable bytes kept on their own line.

Bytes that are not UTF-8 become lone surrogates (errors="surrogateescape") instead of stopping the
read wherever the decoder's buffer happened to be: a reader finds them per line, names that line
and, with --skip-invalid, skips just that row. Read errors (a corrupt or truncated gzip stream)
become one-line InputErrors.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from itertools import islice
from pathlib import Path

from spsim.errors import InputError

NOT_UTF8 = "not UTF-8 text"
_ESCAPED = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a byte that is not UTF-8


def has_bad_bytes(text: str) -> bool:
    return not text.isascii() and _ESCAPED.search(text) is not None  # isascii: a fast C pass


class TextFile:
    """A read-only text stream whose read errors are InputErrors naming the file."""

    def __init__(self, path: str, f: io.TextIOBase):
        self.path, self._f = path, f

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
            raise InputError(self.path, None, None, f"cannot read: {e}") from None

    def read(self, n: int = -1) -> str:
        return self._guard(self._f.read, n)

    def readline(self) -> str:
        return self._guard(self._f.readline)

    def take(self, n: int) -> list[str]:
        """Up to n next lines (one guarded call per chunk, not per line)."""
        return self._guard(lambda: list(islice(self._f, n)))

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def open_text(path: str | Path) -> TextFile:
    """Open a (possibly gzipped) text file, turning OS errors into one-line InputErrors."""
    p = str(path)
    kw = {"encoding": "utf-8-sig", "errors": "surrogateescape", "newline": None}
    try:
        if p.endswith(".gz"):
            return TextFile(p, io.TextIOWrapper(gzip.open(p, "rb"), **kw))
        return TextFile(p, open(p, **kw))
    except IsADirectoryError:
        raise InputError(p, None, None, "is a directory, not a trace file") from None
    except FileNotFoundError:
        raise InputError(p, None, None, "no such file") from None
    except OSError as e:
        raise InputError(p, None, None, f"cannot read: {e.strerror or e}") from None
