"""Which draws a request gets under preset acceptance.

The simulator draws a request's acceptance outcomes from (seed, request index in the trace,
position). A client replaying a trace sends the row index as `X-Request-Id`, so the server keys the
same draws by it and both worlds see the same outcomes for the same trace. A request without an
integer id below `CLIENT_KEYS` gets a key of its own above that range (reused after `OWN_KEYS`
requests: the acceptance model keeps per-key arrays, indexed by key).
"""

from __future__ import annotations

import threading

import numpy as np

CLIENT_KEYS = 1 << 20
OWN_KEYS = 1 << 16


def client_key(header: str | None) -> int | None:
    """The acceptance key an `X-Request-Id` header gives, or None (not an integer in range)."""
    if header is None:
        return None
    try:
        k = int(header.strip())
    except ValueError:
        return None
    return k if 0 <= k < CLIENT_KEYS else None


class AcceptanceKeys:
    """Keys of the requests in flight, and the row id -> key map the acceptance model reads."""

    def __init__(self):
        self.live: set[int] = set()
        self.of_row = np.zeros(64, np.int64)
        self._own = 0
        self._lock = threading.Lock()  # clients claim on the server's thread, the engine binds on its own

    def claim(self, req) -> None:
        """Reserve `req.key` (from any thread, before the request is queued)."""
        if req.key is None:
            return
        with self._lock:
            if req.key in self.live:
                raise ValueError(f"X-Request-Id {req.key}: a request with this id is in flight")
            self.live.add(req.key)

    def bind(self, req) -> None:
        """`req` took table row `req.rid` (engine thread): map the row to its key."""
        if req.key is None:
            with self._lock:
                while CLIENT_KEYS + self._own in self.live:
                    self._own = (self._own + 1) % OWN_KEYS
                req.key = CLIENT_KEYS + self._own
                self._own = (self._own + 1) % OWN_KEYS
                self.live.add(req.key)
        if req.rid >= len(self.of_row):
            self.of_row = np.concatenate([self.of_row, np.zeros(max(req.rid + 1, len(self.of_row)), np.int64)])
        self.of_row[req.rid] = req.key

    def release(self, req) -> None:
        with self._lock:
            self.live.discard(req.key)


class KeyedAcceptance:
    """A preset acceptance model whose draws are keyed by the request's key, not its row id."""

    def __init__(self, model, keys: AcceptanceKeys):
        self.model, self.keys = model, keys

    def _k(self, rid):
        return self.keys.of_row[np.asarray(rid, np.int64)]

    def begin(self, rid: int, prompt_tokens: int, output_tokens: int) -> None:
        self.model.begin(int(self._k(rid)), prompt_tokens, output_tokens)

    def end(self, rid: int) -> None:
        self.model.end(int(self._k(rid)))

    def draft_entropy(self, rid, out_pos, draft_pos, context, budget, method):
        return self.model.draft_entropy(self._k(rid), out_pos, draft_pos, context, budget, method)

    def verify(self, rid, out_pos, drafted, context, budget, method):
        return self.model.verify(self._k(rid), out_pos, drafted, context, budget, method)

    def __getattr__(self, name):  # anything else (names, parameters) is the model's
        return getattr(self.model, name)
