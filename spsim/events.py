"""Recorded accept events: the JSONL schema both worlds share (the GPU runtime writes it, the
acceptance fitter reads it), its writer, and a validating columnar reader. No simpy, no torch.

One line per drafted token that reached a verification; an optional first line is a header
`{"spsim_accept_events": 1, "source": "...", "temperature": 0.0}`. Fields:

  request     int or string: the request. Ids may repeat across runs or experiments (see windows)
  out_pos     int >= 0: output position of this drafted token (tokens committed before it)
  draft_pos   int >= 0: drafts since the last verification before this one (its staleness)
  accepted    bool: whether verification accepted it. Tokens after the first rejected one of a run
              are censored (the fit ignores them); they may be written (padded, `accepted: false`)
              or left out (unpadded): the fit is the same
  entropy     float >= 0 or null: entropy (nats) of the draft distribution at this token
  method      a DraftMethod name (`static`, `verify-quest`, `step-layer`, `verify-attn`,
              `step-quest`; old names such as `verify_refresh` are read too) or its code
  budget      int > 0: sparse KV budget of the draft, tokens (sink and recent included)
  context     int >= 0: tokens in the KV cache before the run's verification
  drafted     optional int >= 1: the run's draft length (needed for the accepted-length report of
              unpadded events, where a rejected run's length is otherwise unknown)
  any other   scalar fields (a text, a dataset, a time) are kept for group hold-out
              (`spsim acceptance fit --holdout-by FIELD`)

A run is (request, out_pos - draft_pos): draft positions 0..n-1 once each. Runs of one request
must not overlap: a run starting at s that accepted a drafts commits s + a + 1 tokens, so the next
one starts at s + a + 1 or later.

Windows: a request's events form one window (one output stream the fit follows token by token)
until, in file order, a run starts (draft_pos 0) at or before the start of the request's previous
run: the id was reused (two runs or experiments concatenated), and a new window begins. Windows
are numbered in order of first appearance, so a file whose ids collide gives exactly the windows
(and the fit) of the same file with unique ids. Events of two uses of one id that interleave line
by line cannot be told apart: the reader rejects them (duplicate or overlapping runs), naming the
line. Replaying recorded events directly is exact only for the draft lengths they were recorded
with: a longer draft needs tokens never drafted, a shorter one changes staleness. Fit a model
(`spsim acceptance fit`) to use them at other draft lengths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spsim.errors import InputError
from spsim.jsonlines import json_lines
from spsim.plan import DraftMethod

FIELDS = ("request", "out_pos", "draft_pos", "accepted", "entropy", "method", "budget", "context")
OPTIONAL = ("drafted",)  # schema fields that may be absent; other extra fields are group labels


@dataclass
class Events:
    request: np.ndarray  # int64 window ids 0..n-1 in first-seen order (a reused request id: new window)
    out_pos: np.ndarray
    draft_pos: np.ndarray
    accepted: np.ndarray  # bool
    entropy: np.ndarray  # float64, NaN where absent
    method: np.ndarray  # int64 DraftMethod codes
    budget: np.ndarray
    context: np.ndarray
    names: list  # window labels, index = window id: the request id, `id#2` for its second window...
    meta: dict
    line: np.ndarray | None = None  # file line of each event (for messages)
    drafted: np.ndarray | None = None  # the run's draft length where recorded, else -1
    extra: dict = field(default_factory=dict)  # other fields: name -> object array (None: absent)

    def __len__(self) -> int:
        return len(self.out_pos)

    def take(self, mask: np.ndarray) -> "Events":
        cols = {f: getattr(self, f)[mask] for f in FIELDS}
        opt = {f: None if getattr(self, f) is None else getattr(self, f)[mask] for f in ("line", "drafted")}
        return Events(**cols, names=self.names, meta=self.meta, **opt,
                      extra={k: v[mask] for k, v in self.extra.items()})

    def _run_order(self):
        run_start = self.out_pos - self.draft_pos
        order = np.lexsort((self.draft_pos, run_start, self.request))
        req, rs = self.request[order], run_start[order]
        new_run = np.ones(len(order), bool)
        new_run[1:] = (req[1:] != req[:-1]) | (rs[1:] != rs[:-1])
        return order, new_run

    def informative(self) -> np.ndarray:
        """Tokens up to and including the first rejection of their run (later ones are censored)."""
        order, new_run = self._run_order()
        acc = self.accepted[order]
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
        """(drafted, accepted) per run: accepted = longest accepted prefix; drafted = the recorded
        `drafted` field where given, else the run's events (right only for padded events: see
        `padding`)."""
        run_start = self.out_pos - self.draft_pos
        key = self.request.astype(np.int64) * (1 << 32) + run_start
        uniq, inv = np.unique(key, return_inverse=True)
        drafted = np.bincount(inv, minlength=len(uniq))
        if self.drafted is not None and (self.drafted > 0).any():
            rec = np.full(len(uniq), -1, np.int64)
            rec[inv] = self.drafted
            drafted = np.where(rec > 0, rec, drafted)
        inf = self.informative()
        accepted = np.bincount(inv, weights=(inf & self.accepted), minlength=len(uniq)).astype(np.int64)
        return drafted, accepted

    def padding(self) -> str:
        """`padded` (tokens after a rejection are written, so a run's events give its length),
        `unpadded` (none written: a rejected run's length is unknown unless `drafted` is recorded),
        `recorded` (`drafted` given on every event) or `none rejected`."""
        if self.drafted is not None and (self.drafted > 0).all():
            return "recorded"
        if self.accepted.all():
            return "none rejected"
        return "padded" if (~self.informative()).any() else "unpadded"


def write_events(path, ev: dict[str, np.ndarray], meta: dict | None = None) -> None:
    """Write columns (FIELDS) as JSONL with a header."""
    with open(path, "w") as f:
        f.write(json.dumps({"spsim_accept_events": 1, **(meta or {})}) + "\n")
        names = [m.label for m in DraftMethod]
        for i in range(len(ev["out_pos"])):
            e = ev["entropy"][i]
            r = ev["request"][i]
            f.write(json.dumps({
                "request": r if isinstance(r, str) else int(r), "out_pos": int(ev["out_pos"][i]),
                "draft_pos": int(ev["draft_pos"][i]), "accepted": bool(ev["accepted"][i]),
                "entropy": None if not np.isfinite(e) else round(float(e), 6),
                "method": names[int(ev["method"][i])], "budget": int(ev["budget"][i]),
                "context": int(ev["context"][i])}) + "\n")


def _int_field(path, ln, d, f, low):
    v = d[f]
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise InputError(path, ln, f, f"expected an integer >= {low}, got {v!r}")
    return v


def read_events(path) -> Events:
    """Read and check an events file; windows as in the module doc (reused ids get new windows)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, None, "no such file")
    cols = {f: [] for f in FIELDS}
    lines, drafted, extra = [], [], {}
    windows: dict = {}  # (id, occurrence) -> window id, first-seen order
    cur: dict = {}  # id -> (occurrence, start of its latest run)
    labels: list = []
    meta: dict = {}
    n = 0
    for ln, d in json_lines(path, "the events file"):
        if ln == 1 and "spsim_accept_events" in d:
            meta = d
            continue
        for f in FIELDS:
            if f not in d and f != "entropy":
                raise InputError(path, ln, f, "missing")
        rid = d["request"]
        if not isinstance(rid, (int, str)) or isinstance(rid, bool):
            raise InputError(path, ln, "request", f"expected an integer or a string, got {rid!r}")
        vals = {f: _int_field(path, ln, d, f, 1 if f == "budget" else 0)
                for f in ("out_pos", "draft_pos", "budget", "context")}
        if vals["draft_pos"] > vals["out_pos"]:
            raise InputError(path, ln, "draft_pos", "greater than out_pos")
        if not isinstance(d["accepted"], bool):
            raise InputError(path, ln, "accepted", f"expected true or false, got {d['accepted']!r}")
        e = d.get("entropy")
        if e is not None and (not isinstance(e, (int, float)) or isinstance(e, bool) or e < 0):
            raise InputError(path, ln, "entropy", f"expected a number >= 0 or null, got {e!r}")
        m = d["method"]
        try:
            code = int(DraftMethod(m)) if isinstance(m, int) else int(DraftMethod.parse(str(m)))
        except ValueError as ex:
            raise InputError(path, ln, "method", str(ex)) from None
        k = -1
        if d.get("drafted") is not None:
            k = _int_field(path, ln, d, "drafted", vals["draft_pos"] + 1)
        # window: a run starting at or before the id's latest run start reuses the id
        start = vals["out_pos"] - vals["draft_pos"]
        occ, last = cur.get(rid, (0, None))
        if vals["draft_pos"] == 0 and last is not None and start <= last:
            occ += 1
        if vals["draft_pos"] == 0 or last is None:
            last = start if last is None or vals["draft_pos"] == 0 else last
        cur[rid] = (occ, last)
        w = windows.get((rid, occ))
        if w is None:
            w = windows[(rid, occ)] = len(windows)
            labels.append(rid if occ == 0 else f"{rid}#{occ + 1}")
        cols["request"].append(w)
        for f, v in vals.items():
            cols[f].append(v)
        cols["accepted"].append(d["accepted"])
        cols["entropy"].append(np.nan if e is None else float(e))
        cols["method"].append(code)
        drafted.append(k)
        lines.append(ln)
        for f, v in d.items():
            if f in FIELDS or f in OPTIONAL:
                continue
            if isinstance(v, (dict, list)):
                raise InputError(path, ln, f, "expected a scalar (a label for --holdout-by)")
            extra.setdefault(f, [None] * n).append(v)
        n += 1
        for f, v in extra.items():
            if len(v) < n:
                v.append(None)
    if not n:
        raise InputError(path, None, None, "no events")
    arr = {f: np.asarray(cols[f], dtype=bool if f == "accepted" else float if f == "entropy" else np.int64)
           for f in FIELDS}
    ev = Events(**arr, names=labels, meta=meta, line=np.asarray(lines, np.int64),
                drafted=np.asarray(drafted, np.int64),
                extra={f: np.asarray(v, dtype=object) for f, v in extra.items()})
    origin = [None] * len(windows)
    for (rid, occ), w in windows.items():
        origin[w] = (rid, occ)
    _check_runs(path, ev, origin)
    ids = len({k[0] for k in windows})
    ev.meta = {**meta, "events": n, "windows": len(windows), "request_ids": ids,
               "reused_ids": sum(1 for k in windows if k[1] > 0)}
    return ev


def _check_runs(path, ev: Events, origin: list) -> None:
    """Each run has draft positions 0..n-1 once each and one `drafted`; runs of a window do not
    overlap. One line naming the offending event otherwise."""
    def name(w) -> str:
        rid, occ = origin[w]
        return f"{rid!r}" + (f" (use {occ + 1} of this id in the file)" if occ else "")

    start = ev.out_pos - ev.draft_pos
    order = np.lexsort((ev.line, ev.draft_pos, start, ev.request))
    w, s, j, ln = ev.request[order], start[order], ev.draft_pos[order], ev.line[order]
    same_run = np.zeros(len(order), bool)
    same_run[1:] = (w[1:] == w[:-1]) & (s[1:] == s[:-1])
    dup = np.flatnonzero(same_run & (j == np.roll(j, 1)))
    if len(dup):
        i = dup[0]
        raise InputError(path, int(ln[i]), "request",
                         f"a second event for request {name(w[i])} at out_pos {s[i] + j[i]}, draft_pos {j[i]} "
                         f"(first at line {ln[i - 1]}): two runs with this request id interleave; give each run "
                         "or experiment its own request id")
    first = ~same_run
    run_id = np.cumsum(first) - 1
    # draft positions must be 0, 1, 2, ... within a run (sorted, no duplicates)
    starts = np.flatnonzero(first)
    expect = np.arange(len(order)) - starts[run_id]
    bad = np.flatnonzero(j != expect)
    if len(bad):
        i = bad[0]
        raise InputError(path, int(ln[i]), "draft_pos",
                         f"request {name(w[i])}: the run starting at out_pos {s[i]} has draft_pos {j[i]} but no "
                         f"draft_pos {expect[i]}: every drafted token of a run up to its first rejection must be written")
    k = ev.drafted[order]
    kd = np.flatnonzero(same_run & (k != np.roll(k, 1)))
    if len(kd):
        i = kd[0]
        raise InputError(path, int(ln[i]), "drafted", f"differs within the run starting at out_pos {s[i]} "
                                                      f"(line {ln[i - 1]} says {k[i - 1]})")
    # runs of a window must not overlap: the next starts at or after start + accepted + 1
    acc = ev.accepted[order]
    rej = np.flatnonzero(~acc)
    first_rej = np.full(len(starts), np.iinfo(np.int64).max)
    np.minimum.at(first_rej, run_id[rej], j[rej])
    n_in_run = np.diff(np.append(starts, len(order)))
    a = np.minimum(first_rej, n_in_run)  # accepted prefix
    rs, rw = s[starts], w[starts]
    nxt = np.flatnonzero((rw[1:] == rw[:-1]) & (rs[1:] < rs[:-1] + a[:-1] + 1)) + 1
    if len(nxt):
        r = nxt[0]
        raise InputError(path, int(ln[starts[r]]), "out_pos",
                         f"request {name(rw[r])}: a run starts at out_pos {rs[r]}, inside the run that started at "
                         f"{rs[r - 1]} (line {ln[starts[r - 1]]}) and committed up to {rs[r - 1] + a[r - 1] + 1}: "
                         "two uses of this request id overlap; give each run or experiment its own request id")
