"""Plain-PyTorch references for every kernel here: slow, obvious, fp32; what the tests compare to
and what `dispatch` falls back to where the Triton kernels are not supported."""

from __future__ import annotations

import math

import numpy as np
import torch

from .pages import PageLists


def gather_row(cache: torch.Tensor, lists: PageLists, row: int) -> torch.Tensor:
    """The row's tokens `[kv_len, head_dim]`, in list order."""
    hkv = lists.num_kv_heads
    s, c = int(lists.start[row]), int(lists.count_np[row])
    ids = lists.indices[s:s + c].long()
    toks = cache[ids, row % hkv].reshape(-1, cache.shape[-1])  # [c * ps, d]
    return toks[: int(lists.kv_len_np[row])]


def mixed_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, q_len,
                        lists: PageLists, sm_scale: float | None = None,
                        page_scores: torch.Tensor | None = None) -> torch.Tensor:
    """Same contract as `attention.mixed_attention` (queries at the tail of each row, causal)."""
    q_len = np.asarray(q_len, dtype=np.int64)
    hq, d = q.shape[1], q.shape[2]
    hkv, ps = lists.num_kv_heads, lists.page_size
    g = hq // hkv
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    out = torch.zeros_like(q)
    q0 = 0
    for r, ql in enumerate(q_len):
        for h in range(hkv):
            row = r * hkv + h
            k = gather_row(k_cache, lists, row).float()
            v = gather_row(v_cache, lists, row).float()
            n = k.shape[0]
            qq = q[q0:q0 + ql, h * g:(h + 1) * g].float()  # [ql, g, d]
            s = torch.einsum("qgd,nd->qgn", qq, k) * scale
            pos = n - ql + torch.arange(ql, device=q.device)
            mask = torch.arange(n, device=q.device)[None, :] <= pos[:, None]  # [ql, n]
            s = s.masked_fill(~mask[:, None, :], float("-inf"))
            if page_scores is not None and n:
                pad = (-n) % ps
                sp = torch.nn.functional.pad(s.amax(dim=(0, 1)) * math.log2(math.e), (0, pad), value=float("-inf"))
                page_scores[row, : sp.numel() // ps] = sp.reshape(-1, ps).amax(-1)
            p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row seeing no key gives 0
            out[q0:q0 + ql, h * g:(h + 1) * g] = torch.einsum("qgn,nd->qgd", p, v).to(q.dtype)
        q0 += ql
    return out


def quest_scores_ref(q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, page_table: torch.Tensor,
                     num_pages, sink_pages: int, recent_pages: int) -> torch.Tensor:
    """Quest upper bound per (request, KV head, logical page), summed over the group's query heads.

    q: `[requests, num_q_heads, d]` (each request's newest query); kmin/kmax `[phys pages, hkv, d]`.
    Sink and recent pages score +inf, pages past the request's end -inf. Returns `[rows, max_pages]`.
    """
    r_n, hq, d = q.shape
    hkv = kmin.shape[1]
    g = hq // hkv
    maxp = page_table.shape[1]
    out = torch.full((r_n * hkv, maxp), float("-inf"), device=q.device)
    for r in range(r_n):
        n = int(num_pages[r])
        ids = page_table[r, :n].long()
        for h in range(hkv):
            qq = q[r, h * g:(h + 1) * g].float()  # [g, d]
            lo, hi = kmin[ids, h].float(), kmax[ids, h].float()  # [n, d]
            sc = torch.maximum(qq[:, None] * lo[None], qq[:, None] * hi[None]).sum(-1).sum(0)
            idx = torch.arange(n, device=q.device)
            sc = torch.where((idx < sink_pages) | (idx >= n - recent_pages), float("inf"), sc)
            out[r * hkv + h, :n] = sc
    return out


def topk_pages_ref(scores: torch.Tensor, counts) -> list[list[int]]:
    """Per row, the `counts[row]` highest-scoring pages (ties to the lower id), ascending."""
    res = []
    for row, c in enumerate(np.asarray(counts)):
        s = scores[row].double().cpu().numpy()
        order = sorted(range(len(s)), key=lambda i: (-s[i], i))
        res.append(sorted(order[: int(c)]))
    return res
