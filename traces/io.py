"""`read_trace` (format by name, extension and content), `write_trace` (canonical JSONL), `shipped`."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import numpy as np

from spsim.errors import InputError

from .csvfile import read_header
from .csvformats import read_azure, read_burstgpt, read_vidur, sniff_csv
from .jsonformats import read_canonical, read_mooncake
from .jsonl import first_object
from .textfile import open_text
from .trace import SCHEMA_VERSION, Trace

SHIPPED = {"mooncake": "mooncake_conversation.jsonl", "azure-conv": "azure_llm_2023_conv.csv"}

READERS = {
    "canonical": read_canonical,
    "mooncake": read_mooncake,
    "azure": read_azure,
    "azure-2023": read_azure,
    "azure-2024": read_azure,
    "burstgpt": read_burstgpt,
    "vidur": read_vidur,
}
FORMATS = tuple(READERS)


def shipped(name: str) -> Path:
    """Path of a trace installed with spsim: "mooncake" (conversation) or "azure-conv" (2023)."""
    if name not in SHIPPED:
        raise InputError(name, None, None, f"no shipped trace of that name (shipped: {', '.join(SHIPPED)})")
    return Path(str(resources.files("spsim.traces") / "data" / SHIPPED[name]))


def resolve(path: str | Path) -> str:
    """A shipped trace's name -> its path; anything else is a path."""
    p = str(path)
    if p in SHIPPED and not Path(p).exists():
        return str(shipped(p))
    return p


def detect_format(path: str) -> str:
    """Pick a reader from the extension, then the content (first JSON object or CSV header)."""
    p = path.lower().removesuffix(".gz")
    looks_json = p.endswith((".jsonl", ".json", ".ndjson"))
    if not looks_json and not p.endswith(".csv"):
        # unknown extension: JSON if the first non-blank character is '{'
        with open_text(path) as f:
            head = f.read(4096).lstrip()
        if not head:
            raise InputError(path, None, None, "empty file")
        looks_json = head.startswith("{")
    if looks_json:
        obj = first_object(path)
        if obj is None:
            _csv_named_json(path)
            # let the canonical reader name the line and the problem (empty file, bad JSON)
            return "canonical"
        if "spsim_trace" in obj or "arrival_s" in obj or "prompt_tokens" in obj:
            return "canonical"
        if "input_length" in obj or "timestamp" in obj:
            return "mooncake"
        raise InputError(path, 1, None, "unknown format: JSON lines that are neither spsim canonical "
                         f"nor Mooncake (keys: {', '.join(list(obj)[:8])}); use --format")
    header = read_header(path)
    fmt = sniff_csv(header)
    if fmt is None:
        raise InputError(path, 1, None, f"unknown format: CSV header {','.join(header)[:120]!r} is not "
                         "Azure, BurstGPT or Vidur; use --format")
    return fmt


def _csv_named_json(path: str) -> None:
    """A known CSV trace under a JSON-lines name: say so and how to read it (not "malformed JSON")."""
    with open_text(path) as f:
        first = next((ln for ln in f if ln.strip()), "")
    if first.lstrip().startswith(("{", "[")) or "," not in first:
        return
    fmt = sniff_csv(read_header(path))
    if fmt is not None:
        raise InputError(path, 1, None, f"a CSV trace ({fmt} header) in a file named as JSON lines: rename it "
                         f".csv or pass --format {fmt}")


def read_trace(path: str | Path, format: str | None = None, skip_invalid: bool = False) -> Trace:
    """Read any supported trace into a columnar Trace (arrivals shifted so the first is 0).

    Bad input raises InputError (`FILE:LINE: field: problem`); with `skip_invalid`, bad rows are
    skipped and counted in `trace.skipped`, kept rows that look wrong in `trace.warnings`
    (`report.notes` words both). A result with no requests raises `report.EmptyTrace`, whose
    `skipped` holds the counts. The returned trace always has at least one request.
    """
    p = resolve(path)
    if format is not None and format not in READERS:
        raise InputError(p, None, "format", f"unknown format {format!r} (known: {', '.join(FORMATS)})")
    if Path(p).is_dir():
        raise InputError(p, None, None, "is a directory, not a trace file")
    if not Path(p).exists():
        raise InputError(p, None, None, "no such file")
    fmt = format or detect_format(p)
    t = READERS[fmt](p, skip_invalid)
    t.meta.setdefault("name", Path(p).name)
    return t


# ---- writing -------------------------------------------------------------------------------------

def _json_value(x):
    """numpy scalar -> JSON-safe Python value (NaN -> null, so the file stays valid JSON)."""
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def header(trace: Trace) -> dict:
    h = {"spsim_trace": SCHEMA_VERSION}
    h.update({k: _json_value(v) for k, v in trace.meta.items()})
    if trace.skipped:
        h["skipped"] = dict(trace.skipped)
    if trace.warnings:
        h["warnings"] = dict(trace.warnings)
    return h


def iter_lines(trace: Trace):
    """Canonical JSONL lines (header first) without building one dict per row up front."""
    yield json.dumps(header(trace))
    ids = trace.ids.tolist()
    arr = trace.arrival_s.tolist()
    pr = trace.prompt_tokens.tolist()
    out = trace.output_tokens.tolist()
    ttft = None if trace.slo_ttft_s is None else trace.slo_ttft_s.tolist()
    tpot = None if trace.slo_tpot_s is None else trace.slo_tpot_s.tolist()
    extra = {k: v.tolist() for k, v in trace.extra.items()}
    indptr = trace.prefix_indptr
    pids = None if trace.prefix_ids is None else trace.prefix_ids
    for i in range(len(ids)):
        row = {"id": str(ids[i]), "arrival_s": arr[i], "prompt_tokens": pr[i], "output_tokens": out[i]}
        if indptr is not None:
            row["prefix_blocks"] = pids[indptr[i]:indptr[i + 1]].tolist()
        if ttft is not None:
            slo = {k: v for k, v in (("ttft_s", ttft[i]), ("tpot_s", tpot[i])) if v == v}  # v == v: not NaN
            if slo:
                row["slo"] = slo
        if extra:
            row["extra"] = {k: _json_value(v[i]) for k, v in extra.items()}
        yield json.dumps(row)


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write canonical JSONL (header with schema version, block_size, source format)."""
    import gzip
    p = str(path)
    try:
        f = gzip.open(p, "wt", encoding="utf-8") if p.endswith(".gz") else open(p, "w", encoding="utf-8")
    except OSError as e:
        raise InputError(p, None, None, f"cannot write: {e.strerror or e}") from None
    with f:
        for line in iter_lines(trace):
            f.write(line)
            f.write("\n")
