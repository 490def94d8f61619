"""Keyed uniforms, sampling and lossless speculative verification (gpu_runtime/sampling.py).

The losslessness test decodes N = 20,000 short sequences (one per request id) with speculative
cycles and compares the emitted tokens with autoregressive sampling from the target, exactly
computed, by a chi-square test at significance 0.001. The target and draft distributions depend on
the whole prefix (a keyed hash of it), drafts per cycle vary (k = 0..3, stopped early on unlikely
drafts), so the test covers rejections, bonuses, plain steps and the reuse of draft uniforms
after a rejection. Fixed keys: the p-values are deterministic, not flaky.
"""

import math

import numpy as np
import pytest
import torch

from spsim.gpu_runtime.sampling import (
    ACCEPT, DRAFT, TARGET, cycle_uniforms, draft_entropy, entropy, keyed_hash, keyed_uniform,
    probs_from_logits, sample, verify, verify_batch)

ALPHA = 0.001


# ---- keyed uniforms -------------------------------------------------------------------------------

def test_keyed_uniform_reproducible_and_order_free():
    rid, pos = np.arange(200)[:, None], np.arange(64)[None, :]
    grid = keyed_uniform(7, rid, pos, ACCEPT)
    assert grid.shape == (200, 64) and grid.dtype == np.float64
    assert ((grid > 0) & (grid < 1)).all()
    # one at a time, in a shuffled order, or in another batch: the same bits
    order = np.random.default_rng(0).permutation(200 * 64)[:300]
    for i in order:
        r, p = divmod(int(i), 64)
        assert keyed_uniform(7, r, p, ACCEPT) == grid[r, p]
    sub = keyed_uniform(7, np.array([150, 3, 77]), np.array([5, 63, 0]), ACCEPT)
    assert np.array_equal(sub, grid[[150, 3, 77], [5, 63, 0]])
    # streams and seeds are different families
    for other in (keyed_uniform(7, rid, pos, DRAFT), keyed_uniform(7, rid, pos, TARGET), keyed_uniform(8, rid, pos, ACCEPT)):
        assert (other != grid).mean() > 0.999 and abs(np.corrcoef(other.ravel(), grid.ravel())[0, 1]) < 0.03
    # roughly uniform
    assert abs(grid.mean() - 0.5) < 0.01 and np.histogram(grid, 10, (0, 1))[0].min() > 1100
    ua, ut = cycle_uniforms(7, [3, 9], [10, 0], 4)
    assert np.array_equal(ua, keyed_uniform(7, np.array([[3], [9]]), np.array([[10], [0]]) + np.arange(4), ACCEPT))
    assert np.array_equal(ut, keyed_uniform(7, np.array([[3], [9]]), np.array([[10], [0]]) + np.arange(5), TARGET))


def test_keyed_hash_is_the_simulators():
    keyed = pytest.importorskip("spsim.acceptance.keyed")
    rid, pos = np.arange(50)[:, None], np.arange(30)
    assert np.array_equal(keyed_hash(3, ACCEPT, rid, pos), keyed.key(3, ACCEPT, rid, pos))
    assert np.allclose(keyed_uniform(3, rid, pos, ACCEPT), keyed.uniform(3, ACCEPT, rid, pos), atol=2**-53)


# ---- distributions and sampling -------------------------------------------------------------------

def test_sample_inverse_cdf_by_hand():
    p = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0]] * 6)
    u = np.array([1e-12, 0.2499, 0.2501, 0.5, 0.9999, 1 - 2**-54])
    assert sample(p, u).tolist() == [1, 1, 3, 3, 3, 3]  # never a zero-probability token
    assert sample(p * 3.0, u).tolist() == [1, 1, 3, 3, 3, 3]  # unnormalised rows
    short = torch.tensor([[0.3, 0.3, 0.3999999, 0.0]], dtype=torch.float32)  # sums below 1
    assert sample(short, np.array([1 - 2**-54])).item() == 2
    onehot = probs_from_logits(torch.tensor([[1.0, 5.0, 5.0, 2.0]] * 3), 0.0)
    assert onehot.tolist()[0] == [0, 1, 0, 0]  # ties: lowest index
    assert sample(onehot, np.array([1e-9, 0.5, 1 - 1e-9])).tolist() == [1, 1, 1]


def test_sample_distribution():
    p = torch.tensor([0.05, 0.0, 0.4, 0.15, 0.3, 0.1])
    n = 20000
    y = sample(p.expand(n, -1), keyed_uniform(1, np.arange(n), 0, TARGET)).numpy()
    pv = chi2_pvalue(np.bincount(y, minlength=6), p.double().numpy() * n)
    assert pv > ALPHA


def test_probs_and_entropy():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    p = probs_from_logits(logits, 0.7)
    assert torch.allclose(p, torch.softmax(logits / 0.7, -1)) and torch.allclose(p.sum(-1), torch.ones(4))
    assert torch.allclose(entropy(torch.full((2, 8), 1 / 8)), torch.full((2,), math.log(8)))
    assert entropy(torch.tensor([[1.0, 0.0, 0.0]])).item() == 0.0
    assert torch.allclose(entropy(p), -(p * p.log()).sum(-1), atol=1e-5)
    # T = 0: the draft is one-hot; its entropy signal is that of softmax(logits) (T = 1)
    assert torch.allclose(draft_entropy(logits, 0.0), entropy(torch.softmax(logits, -1)))
    assert torch.allclose(draft_entropy(logits, 0.7), entropy(p))


# ---- verification by hand -------------------------------------------------------------------------

def _onehots(idx, V=5):
    return torch.nn.functional.one_hot(torch.tensor(idx), V).float()


def test_verify_greedy_by_hand():
    tp = torch.softmax(torch.tensor([[0, 3.0, 0, 0, 0], [0, 0, 0, 4.0, 0], [2.0, 0, 0, 0, 0], [0, 0, 0, 0, 1.0]]), -1)
    z3, z4 = np.full(3, 0.5), np.full(4, 0.5)
    assert verify(torch.tensor([1, 3, 0]), None, tp, 0.0, z3, z4) == (3, 4)  # all accepted: bonus argmax p_3
    assert verify(torch.tensor([1, 2, 0]), None, tp, 0.0, z3, z4) == (1, 3)  # rejected at 1: argmax p_1
    assert verify(torch.tensor([0, 3, 0]), None, tp, 0.0, z3, z4) == (0, 1)
    assert verify(torch.tensor([1, 3, 4]), _onehots([1, 3, 4]), tp, 0.0, z3, z4) == (2, 0)
    assert verify(torch.tensor([], dtype=torch.long), None, tp[:1], 0.0, np.zeros(0), np.full(1, 0.5)) == (0, 1)


def test_verify_sampled_by_hand():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    q = torch.tensor([[0.25, 0.75, 0.0]])
    ut = np.array([0.1, 0.9])
    # x = 0: p/q = 2, always accepted; the bonus inverts p_1 at 0.9
    assert verify(torch.tensor([0]), q, p, 1.0, np.array([0.999]), ut) == (1, 2)
    # x = 1: p/q = 2/3; accepted below, rejected above; the residual (p - q)+ is all on token 0
    assert verify(torch.tensor([1]), q, p, 1.0, np.array([0.66]), ut) == (1, 2)
    assert verify(torch.tensor([1]), q, p, 1.0, np.array([0.67]), ut) == (0, 0)
    # deterministic draft (q one-hot): accepted with probability p(x); the residual drops x
    assert verify(torch.tensor([1]), None, p, 1.0, np.array([0.49]), ut) == (1, 2)
    assert verify(torch.tensor([1]), None, p, 1.0, np.array([0.51]), ut) == (0, 0)
    # k = 0: a plain decode step from p_0 with u_target[0]
    assert verify(torch.tensor([], dtype=torch.long), None, p[1:], 1.0, np.zeros(0), np.array([0.6])) == (0, 2)


def test_verify_degenerate_residual_falls_back_to_p():
    p = torch.tensor([[0.1, 0.6, 0.3], [0.2, 0.3, 0.5]])
    q = p[:1] * 1.001  # q >= p everywhere (rounding-sized): a rejection leaves no residual mass
    acc, nxt = verify(torch.tensor([1]), q, p, 1.0, np.array([0.9995]), np.array([0.5, 0.5]))
    assert (acc, nxt) == (0, 1)  # sampled from p_0 itself


def test_verify_batch_matches_single():
    g = torch.Generator().manual_seed(1)
    n, K, V = 40, 4, 7
    tp = torch.softmax(torch.randn(n, K + 1, V, generator=g), -1)
    dp = torch.softmax(torch.randn(n, K, V, generator=g), -1)
    x = sample(dp.reshape(-1, V), keyed_uniform(0, np.arange(n * K), 0, DRAFT)).reshape(n, K)
    k = np.arange(n) % (K + 1)
    ua, ut = cycle_uniforms(0, np.arange(n), 0, K)
    for temp in (1.0, 0.0):
        for dprobs in (dp, None):
            acc, nxt = verify_batch(x, dprobs, tp, temp, ua, ut, k=k)
            for i in range(n):
                ki = int(k[i])
                one = verify(x[i, :ki], None if dprobs is None else dprobs[i, :ki], tp[i, : ki + 1], temp,
                             ua[i, :ki], ut[i, : ki + 1])
                assert one == (acc[i], nxt[i])
                assert acc[i] <= ki
    # low-precision probabilities: the same decisions as their exact float64 values
    tb, db = tp.to(torch.bfloat16), dp.to(torch.bfloat16)
    for a, b in zip(verify_batch(x, db, tb, 1.0, ua, ut, k=k), verify_batch(x, db.double(), tb.double(), 1.0, ua, ut, k=k)):
        assert np.array_equal(a, b)


# ---- losslessness, statistically ------------------------------------------------------------------

def chi2_pvalue(observed, expected, min_expected=5.0):
    """Pearson chi-square p-value; cells expected below `min_expected` are pooled into one cell;
    0 when a cell of probability zero is observed.
    scipy's chi2.sf when importable, else the Wilson-Hilferty normal approximation (within about
    10% of the p-value near 0.001 for dof >= 5, 1% for dof >= 100)."""
    observed, expected = np.asarray(observed, float), np.asarray(expected, float)
    if observed[expected == 0].sum():  # a sequence of probability zero was emitted
        return 0.0
    small = expected < min_expected
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    stat, dof = float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1
    try:
        from scipy.stats import chi2
        return float(chi2.sf(stat, dof))
    except ImportError:
        z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
        return 0.5 * math.erfc(z / math.sqrt(2))


V, L, KMAX, N = 6, 3, 3, 20000  # vocabulary, tokens compared, drafts per cycle, sequences


def _dist(seed, code):
    """A distribution over V per prefix code: Dirichlet(1) squared (peaky), some tokens zeroed."""
    tok = np.arange(V)
    w = np.log(keyed_uniform(seed, code[:, None], tok, 5)) ** 2
    w[keyed_uniform(seed, code[:, None], tok, 6) < 0.25] = 0.0
    w[np.arange(len(code)), keyed_hash(seed, 7, code, 0) % np.uint64(V)] += 0.05  # never all zero
    return w / w.sum(1, keepdims=True)


def _p(code):
    return _dist(101, code)


def _q(code):
    q = _dist(202, code)
    same = keyed_uniform(303, code, 0, 0) < 0.15  # sometimes the draft is exact: p/q = 1
    q[same] = _p(code[same])
    return q


def _extend(code, tok, pos):
    return code + (tok + 1) * (V + 1) ** pos  # a unique integer per prefix


def _exact(L):
    """P(y_0..y_{L-1}) under autoregressive sampling from p, over all V**L sequences."""
    seqs = np.indices((V,) * L).reshape(L, -1).T
    prob, code = np.ones(len(seqs)), np.zeros(len(seqs), np.int64)
    for t in range(L):
        prob *= _p(code)[np.arange(len(seqs)), seqs[:, t]]
        code = _extend(code, seqs[:, t], t)
    return prob


def _decode(verifier, seed=0, greedy_draft=False, temperature=1.0, peek=False):
    """Decode L tokens of N sequences by speculative cycles; returns [N, L] tokens.

    Drafting stops at a keyed random k or earlier when q_j is flat (max q_j < 0.4): known before
    x_j is drawn, so lossless. With `peek`, it also stops before a draft x_j that came out unlikely
    (q_j(x_j) < 0.2): that drops drafts by their own value, which biases the output."""
    rid = np.arange(N)
    out = np.full((N, L + KMAX + 1), -1, np.int64)
    n = np.zeros(N, np.int64)
    code = np.zeros(N, np.int64)
    while (n < L).any():
        i = np.flatnonzero(n < L)
        start, dcode = n[i], code[i].copy()
        xs, qs, ps, stop = [], [], [], np.zeros(len(i), bool)
        kk = np.zeros(len(i), np.int64)
        want = (keyed_hash(seed, 9, rid[i], start) % np.uint64(KMAX + 1)).astype(np.int64)
        for j in range(KMAX):
            q = _q(dcode)
            x = q.argmax(1) if greedy_draft else \
                sample(torch.from_numpy(q), keyed_uniform(seed, rid[i], start + j, DRAFT)).numpy()
            stop |= q.max(1) < 0.4
            if peek:
                stop |= q[np.arange(len(i)), x] < 0.2
            kk += (~stop) & (j < want)
            xs.append(x), qs.append(q), ps.append(_p(dcode))
            dcode = _extend(dcode, x, start + j)
        ps.append(_p(dcode))
        ua, ut = cycle_uniforms(seed, rid[i], start, KMAX)
        acc, nxt = verifier(torch.from_numpy(np.stack(xs, 1)), None if greedy_draft else torch.from_numpy(np.stack(qs, 1)),
                            torch.from_numpy(np.stack(ps, 1)), temperature, ua, ut, kk)
        for j in range(KMAX + 1):  # commit the accepted drafts, then the extra token
            tok = np.where(j < acc, xs[min(j, KMAX - 1)], nxt)
            live = j <= acc
            out[i[live], n[i[live]] + j] = tok[live]
            code[i[live]] = _extend(code[i[live]], tok[live], n[i[live]] + j)
        n[i] += acc + 1
    return out[:, :L]


def _pvalues(y):
    pv = []
    for m in (1, 2, 3):
        cells = (y[:, :m] * V ** np.arange(m - 1, -1, -1)).sum(1)
        exact = _exact(m)
        pv.append(chi2_pvalue(np.bincount(cells, minlength=V ** m), exact * N))
    return pv


def _always_accept(x, q, p, temperature, ua, ut, k):
    # the classic mistake: take the drafts as they are, then a bonus from p_k
    k = torch.as_tensor(np.asarray(k))
    return k.numpy(), sample(p[torch.arange(len(k)), k], ut[np.arange(len(k)), k.numpy()]).numpy()


def _correct_from_p(x, q, p, temperature, ua, ut, k):
    # the subtler mistake: accept by the ratio but resample a rejection from p, not (p - q)+
    acc, nxt = verify_batch(x, q, p, temperature, ua, ut, k=k)
    rej = acc < np.asarray(k)
    rows = np.flatnonzero(rej)
    nxt[rows] = sample(p[torch.from_numpy(rows), torch.from_numpy(acc[rows])], ut[rows, acc[rows]]).numpy()
    return acc, nxt


def _verify_k(x, q, p, temperature, ua, ut, k):
    return verify_batch(x, q, p, temperature, ua, ut, k=k)


@pytest.mark.parametrize("greedy_draft", [False, True], ids=["sampled-draft", "deterministic-draft"])
def test_lossless_chi_square(greedy_draft):
    y = _decode(_verify_k, greedy_draft=greedy_draft)
    pv = _pvalues(y)
    print(f"p-values (first token, pair, triple), N={N}: {pv}")
    assert min(pv) > ALPHA, pv


@pytest.mark.parametrize("biased", ["always-accept", "correct-from-p", "drop-unlikely-draft"])
def test_lossless_test_detects_bias(biased):
    verifier = {"always-accept": _always_accept, "correct-from-p": _correct_from_p}.get(biased, _verify_k)
    pv = _pvalues(_decode(verifier, peek=biased == "drop-unlikely-draft"))
    print(f"biased p-values: {pv}")
    assert min(pv) < ALPHA, pv


def test_greedy_decoding_is_argmax_chain():
    y = _decode(_verify_k, temperature=0.0)[:50]
    code = np.zeros(len(y), np.int64)
    for t in range(L):
        assert np.array_equal(y[:, t], _p(code).argmax(1))
        code = _extend(code, y[:, t], t)


def test_per_row_temperature_gives_each_row_what_its_own_temperature_gives():
    """A pass whose requests ask for different temperatures (a server's clients): a greedy row
    accepts and emits exactly what greedy verification does, a sampling row what verifying it
    alone at its temperature does."""
    from spsim.gpu_runtime.sampling import probs_from_logits

    g = torch.Generator().manual_seed(3)
    n, K, V = 24, 3, 9
    logits = torch.randn(n, K + 1, V, generator=g) * 2
    temps = torch.tensor([0.0, 0.7, 1.3] * (n // 3))
    x = torch.stack([logits[i, :K].argmax(-1) if i % 2 else torch.randint(0, V, (K,), generator=g)
                     for i in range(n)])  # half the drafts are the greedy chain, half random
    ua, ut = cycle_uniforms(5, np.arange(n), 0, K)
    k = np.arange(n) % (K + 1)
    tp = probs_from_logits(logits.reshape(-1, V), temps.repeat_interleave(K + 1)).view(n, K + 1, V)
    acc, nxt = verify_batch(x, None, tp, temps, ua, ut, k=k)
    for i in range(n):
        t = float(temps[i])
        one = probs_from_logits(logits[i:i + 1].reshape(-1, V), t).view(1, K + 1, V) if t > 0 else logits[i:i + 1]
        a1, n1 = verify_batch(x[i:i + 1], None, one, t, ua[i:i + 1], ut[i:i + 1], k=k[i:i + 1])
        assert (acc[i], nxt[i]) == (a1[0], n1[0]), (i, t)
    # the greedy rows really are greedy; the sampling rows do not all follow the argmax chain
    greedy = [i for i in range(n) if temps[i] == 0]
    assert all(nxt[i] == logits[i, acc[i]].argmax() for i in greedy)
    assert any(nxt[i] != logits[i, acc[i]].argmax() for i in range(n) if temps[i] > 0)
