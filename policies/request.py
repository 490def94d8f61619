"""Request state, columnar: one numpy array per field, indexed by the request's integer id
(its row in the trace) for its whole life: waiting, prefill, decode, done or rejected."""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Phase(IntEnum):
    PENDING = 0  # not arrived yet
    WAITING = 1
    PREFILL = 2
    DECODE = 3
    DONE = 4
    REJECTED = 5


REJECT_REASONS = ("", "context_window", "kv_capacity")


class RequestTable:
    def __init__(self, prompt_tokens: np.ndarray, output_tokens: np.ndarray, arrival_s: np.ndarray):
        n = len(prompt_tokens)
        z = lambda dt=np.int64: np.zeros(n, dt)  # noqa: E731
        nan = lambda: np.full(n, np.nan)  # noqa: E731
        self.n = n
        self.prompt = np.asarray(prompt_tokens, np.int64)
        self.output = np.asarray(output_tokens, np.int64)
        self.arrival = np.asarray(arrival_s, np.float64)
        self.phase = z(np.int8)
        self.replica = np.full(n, -1, np.int64)
        self.prefill_target = z()  # prompt (+ tokens to recompute after a preemption)
        self.prefilled = z()  # prefill tokens computed so far (including prefix-cache hits)
        self.ctx = z()  # tokens in the KV cache (committed)
        self.committed = z()  # output tokens emitted
        self.drafted = z()  # provisional drafts since the last verification
        self.target = np.full(n, -1, np.int64)  # policy's planned draft count; -1: ask
        self.recheck = z()  # a zero target expires when committed reaches this (Policy.plain_hold)
        self.pages = z()  # private KV pages held
        self.shared_tokens = z()  # prompt tokens held through the prefix cache
        self.cached_blocks = z()  # prefix blocks referenced in the cache
        self.hit_tokens = z()  # prefill tokens saved by prefix-cache hits (first admission)
        self.last_entropy = nan()
        self.sum_entropy = z(np.float64)
        # statistics
        self.drafts = z()
        self.verifies = z()
        self.spec_verifies = z()  # verifications with at least one draft
        self.accepted = z()
        self.preemptions = z()
        self.recomputes = z()  # prefills completed again after a preemption (each emits a token)
        self.reject = z(np.int8)
        self.t_admit = nan()
        self.t_first = nan()
        self.t_finish = nan()
        self.t_last_emit = nan()

    def remaining(self, rid) -> np.ndarray:
        return self.output[rid] - self.committed[rid]

    def grow(self, n: int) -> None:
        """Room for `n` requests (a live server's table grows as requests arrive); the new rows
        are a fresh table's. Every field is replaced: hold the table, not its arrays."""
        if n <= self.n:
            return
        fresh = RequestTable(np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n))
        for name, old in list(vars(self).items()):
            if isinstance(old, np.ndarray) and old.shape == (self.n,):
                new = getattr(fresh, name)
                new[:self.n] = old
                setattr(self, name, new)
        self.n = n
