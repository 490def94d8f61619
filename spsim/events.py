"""Recorded accept events: the JSONL schema both worlds share (the GPU runtime writes it, the
acceptance fitter reads it), its writer, and a validating columnar reader. No simpy, no torch.

One line per drafted token that reached a verification; an optional first line is a header
`{"spsim_accept_events": 1, "source": "...", "temperature": 0.0}`. Fields:

  request     int or string: the request (any id unique within the file)
  out_pos     int >= 0: output position of this drafted token (tokens committed before it)
  draft_pos   int >= 0: drafts since the last verification before this one (its staleness)
  accepted    bool: whether verification accepted it (false for every token after the first
              rejected one of its run: those are censored, the fit ignores them)
  entropy     float >= 0 or null: entropy (nats) of the draft distribution at this token
  method      a draft-KV method name (`static`, `verify-quest`, `step-layer`, `verify-attn`,
              `step-quest`; old names such as `verify_refresh` are read too) or its DraftMethod code
  budget      int > 0: sparse KV budget of the draft, tokens (sink and recent included)
  context     int >= 0: tokens in the KV cache before the run's verification

A run is identified by (request, out_pos - draft_pos). Replaying recorded events directly is exact
only for the draft lengths they were recorded with: a longer draft needs tokens never drafted, a
shorter one changes staleness. Fit a model (`spsim acceptance fit`) to use them at other draft
lengths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spsim.errors import InputError
from spsim.plan import DraftMethod

FIELDS = ("request", "out_pos", "draft_pos", "accepted", "entropy", "method", "budget", "context")


@dataclass
class Events:
    request: np.ndarray  # int64 (request ids mapped to 0..n-1 in first-seen order)
    out_pos: np.ndarray
    draft_pos: np.ndarray
    accepted: np.ndarray  # bool
    entropy: np.ndarray  # float64, NaN where absent
    method: np.ndarray  # int64 DraftMethod codes
    budget: np.ndarray
    context: np.ndarray
    names: list  # original request ids, index = mapped id
    meta: dict

    def __len__(self) -> int:
        return len(self.out_pos)

    def take(self, mask: np.ndarray) -> "Events":
        cols = {f: getattr(self, f)[mask] for f in FIELDS}
        return Events(**cols, names=self.names, meta=self.meta)

    def informative(self) -> np.ndarray:
        """Tokens up to and including the first rejection of their run (later ones are censored)."""
        run_start = self.out_pos - self.draft_pos
        order = np.lexsort((self.draft_pos, run_start, self.request))
        req, rs, acc = self.request[order], run_start[order], self.accepted[order]
        new_run = np.ones(len(order), bool)
        new_run[1:] = (req[1:] != req[:-1]) | (rs[1:] != rs[:-1])
        # rejections strictly before each token within its run
        rej = (~acc).astype(np.int64)
        c = np.cumsum(rej)
        run_id = np.cumsum(new_run) - 1
        starts = np.flatnonzero(new_run)
        before = c - rej - (c[starts] - rej[starts])[run_id]
        out = np.empty(len(order), bool)
        out[order] = before == 0
        return out

    def runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(drafted, accepted) per run: accepted = longest accepted prefix."""
        run_start = self.out_pos - self.draft_pos
        key = self.request.astype(np.int64) * (1 << 32) + run_start
        uniq, inv = np.unique(key, return_inverse=True)
        drafted = np.bincount(inv, minlength=len(uniq))
        inf = self.informative()
        accepted = np.bincount(inv, weights=(inf & self.accepted), minlength=len(uniq)).astype(np.int64)
        return drafted, accepted


def write_events(path, ev: dict[str, np.ndarray], meta: dict | None = None) -> None:
    """Write columns (FIELDS) as JSONL with a header."""
    with open(path, "w") as f:
        f.write(json.dumps({"spsim_accept_events": 1, **(meta or {})}) + "\n")
        names = [m.label for m in DraftMethod]
        for i in range(len(ev["out_pos"])):
            e = ev["entropy"][i]
            f.write(json.dumps({
                "request": int(ev["request"][i]), "out_pos": int(ev["out_pos"][i]),
                "draft_pos": int(ev["draft_pos"][i]), "accepted": bool(ev["accepted"][i]),
                "entropy": None if not np.isfinite(e) else round(float(e), 6),
                "method": names[int(ev["method"][i])], "budget": int(ev["budget"][i]),
                "context": int(ev["context"][i])}) + "\n")


def read_events(path) -> Events:
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, None, "no such file")
    cols = {f: [] for f in FIELDS}
    ids: dict = {}
    meta: dict = {}
    with open(path) as fh:
        for ln, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(path, ln, None, f"not JSON ({e.msg})") from None
            if not isinstance(d, dict):
                raise InputError(path, ln, None, "expected a JSON object")
            if ln == 1 and "spsim_accept_events" in d:
                meta = d
                continue
            for f in FIELDS:
                if f not in d and f != "entropy":
                    raise InputError(path, ln, f, "missing")
            cols["request"].append(ids.setdefault(d["request"], len(ids)))
            for f in ("out_pos", "draft_pos", "budget", "context"):
                v = d[f]
                if not isinstance(v, int) or isinstance(v, bool) or v < (1 if f == "budget" else 0):
                    raise InputError(path, ln, f, f"expected an integer >= {1 if f == 'budget' else 0}, got {v!r}")
                cols[f].append(v)
            if not isinstance(d["accepted"], bool):
                raise InputError(path, ln, "accepted", f"expected true or false, got {d['accepted']!r}")
            cols["accepted"].append(d["accepted"])
            e = d.get("entropy")
            if e is not None and (not isinstance(e, (int, float)) or isinstance(e, bool) or e < 0):
                raise InputError(path, ln, "entropy", f"expected a number >= 0 or null, got {e!r}")
            cols["entropy"].append(np.nan if e is None else float(e))
            m = d["method"]
            try:
                cols["method"].append(int(DraftMethod(m)) if isinstance(m, int) else int(DraftMethod.parse(str(m))))
            except ValueError as ex:
                raise InputError(path, ln, "method", str(ex)) from None
            if d["draft_pos"] > d["out_pos"]:
                raise InputError(path, ln, "draft_pos", "greater than out_pos")
    if not cols["out_pos"]:
        raise InputError(path, None, None, "no events")
    arr = {f: np.asarray(cols[f], dtype=bool if f == "accepted" else float if f == "entropy" else np.int64)
           for f in FIELDS}
    return Events(**arr, names=list(ids), meta=meta)
