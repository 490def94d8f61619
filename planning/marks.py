"""A plan's results tables (terminal, HTML, markdown) mark each objective's winner in its column
and give each configuration's rate per GPU against the reference policy's (the first of
--policies, same GPU, model and settings): the same marks the recommendation names."""

from __future__ import annotations

from .tables import _cell

# (objective of planning/recommend.py, results column where its winner is marked)
MARKED = {"rate_per_gpu": "rate_per_gpu", "per_dollar": "requests_per_usd", "fewest_gpus": "fewest_replicas"}


def winners(recs: list[dict]) -> dict[str, str]:
    """column -> the configuration that wins the objective shown in it."""
    return {MARKED[r["objective"]]: r["winner"] for r in recs if r["objective"] in MARKED and r["winner"]}


def marked(rows: list[dict], recs: list[dict], keys) -> list[dict]:
    """Per row, per key: (value text, ratio text or None, winner?)."""
    win = winners(recs)
    out = []
    for r in rows:
        line = {}
        for k in keys:
            v = r.get(k)
            text = _cell(v)
            if k == "max_rate" and v is not None and r.get("status") == "above":
                text += "+"  # the SLO held at every rate tried: the rate is a floor
            ratio = r.get("rate_per_gpu_vs_ref") if k == "rate_per_gpu" else None
            line[k] = (text, None if ratio is None else f"{ratio:.2f}x", win.get(k) == r["config"])
        out.append(line)
    return out
