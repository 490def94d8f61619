"""The measurements file: JSON lines, written one at a time as the sweep measures them.

    {"spsim_calibration": 1, "session": {...}}           one per measuring run (machine, versions)
    {"id": KEY, "point": {...}, "ok": true, "seconds": s, "samples": [...], ...}   a measured pass
    {"id": KEY, "point": {...}, "ok": false, "error": "OutOfMemoryError: ..."}    a point that failed
    {"anchor": KEY, "point": {...}, "ok": true, "seconds": s, "t_s": ..., ...}  a drift control
                                                  (`design.anchor_points`; read by `read_anchors`)

Each line is flushed as soon as it is written, so a sweep killed at any moment loses at most the
point it was timing; a torn last line (no newline) is dropped on reading, with a warning. Any other
malformed line is an error naming the file, line and field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from spsim.errors import InputError
from spsim.jsonlines import json_lines

from .design import Point

FORMAT = 1


@dataclass
class Measurement:
    point: Point
    ok: bool
    seconds: float | None
    record: dict
    line: int


def read_measurements(path: str | Path) -> tuple[list[dict], list[Measurement]]:
    """(header records, measurements) of a measurements file (a header per measuring run, its
    `session` field); a missing file is empty."""
    path = Path(path)
    if not path.exists():
        return [], []
    sessions, out = [], []
    for i, rec in json_lines(path, "measurements", torn_ok=True):
        if "spsim_calibration" in rec:
            if rec["spsim_calibration"] != FORMAT:
                raise InputError(path, i, "spsim_calibration", f"format {rec['spsim_calibration']!r}; this spsim "
                                 f"reads {FORMAT}")
            sessions.append(rec.get("session") or {})
            continue
        if "anchor" in rec:  # drift controls, not design points: read_anchors
            continue
        out.append(_measurement(path, i, rec))
    return sessions, out


def read_anchors(path: str | Path) -> list[dict]:
    """The drift-control records of a measurements file, in the order measured (each with the index of
    its measuring run under `session`)."""
    path = Path(path)
    if not path.exists():
        return []
    out, session = [], -1
    for i, line in enumerate(path.read_text().split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # read_measurements reports malformed lines
        if isinstance(rec, dict) and "spsim_calibration" in rec:
            session += 1
        elif isinstance(rec, dict) and "anchor" in rec:
            m = _measurement(path, i, {**rec, "id": rec["anchor"]})
            out.append({**rec, "session": session, "line": i, "seconds": m.seconds})
    return out


def _measurement(path, i: int, rec: dict) -> Measurement:
    for f in ("id", "point", "ok"):
        if f not in rec:
            raise InputError(path, i, f, "missing")
    if not isinstance(rec["point"], dict):
        raise InputError(path, i, "point", "not an object")
    try:
        point = Point.from_dict(rec["point"])
    except KeyError as e:
        raise InputError(path, i, f"point.{e.args[0]}", "missing") from None
    except (TypeError, ValueError) as e:
        raise InputError(path, i, "point", str(e) or type(e).__name__) from None
    if rec["id"] != point.key:
        raise InputError(path, i, "id", f"{rec['id']!r} is not the point's key {point.key!r} (edited by hand?)")
    if not isinstance(rec["ok"], bool):
        raise InputError(path, i, "ok", f"must be true or false, got {rec['ok']!r}")
    seconds = None
    if rec["ok"]:
        s = rec.get("seconds")
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise InputError(path, i, "seconds", f"must be a positive number, got {s!r}")
        seconds = float(s)
    return Measurement(point, rec["ok"], seconds, rec, i)


class Writer:
    """Appends records, one flushed line each. Opening drops a torn last line first, so the
    next record starts on a line of its own."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):
                self.path.write_bytes(data[:data.rfind(b"\n") + 1])
        self.f = open(self.path, "a")

    def write(self, rec: dict) -> None:
        self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.f.flush()

    def session(self, info: dict) -> None:
        self.write({"spsim_calibration": FORMAT, "session": info})

    def close(self) -> None:
        self.f.close()
