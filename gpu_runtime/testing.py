"""Random mixed batches for the kernel tests (CPU interpreter and GPU share them) and the seed rule:
each run draws a fresh seed, prints it, and takes `SPSIM_TEST_SEED` instead when set."""

from __future__ import annotations

import os
import random
import zlib
from dataclasses import dataclass

import numpy as np
import torch

from .pages import PageLists, pages_for

SEED = int(os.environ.get("SPSIM_TEST_SEED") or random.SystemRandom().randrange(2**31))


def rng_for(name: str) -> np.random.Generator:
    """A generator per test, from the run's seed and the test's name; prints how to replay it."""
    print(f"SPSIM_TEST_SEED={SEED} ({name})")
    return np.random.default_rng([SEED, zlib.crc32(name.encode())])


@dataclass
class Req:
    kind: str  # decode | verify | draft | prefill
    ctx: int  # tokens in the KV cache before this pass
    q: int = 1  # query tokens (decode/draft 1, verify k+1, prefill the chunk)
    budget: int = 0  # draft: tokens kept (sink and recent pages included)


@dataclass
class Batch:
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    q_len: np.ndarray
    lists: PageLists
    page_table: torch.Tensor  # [requests, max pages] physical ids (logical -> physical)


def make_batch(reqs: list[Req], hkv: int, g: int, d: int, ps: int, dtype, device, rng: np.random.Generator,
               sink: int = 1) -> Batch:
    """Caches on shuffled physical pages; draft rows list a random selection per KV head (sink and
    last page kept, budget // ps pages, ascending), the others every page."""
    q_len = np.array([1 if r.kind in ("decode", "draft") else r.q for r in reqs], dtype=np.int64)
    kv = np.array([r.ctx for r in reqs], dtype=np.int64) + q_len
    npg = pages_for(kv, ps)
    n_phys = int(npg.sum()) + 3
    perm = rng.permutation(n_phys)
    tables = np.split(perm[: int(npg.sum())], np.cumsum(npg)[:-1])
    maxp = int(npg.max())
    pt = np.zeros((len(reqs), maxp), dtype=np.int64)
    for i, t in enumerate(tables):
        pt[i, : len(t)] = t
    counts, last, idx = [], [], []
    for r, t, n, kvl in zip(reqs, tables, npg, kv):
        for _ in range(hkv):
            if r.kind == "draft":
                c = int(min(n, max(r.budget // ps, sink + 1)))
                s = min(sink, c - 1)
                mid = np.sort(rng.choice(np.arange(s, n - 1), size=c - 1 - s, replace=False)) if c - 1 - s else []
                logical = np.concatenate([np.arange(s), mid, [n - 1]]).astype(np.int64)
            else:
                logical = np.arange(n)
            idx.append(t[logical])
            counts.append(len(logical))
            last.append((kvl - 1) % ps + 1)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    lists = PageLists.from_csr(indptr, np.concatenate(idx), last, hkv, ps, device)
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    k = torch.randn((n_phys, hkv, ps, d), generator=gen).to(dtype).to(device)
    v = torch.randn((n_phys, hkv, ps, d), generator=gen).to(dtype).to(device)
    q = torch.randn((int(q_len.sum()), hkv * g, d), generator=gen).to(dtype).to(device)
    return Batch(q, k, v, q_len, lists, torch.as_tensor(pt, dtype=torch.int32, device=device))


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30))
