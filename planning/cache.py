"""Probe records on disk, one file per probe named by the hash of everything that decides it
(configuration, rate, replicas, trace content and length, spsim version). Written whole to a
temporary name and renamed, so an interrupted sweep leaves whole records or none: a rerun with
the same --out finds them and runs only what is missing."""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from spsim.jsonlines import jsonable

ARRAYS = ("ttft", "tpot", "e2el")


class ProbeCache:
    def __init__(self, folder: Path | str | None):
        self.folder = Path(folder) if folder is not None else None
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.npz"

    def get(self, key: str) -> tuple[dict, dict[str, np.ndarray]] | None:
        if self.folder is None:
            return None
        p = self._path(key)
        if not p.exists():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                return meta, {k: z[k].copy() for k in ARRAYS}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # a damaged file: run the probe again
            return None

    def put(self, key: str, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        if self.folder is None:
            return
        fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, meta=np.array(json.dumps(meta, default=jsonable)), **{k: arrays[k] for k in ARRAYS})
            os.replace(tmp, self._path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return 0 if self.folder is None else sum(1 for _ in self.folder.glob("*.npz"))
