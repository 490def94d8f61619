"""The Pareto front of throughput against latency over every run of a plan that met the SLO:
output tokens per second per GPU (higher is better) against median TPOT (lower is better), the
trade a serving team tunes with the request rate and the configuration."""

from __future__ import annotations


def pareto_front(points: list[dict], x: str = "output_tok_s_per_gpu", y: str = "median_tpot_ms") -> list[dict]:
    """Points no other point beats on both axes (ties on both: the first kept), by descending x."""
    pts = [p for p in points if p.get(x) is not None and p.get(y) is not None]
    pts.sort(key=lambda p: (-p[x], p[y]))
    front, best_y = [], float("inf")
    for p in pts:
        if p[y] < best_y:
            front.append(p)
            best_y = p[y]
    return front
