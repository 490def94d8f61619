"""Routers: which replica an arriving request goes to."""

from __future__ import annotations


class RoundRobin:
    name = "round-robin"

    def __init__(self):
        self.i = -1

    def pick(self, replicas) -> int:
        self.i = (self.i + 1) % len(replicas)
        return self.i


class LeastOutstanding:
    """Fewest requests waiting or running (or held by an overlapped runtime's lag, not yet in the
    queue); ties to the lowest index (deterministic)."""

    name = "least-outstanding"

    def pick(self, replicas) -> int:
        best, best_n = 0, None
        for i, r in enumerate(replicas):
            n = r.outstanding
            if best_n is None or n < best_n:
                best, best_n = i, n
        return best


ROUTERS = {"round-robin": RoundRobin, "rr": RoundRobin, "least-outstanding": LeastOutstanding, "lor": LeastOutstanding}
