"""The real runtime on the CPU (`tiny`, fp64): speculative decoding is lossless.

With greedy acceptance every policy and every draft-KV method emits exactly the tokens `ar`
emits, for every request, over a mixed trace with prefix sharing and preemption under a small KV
pool, with a draft budget small enough that drafts really are sparse and some are rejected.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spsim.config import ServingConfig  # noqa: E402
from spsim.plan import DraftMethod  # noqa: E402
from spsim.traces.trace import Trace  # noqa: E402


def mixed_trace(n=10, seed=3, block=64, output=(12, 40)) -> Trace:
    """Prompts of 150-700 tokens, a third sharing one of two prefixes (64-token blocks)."""
    rng = np.random.default_rng(seed)
    p = rng.integers(150, 700, n)
    o = rng.integers(output[0], output[1], n)
    blocks, indptr = [], [0]
    for i in range(n):
        nb = int(p[i]) // block
        root = i % 3
        shared = nb if root < 2 else 0
        blocks += [root * 1000 + j for j in range(shared)] + [10**6 + i * 1000 + j for j in range(nb - shared)]
        indptr.append(len(blocks))
    tr = Trace(np.array([f"q{i}" for i in range(n)], object), np.zeros(n), p, o)
    tr.prefix_indptr, tr.prefix_ids = np.asarray(indptr, np.int64), np.asarray(blocks, np.int64)
    tr.meta["block_size"] = block
    return tr


class CheapDrafts:
    """A cost model under which speculation pays for every cost-aware policy (drafts cost a tenth
    of a verification), so all of them draft on this short-context trace."""

    name = "cheap-drafts"
    source = None
    overlapped = False
    padding = "none"
    model = None  # prices no model or GPU: the run's config sizes the KV pool
    page_size = None

    def __init__(self):
        self.info = {}

    def kv_capacity_pages(self, reserve_frac=None):
        return None

    def time(self, plan):
        return 1e-3

    def pass_overhead(self, num_tokens, prefill_tokens=0):
        return 1e-5

    def spec_overhead(self, method):
        return 0.0, 0.0, 0.0, 0.0

    def times(self, batch):
        return np.full(batch.n, 1e-3)

    def tables(self, budget, method, width, rows):
        return None

    def marginal(self, context, budget, method, query, draft_pos=None):
        context = np.asarray(context)
        q = np.asarray(query, float)
        return np.full(context.shape, 1e-4), 1e-3 * (1 + 0.01 * q)

    def metadata(self):
        return {"cost_model": self.name}


@pytest.fixture(scope="module")
def tiny():
    from spsim.gpu_runtime.model import Transformer
    from spsim.gpu_runtime.model_config import get_config

    torch.set_num_threads(1)
    return Transformer.random(get_config("tiny", dtype="fp64"), seed=0)


def serve(tiny, policy, method="auto", acceptance="real", **kw):
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    cfg = ServingConfig(policy=policy, offline=True, kv_pages=kw.pop("kv_pages", 120), page_size=16,
                        draft_budget=48, max_draft=6, draft_kv=method, max_batch=8, token_budget=256,
                        acceptance=acceptance, **kw)
    return run_trace(mixed_trace(), cfg, RuntimeOptions(device="cpu"), model=tiny, cost=CheapDrafts())


@pytest.fixture(scope="module")
def ar_tokens(tiny):
    run = serve(tiny, "ar")
    s = run.result.summary
    assert s["completed"] == 10 and s["drafted_tokens"] == 0
    assert s["preemptions"] > 0  # the small pool preempted, and recomputation kept the tokens
    assert s["prefix_cache_hit_tokens"] > 0  # shared prefixes were computed once
    return run.tokens


def check_lossless(run, ar_tokens):
    s = run.result.summary
    assert s["completed"] == 10
    assert run.tokens == ar_tokens
    assert s["drafted_tokens"] > 0 and s["spec_verifications"] > 0
    assert s["accepted_drafts"] < s["drafted_tokens"]  # some drafts were rejected
    assert s["accepted_drafts"] > 0


@pytest.mark.parametrize("policy", ["fixed-k:k=4", "sync:k=3", "sync", "entropy", "aspire"])
def test_every_policy_is_lossless(tiny, ar_tokens, policy):
    check_lossless(serve(tiny, policy), ar_tokens)


@pytest.mark.parametrize("method", [m.label for m in DraftMethod])
def test_every_draft_method_is_lossless(tiny, ar_tokens, method):
    run = serve(tiny, "fixed-k:k=5", method)
    check_lossless(run, ar_tokens)
    ev = run.events
    assert ev and {e["method"] for e in ev} == {int(DraftMethod.parse(method))}


def test_preset_acceptance_follows_the_keyed_draws(tiny):
    """With a preset, accepted counts come from the acceptance model's keyed draws: a fixed-k run
    accepts what a replay of the same requests would, and the clairvoyant oracle drafts only what
    will be accepted."""
    from spsim.acceptance import make_acceptance

    run = serve(tiny, "fixed-k:k=4", acceptance="fixed:p=0.7", kv_pages=400)
    s = run.result.summary
    assert s["completed"] == 10 and 0.3 < s["draft_acceptance_rate"] < 0.9
    acc = make_acceptance("fixed:p=0.7", 0)
    tr = mixed_trace()
    for rid in range(len(tr)):
        acc.begin(rid, int(tr.prompt_tokens[rid]), int(tr.output_tokens[rid]))
    runs = {}
    for e in run.events:  # (request, run start) -> drafted, accepted
        key = (e["request"], e["out_pos"] - e["draft_pos"])
        d, a = runs.get(key, (0, 0))
        runs[key] = (d + 1, a + e["accepted"])
    for (rid, start), (d, a) in runs.items():
        want = acc.verify(np.array([rid]), np.array([start]), np.array([d]), np.array([1000]), np.array([48]),
                          np.array([1]))[0]
        assert a == want
    oracle = serve(tiny, "oracle", acceptance="fixed:p=0.7", kv_pages=400).result.summary
    assert oracle["spec_verifications"] > 0 and oracle["draft_acceptance_rate"] == 1.0


def test_oracle_needs_preset_acceptance(tiny):
    from spsim.errors import SpsimError

    with pytest.raises(SpsimError, match="not real acceptance"):
        serve(tiny, "oracle")


def test_temperature_sampling_follows_the_model(tmp_path):
    """At temperature 1, speculative runs emit the model's own distribution: the first two output
    tokens of 400 identical prompts against the exact joint from the dense reference (chi-square
    goodness of fit, cells with expected count < 5 pooled, significance 0.001), for `fixed-k` with
    a sparse static window (drafts often rejected) and for `ar`."""
    from scipy.stats import chi2

    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace
    from spsim.gpu_runtime.model import Transformer, reference_logits
    from spsim.gpu_runtime.model_config import get_config
    from spsim.gpu_runtime.tokens import prompt_tokens

    n, block, vocab = 400, 64, 8
    model = Transformer.random(get_config("tiny", dtype="fp64", vocab=vocab), seed=1)
    tr = Trace(np.array([f"t{i}" for i in range(n)], object), np.zeros(n), np.full(n, block), np.full(n, 3))
    tr.prefix_indptr, tr.prefix_ids = np.arange(n + 1, dtype=np.int64), np.zeros(n, np.int64)
    tr.meta["block_size"] = block
    prompt = torch.as_tensor(prompt_tokens(0, block, [0], block, vocab, 0))
    p0 = torch.softmax(reference_logits(model, prompt)[-1], -1)
    joint = torch.stack([p0[a] * torch.softmax(reference_logits(model, torch.cat([prompt, torch.tensor([a])]))[-1], -1)
                         for a in range(vocab)]).numpy().ravel()
    for policy in ("fixed-k:k=2", "ar"):
        cfg = ServingConfig(policy=policy, offline=True, kv_pages=2000, draft_kv="static", draft_budget=16,
                            max_batch=256, token_budget=4096, acceptance="real")
        run = run_trace(tr, cfg, RuntimeOptions(device="cpu", temperature=1.0), model=model, cost=CheapDrafts())
        pairs = np.array([toks[0] * vocab + toks[1] for toks in run.tokens.values()])
        obs = np.bincount(pairs, minlength=vocab * vocab).astype(float)
        exp = joint * n
        small = exp < 5
        o = np.append(obs[~small], obs[small].sum())
        e = np.append(exp[~small], exp[small].sum())
        stat = float(((o - e) ** 2 / np.maximum(e, 1e-12)).sum())
        p = float(chi2.sf(stat, len(o) - 1))
        print(f"{policy}: chi-square {stat:.1f} on {len(o) - 1} dof, p = {p:.3f}")
        assert p > 1e-3
        if policy != "ar":
            s = run.result.summary
            assert s["drafted_tokens"] > 100 and 0.05 < s["draft_acceptance_rate"] < 0.95


@pytest.mark.parametrize("policy", ["fixed-k:k=4", "sync", "entropy", "aspire", "oracle"])
def test_run_and_replay_decide_alike_with_preset_acceptance(tiny, policy):
    """With a preset, all compute is real but acceptance and entropies come from the acceptance
    model's keyed draws: offline, the runtime and the simulator build the same pass plans, so every
    request drafts, verifies, accepts and is preempted the same number of times."""
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace
    from spsim.simulator.engine import SimConfig, simulate

    cost = CheapDrafts()  # speculation pays for every policy (the simulator prices it pass by pass)
    kw = dict(policy=policy, offline=True, kv_pages=80, page_size=16, draft_budget=48, max_draft=6,
              max_batch=8, token_budget=256, acceptance="sparsespec-llama8b")
    tr = mixed_trace(output=(60, 120))  # long outputs: decode growth preempts
    run = run_trace(tr, ServingConfig(**kw), RuntimeOptions(device="cpu"), model=tiny, cost=cost)
    sim = simulate(tr, SimConfig(**kw), cost=cost)
    cols = ["drafts", "verifies", "spec_verifies", "accepted", "preemptions", "recomputes", "prefix_hit_tokens"]
    assert run.result.requests[cols].equals(sim.requests[cols])
    assert run.result.summary["drafted_tokens"] > 0 and run.result.summary["preemptions"] > 0
    assert sum(run.result.summary["passes"].values()) == sum(sim.summary["passes"].values())


def test_synthetic_prefill_keeps_the_plans(tiny):
    """`--synthetic-prefill` (a timing aid) skips prefill compute but not its bookkeeping: with a
    preset, the run drafts, verifies and accepts exactly as the full run does, its pass records
    count the committed tokens, and its prefill passes cost (almost) nothing."""
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    cfg = ServingConfig(policy="fixed-k:k=4", offline=True, kv_pages=400, page_size=16, draft_budget=48,
                        acceptance="sparsespec-llama8b")
    runs = [run_trace(mixed_trace(), cfg, RuntimeOptions(device="cpu", synthetic_prefill=s), model=tiny,
                      cost=CheapDrafts()) for s in (False, True)]
    cols = ["drafts", "verifies", "accepted"]
    assert runs[0].result.requests[cols].equals(runs[1].result.requests[cols])
    for run in runs:
        assert sum(p["committed"] for p in run.passes) == int(run.result.requests["output_tokens"].sum())
    pre = [sum(p["gpu_ms"] for p in r.passes if p["prefill_tokens"] and not p["drafts"] and not p["verifies"])
           for r in runs]
    assert pre[1] < 0.2 * pre[0]
    assert runs[1].result.summary["runtime"]["synthetic_prefill"] is True


@pytest.mark.parametrize("policy,method", [("fixed-k:k=4", "verify-quest"), ("aspire", "verify-attn"),
                                           ("sync:k=3", "step-layer"), ("entropy", "step-quest"),
                                           ("fixed-k:k=2", "static")])
def test_padded_passes_change_nothing(tiny, ar_tokens, policy, method):
    """Dummy requests on scratch pages (padding.py, used with CUDA graphs) leave every real token,
    plan and draft outcome as they were: the same outputs as unpadded and as `ar`, the same passes."""
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    cfg = ServingConfig(policy=policy, offline=True, kv_pages=120, page_size=16, draft_budget=48, max_draft=6,
                        draft_kv=method, max_batch=8, token_budget=256, acceptance="real")
    runs = [run_trace(mixed_trace(), cfg, RuntimeOptions(device="cpu", pad_passes=p, coarse_shapes=c, shape_rule=r),
                      model=tiny, cost=CheapDrafts())
            for p, c, r in ((False, False, False), (True, False, False), (True, True, False), (True, False, True))]
    plain, padded, coarse, ruled = runs
    keys = ("passes", "drafted_tokens", "accepted_drafts", "spec_verifications")
    # coarse: powers of two (--coarse-shapes), more dummies; ruled: the shape rule (shapes.py),
    # drafting as data with dummy selection entries: the same outputs
    for run in (padded, coarse, ruled):
        check_lossless(run, ar_tokens)
        assert run.tokens == plain.tokens
        assert [run.result.summary[k] for k in keys] == [plain.result.summary[k] for k in keys]
    pads, cpads = padded.result.summary["runtime"]["padding"], coarse.result.summary["runtime"]["padding"]
    assert plain.result.summary["runtime"]["padding"] is None
    assert pads["padded_passes"] > 0 and pads["dummy_requests"] > 0 and pads["filler_tokens"] > 0
    assert not pads["coarse"] and cpads["coarse"] and cpads["filler_tokens"] >= pads["filler_tokens"]
    assert ruled.result.summary["runtime"]["padding"]["shape_rule"] and not pads["shape_rule"]


@pytest.mark.parametrize("policy,method", [("aspire", "verify-attn"), ("fixed-k:k=3", "verify-quest")])
def test_a_rehearsed_run_is_the_plain_run(tiny, policy, method):
    """`rehearse` serves the trace once untimed and again measured over the same cache, executor
    and stores: the measured run must be exactly a fresh run (tokens, events, plans, padding
    counts), so nothing of the first run leaks into it but its captured graphs."""
    from spsim.gpu_runtime.engine import RuntimeOptions, run_trace

    cfg = ServingConfig(policy=policy, offline=True, kv_pages=120, page_size=16, draft_budget=48, max_draft=6,
                        draft_kv=method, max_batch=8, token_budget=256, acceptance="sparsespec-llama8b")
    plain, rehearsed = [run_trace(mixed_trace(), cfg, RuntimeOptions(device="cpu", pad_passes=True, rehearse=r),
                                  model=tiny, cost=CheapDrafts()) for r in (False, True)]
    assert rehearsed.tokens == plain.tokens and rehearsed.events == plain.events
    strip = lambda ps: [{k: v for k, v in p.items() if not k.endswith("_ms")} for p in ps]  # noqa: E731
    assert strip(rehearsed.passes) == strip(plain.passes)
    rt, rp = rehearsed.result.summary["runtime"], plain.result.summary["runtime"]
    assert rt["padding"] == rp["padding"] and rp["rehearsal"] is None
    assert rt["rehearsal"]["passes"] == len(plain.passes)


def test_a_plan_drafting_with_another_setting_is_refused(tiny):
    """The runtime's selectors, draft store and graphs are built for the run's one draft budget
    and method: a plan that says another is an error, not silently run with the runtime's own."""
    from spsim.gpu_runtime.executor import RuntimeExecutor
    from spsim.gpu_runtime.kv_cache import PagedKVCache
    from spsim.plan import PassPlan

    cache = PagedKVCache(tiny.cfg, 8, 16, device="cpu", dtype=torch.float64)
    ex = RuntimeExecutor(tiny, cache, None, None, lambda rid: [], method=1, budget=48)
    one = dict(draft_ids=np.array([0]), draft_context=np.array([10]), draft_pos=np.array([0]))
    with pytest.raises(ValueError, match="budget 64"):
        ex._prepare(PassPlan(**one, draft_budget=64, draft_method=1))
    with pytest.raises(ValueError, match="method 0"):
        ex._prepare(PassPlan(**one, draft_budget=48, draft_method=0))
