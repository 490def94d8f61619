"""Token sampling and lossless speculative verification, driven by keyed uniforms.

Every random number is a pure function of (seed, request id, output position, stream), so a
request's output never depends on batch composition or call order, and reruns reproduce it. The
hash is the simulator's (`spsim.keyed.key`, shared by both worlds): the ACCEPT stream is bit-for-bit the simulator's acceptance stream, only shifted to
the bin centre so u is never 0 or 1 (u < p/q with p = 0 never accepts, u < 1 always does).

Position convention: the draft at output position t uses DRAFT(t); its accept test ACCEPT(t); the
target's token at t (plain decode, correction after a rejection at t, or the bonus) TARGET(t). A
uniform that influenced committed output is never reused: t is then committed. Drafts past the
first rejection are discarded unseen, so redrafting t with the same DRAFT(t) stays lossless.

Verification is speculative sampling (Leviathan et al. 2023, Chen et al. 2023): accept draft x_j
with probability min(1, p_j(x_j) / q_j(x_j)); at the first rejection emit a sample of
normalize(max(0, p_j - q_j)); if all k are accepted emit a bonus sample of p_k. The emitted
sequence is distributed exactly as autoregressive sampling from p. Numpy and torch only.
"""

from __future__ import annotations

import numpy as np
import torch

from spsim.keyed import INV53, U64, keyed_hash
from .pages import to_device

DRAFT = 0  # sampling a draft token
ACCEPT = 1  # the accept test of the draft at that position
TARGET = 2  # sampling the target's token at that position

def keyed_uniform(seed: int, rid, pos, stream: int) -> np.ndarray:
    """Uniform in (0, 1) (53-bit bin centres) keyed by (seed, request id, output position, stream).

    rid and pos broadcast against each other; the result has their broadcast shape (float64)."""
    return ((keyed_hash(seed, stream, rid, pos) >> U64(11)).astype(np.float64) + 0.5) * INV53


def cycle_uniforms(seed: int, rid, start, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Uniforms for verify cycles whose first draft sits at output position `start`:
    (u_accept [n, k] at start + 0..k-1, u_target [n, k+1] at start + 0..k)."""
    rid = np.asarray(rid, np.int64).reshape(-1, 1)
    start = np.asarray(start, np.int64).reshape(-1, 1)
    j = np.arange(k + 1, dtype=np.int64)
    return (keyed_uniform(seed, rid, start + j[:k], ACCEPT), keyed_uniform(seed, rid, start + j, TARGET))


# ---- distributions --------------------------------------------------------------------------------

def probs_from_logits(logits: torch.Tensor, temperature, dtype=torch.float32) -> torch.Tensor:
    """softmax(logits / T) over the last dimension; T == 0 gives a one-hot of the argmax (lowest
    index on ties, as torch.argmax). `temperature`: one float, or a tensor [n] of one per row
    (requests of one pass asking for different temperatures)."""
    if not isinstance(temperature, torch.Tensor):
        if temperature <= 0:
            out = torch.zeros(logits.shape, dtype=dtype, device=logits.device)
            return out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        return torch.softmax(logits.to(dtype) / temperature, dim=-1)
    t = temperature.to(device=logits.device, dtype=dtype).reshape(-1, *[1] * (logits.dim() - 1))
    hot = torch.zeros(logits.shape, dtype=dtype, device=logits.device).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return torch.where(t > 0, torch.softmax(logits.to(dtype) / torch.where(t > 0, t, 1.0), dim=-1), hot)


def any_positive(temperature) -> bool:
    """Whether any row samples (a per-row tensor holds differing values, so one is above 0)."""
    return isinstance(temperature, torch.Tensor) or temperature > 0


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Entropy in nats over the last dimension (0 log 0 = 0)."""
    return torch.special.entr(probs).sum(-1)


def draft_entropy(logits: torch.Tensor, temperature) -> torch.Tensor:
    """The entropy signal of a draft token: entropy of softmax(logits / T). At T == 0 the draft
    distribution is one-hot (entropy 0, no signal), so the entropy of softmax(logits) (T = 1) is
    used instead: it still says how sure the model is, which is what predicts acceptance."""
    if isinstance(temperature, torch.Tensor):
        return entropy(probs_from_logits(logits, torch.where(temperature > 0, temperature, 1.0)))
    return entropy(probs_from_logits(logits, temperature if temperature > 0 else 1.0))


def sample(probs: torch.Tensor, u) -> torch.Tensor:
    """Inverse-CDF sample of each row of `probs` [n, V] with its uniform u [n] in (0, 1) (numpy or torch).

    Rows need not be normalised (u is scaled by the row total). The cumsum is float64; the index
    is clamped to the row's last positive entry, so rounding never picks a zero-probability token.
    A one-hot row (T == 0) returns its argmax for every u."""
    p = probs.to(torch.float64)
    cdf = p.cumsum(-1)
    u = u if isinstance(u, torch.Tensor) else to_device(u, np.float64, p.device)  # no wait: overlapped loop
    ut = u.to(device=p.device, dtype=torch.float64).reshape(-1, 1) * cdf[:, -1:]
    idx = torch.searchsorted(cdf, ut, right=True).squeeze(1)
    last = p.shape[-1] - 1 - (p > 0).flip(-1).to(torch.int32).argmax(-1)
    return torch.minimum(idx, last)


# ---- verification ---------------------------------------------------------------------------------

def verify_batch(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
                 temperature, u_accept, u_target, k=None) -> tuple[np.ndarray, np.ndarray]:
    """Verify n requests at once: returns (accepted [n], next_token [n]) as int64 numpy arrays.

    draft_tokens [n, K] (long), draft_probs [n, K, V] (the distributions the drafts were sampled
    from) or None for deterministic drafts (q = one-hot of the draft token), target_probs
    [n, K+1, V], u_accept [n, K], u_target [n, K+1]. `k` [n] (default all K) verifies only the
    first k[i] drafts of request i; entries past k[i] are ignored; k[i] == 0 is a plain decode step
    (a sample of p_0). T == 0 is greedy: accept while x_j == argmax p_j, then emit argmax p_a.
    A per-row `temperature` tensor takes the sampling path for every row: a greedy row's target
    and draft distributions are one-hots there, which accept and emit exactly what greedy does.
    """
    n, K = draft_tokens.shape
    dev = target_probs.device
    k = torch.full((n,), K, dtype=torch.int64, device=dev) if k is None else \
        torch.as_tensor(np.asarray(k, np.int64), device=dev)
    rows = torch.arange(n, device=dev)
    valid = torch.arange(K, device=dev)[None, :] < k[:, None]
    x = draft_tokens.to(device=dev, dtype=torch.int64)

    if not any_positive(temperature):
        best = target_probs.argmax(-1)  # [n, K+1]
        ok = (x == best[:, :K]) & valid
        acc = ok.to(torch.int64).cumprod(1).sum(1)
        return acc.cpu().numpy(), best[rows, acc].cpu().numpy()

    ua = torch.as_tensor(np.asarray(u_accept, np.float64), device=dev).reshape(n, K)
    ut = torch.as_tensor(np.asarray(u_target, np.float64), device=dev).reshape(n, K + 1)
    px = target_probs[:, :K].gather(-1, x[..., None]).squeeze(-1).to(torch.float64)
    qx = torch.ones_like(px) if draft_probs is None else \
        draft_probs.gather(-1, x[..., None]).squeeze(-1).to(torch.float64)
    ok = (ua * qx < px) & valid  # u < p/q without dividing; q = 0 (impossible draft) accepts iff p > 0
    acc = ok.to(torch.int64).cumprod(1).sum(1)

    p = target_probs[rows, acc].to(torch.float64)  # [n, V]
    rejected = acc < k
    if K == 0:
        q = torch.zeros_like(p)
    elif draft_probs is None:
        q = torch.zeros_like(p).scatter_(-1, x[rows, acc.clamp(max=K - 1)][:, None], 1.0)
    else:
        q = draft_probs[rows, acc.clamp(max=K - 1)].to(torch.float64)
    q = q * rejected[:, None]  # the bonus samples p itself
    resid = (p - q).clamp_(min=0)
    degenerate = resid.sum(-1) <= 0  # p == q (up to rounding): nothing left, fall back to p
    dist = torch.where(degenerate[:, None], p, resid)
    nxt = sample(dist, ut[rows, acc])
    return acc.cpu().numpy(), nxt.cpu().numpy()


def verify(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
           temperature: float, u_accept, u_target) -> tuple[int, int]:
    """One request: draft_tokens [k], draft_probs [k, V] or None, target_probs [k+1, V],
    u_accept [k], u_target [k+1]. Returns (drafts accepted, the one extra token)."""
    kk = int(draft_tokens.shape[0])
    acc, nxt = verify_batch(draft_tokens.reshape(1, kk), None if draft_probs is None else draft_probs[None],
                            target_probs[None], temperature, np.reshape(u_accept, (1, kk)),
                            np.reshape(u_target, (1, kk + 1)))
    return int(acc[0]), int(nxt[0])
