"""The runtime serving live arrivals (`spsim serve`): the batcher, policy and executor of `spsim
run`, fed by requests that come and go while it runs.

One thread owns everything the GPU touches (table, batcher, executor): it takes new requests and
aborts from an inbox between passes, plans a pass, runs it, applies its outcome, and hands each
request its new tokens through the request's `on_tokens` callback (called on that thread). The
request table grows as requests arrive; a request's row id is its index for its whole life.
Requests end at `max_tokens` (the batcher's output length), at an end-of-sequence token (unless
`ignore_eos`, and not before `min_tokens`), when `on_tokens` asks to stop (a stop string), or when
aborted (the client left); in every case its KV pages go back to the pool at once.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from spsim.build import build, build_acceptance
from spsim.config import ServingConfig
from spsim.plan import Outcome
from spsim.policies.kv import PagedKVPool
from spsim.policies.request import Phase, RequestTable

from .keys import AcceptanceKeys, KeyedAcceptance


@dataclass
class LiveRequest:
    """One client request as the engine sees it. `on_tokens(tokens, finish)` gets its new output
    token ids after each pass (`finish`: None, or why it ended: "length", "stop", "abort") and
    returns True to end it now (a stop string matched)."""
    prompt: list[int]
    max_tokens: int
    on_tokens: Callable[[list[int], str | None], bool]
    min_tokens: int = 0
    ignore_eos: bool = False
    stop_ids: frozenset = frozenset()  # token ids that end it (besides the model's end-of-sequence)
    key: int | None = None  # the client's integer request id: keys preset acceptance draws
    temperature: float | None = None  # its own sampling temperature (None: the server's)
    rid: int = -1  # row in the engine's table, once taken in
    sent: int = 0  # output tokens handed to on_tokens so far
    arrival: float = field(default_factory=time.perf_counter)
    aborted: bool = False
    finished: str | None = None


@dataclass
class SpecCounters:
    """Speculative decoding as vLLM counts it: verifications with drafts, draft tokens, accepted
    tokens, and accepted tokens by draft position."""
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class LiveEngine:
    def __init__(self, cfg: ServingConfig, opts, model, tokenizer=None):
        """`opts`: the runtime's `RuntimeOptions` (device, temperature, CUDA graphs, start-up set)."""
        import torch

        from spsim.gpu_runtime.engine import kv_pages_for, new_server, overlap_for, policy_cost_model

        self.cfg, self.opts, self.model, self.tokenizer = cfg, opts, model, tokenizer
        lc = model.cfg
        self.eos = frozenset(int(x) for x in (lc.eos_token_ids or ()))
        self.pages = kv_pages_for(lc, cfg, opts, model.dtype)
        self.keys = AcceptanceKeys()
        acc = None if cfg.acceptance in (None, "real") else KeyedAcceptance(build_acceptance(cfg), self.keys)
        self.serving = build(cfg, prefix_cache=False, cost=policy_cost_model(cfg, lc), acceptance=acc,
                             capacity=self.pages, max_context=lc.max_context)
        self.max_context = self.serving.batcher_config.max_context
        self.table = RequestTable(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        self.b = self.serving.new_batcher(self.table, None, None, PagedKVPool)
        self.b.on_done = self._on_done
        self.reqs: dict[int, LiveRequest] = {}  # live requests by row id
        graphed = opts.cuda_graphs and model.device.type == "cuda"
        startup = bool(graphed and opts.shape_rule and opts.startup_shapes)
        self.cache, self.ex, self.graphs = new_server(model, cfg, opts, self.serving, self.b, self.table,
                                                      self._prompt, self.pages, startup,
                                                      overlap_for(opts, model, self.serving), store_slots=cfg.max_batch)
        self.ex.events = None  # nothing keeps per-draft events in a server: counters below
        self.spec = SpecCounters(per_pos=np.zeros(max(cfg.max_draft, 1), np.int64))
        self.passes = 0
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread: threading.Thread | None = None
        self._rows = 0  # table rows taken
        self._cpu = torch.device(opts.device).type == "cpu"
        self.error: BaseException | None = None
        self.closing = False  # shutting down: no new requests
        self.mail = None  # app.Mailbox: the requests' tokens, handed to the event loop by `flush`

    # ------------------------------------------------------------ called from any thread
    def submit(self, req: LiveRequest) -> None:
        if self.error is not None:
            raise RuntimeError(f"the engine stopped: {self.error}")
        if self.closing or self._stop.is_set():
            raise RuntimeError("the server is shutting down")
        self.keys.claim(req)  # raises ValueError for an id already in flight
        self._inbox.put(("add", req))
        self._wake.set()

    def abort(self, req: LiveRequest) -> None:
        req.aborted = True
        self._inbox.put(("abort", req))
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="spsim-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def waiting(self) -> int:
        return len(self.b.waiting) + self._inbox.qsize()

    @property
    def running(self) -> int:
        return len(self.b.running)

    def pages_used(self) -> int:
        return int(self.b.pool.used)

    # ------------------------------------------------------------ the engine thread
    def now(self) -> float:
        return time.perf_counter() - self._t0

    def _prompt(self, rid: int) -> list[int]:
        return self.reqs[rid].prompt

    def _run(self) -> None:
        try:
            if self._cpu:
                from spsim.gpu_runtime.dispatch import reference_only

                with reference_only():
                    self._loop()
            else:
                self._loop()
        except BaseException as e:  # noqa: BLE001 — reported to every waiting client, then re-raised
            self.error = e
            for req in list(self.reqs.values()):
                req.finished = "abort"
                req.on_tokens([], "abort")
            self.flush()
            raise

    def _loop(self) -> None:
        b, ex = self.b, self.ex
        pending = None  # the overlapped loop's pass in flight: (ticket, plan)
        while not self._stop.is_set():
            self._drain()
            self.flush()  # aborts and rejections the inbox brought
            if not b.has_work():
                if pending is not None:  # what is in flight may finish requests
                    self._settle(*pending)
                    pending = None
                    continue
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            plan = b.plan(self.now())
            if plan.is_empty():
                raise RuntimeError("batcher produced an empty pass with work pending")  # a bug, not input
            tk = ex.launch(plan)
            if ex.overlap:
                # as in `spsim run`: the outcome (known on the host under preset acceptance) is
                # applied now and the next pass planned while the GPU runs this one; its tokens
                # reach clients when it is settled, after the next launch
                if pending is not None:
                    self._settle(*pending)
                b.apply(plan, Outcome(float("nan"), tk.entropy, tk.accepted), None)
                pending = (tk, plan)
            else:
                self._settle(tk, plan, apply=True)
        if pending is not None:
            self._settle(*pending)
        self._drain()
        for req in list(self.reqs.values()):  # shutting down: what is left ends now
            self._end(req, "abort")
        self.flush()

    def flush(self) -> None:
        """Engine thread: hand the event loop what `on_tokens` produced since the last flush."""
        if self.mail is not None:
            self.mail.flush()

    def _settle(self, tk, plan, apply: bool = False) -> None:
        out = self.ex.finish(tk)
        if apply:
            self.b.apply(plan, out, self.now())
        else:
            self.b.stamp(self.now())
        self.passes += 1
        self._count_spec(plan, out)
        self._deliver(plan)
        self.flush()  # overlapped: while the GPU runs the pass launched before this one settled
        done = self.ex.done
        for rid in [r for r in done if r not in self.reqs]:  # handed out: nothing keeps them
            del done[rid]

    def _drain(self) -> None:
        while True:
            try:
                op, req = self._inbox.get_nowait()
            except queue.Empty:
                return
            if op == "add":
                if req.aborted:
                    self.keys.release(req)
                    continue
                self._add(req)
            elif req.rid >= 0 and req.finished is None:
                self._end(req, "abort")

    def _add(self, req: LiveRequest) -> None:
        t, rid = self.table, self._rows
        if rid >= t.n:
            t.grow(max(2 * t.n, 64))
        self._rows += 1
        req.rid = rid
        self.reqs[rid] = req
        if req.temperature is not None and req.temperature != self.ex.temperature:
            self.ex.temperatures[rid] = float(req.temperature)
        self.keys.bind(req)
        t.prompt[rid], t.output[rid], t.arrival[rid] = len(req.prompt), req.max_tokens, self.now()
        self.serving.arrived(rid, t)
        self.b.enqueue(rid, self.now())

    def _on_done(self, rid: int, at: float) -> None:
        self.serving.done(rid)
        if self.table.phase[rid] == Phase.REJECTED and rid in self.reqs:
            self._end(self.reqs[rid], "rejected")

    def _end(self, req: LiveRequest, reason: str) -> None:
        """End `req` now (abort, stop, rejection): pages back to the pool, the client told."""
        if req.finished is not None:
            return
        self._close(req, reason)
        req.on_tokens([], reason)

    def _close(self, req: LiveRequest, reason: str) -> None:
        """`req` has ended: pages back to the pool if it still held any, its key free."""
        req.finished = reason
        if self.table.phase[req.rid] in (Phase.WAITING, Phase.PREFILL, Phase.DECODE):
            self.b.abort(req.rid, self.now())
        self.reqs.pop(req.rid, None)
        self.ex.temperatures.pop(req.rid, None)
        self.keys.release(req)

    def _deliver(self, plan) -> None:
        """Hand each request that got tokens in this pass its new ones; end those that reached
        the end of their output, an end-of-sequence or stop token, or a stop string."""
        t = self.table
        touched = np.concatenate([plan.prefill_ids[plan.prefill_last], plan.verify_ids]).tolist()
        for rid in touched:
            req = self.reqs.get(rid)
            st = self.ex.req.get(rid) or self.ex.done.get(rid)
            if req is None or st is None:
                continue
            # overlapped: tokens past `clean` are placeholders of a pass still running
            upto = st.clean if self.ex.overlap else len(st.tokens)
            new = st.tokens[st.prompt_len + req.sent:upto]
            reason = None
            if not req.ignore_eos or req.stop_ids:
                ends = req.stop_ids if req.ignore_eos else (self.eos | req.stop_ids)
                for i, x in enumerate(new):
                    if x in ends and req.sent + i + 1 > req.min_tokens:
                        new, reason = new[:i + 1], "stop"
                        break
            if reason is None and t.phase[rid] == Phase.DONE and req.sent + len(new) >= t.committed[rid]:
                reason = "length"
            req.sent += len(new)
            wants_stop = bool(req.on_tokens(list(new), reason))
            if reason is None and wants_stop:
                reason = "stop"
                req.on_tokens([], reason)
            if reason is not None:
                self._close(req, reason)

    def _count_spec(self, plan, out) -> None:
        k = plan.verify_query - 1
        spec = k > 0
        if not spec.any():
            return
        a = np.asarray(out.accepted, np.int64)[spec]
        sc = self.spec
        sc.drafts += int(spec.sum())
        sc.draft_tokens += int(k[spec].sum())
        sc.accepted += int(a.sum())
        if len(a) and a.max() > 0:
            # accepted tokens at position j: verifications that accepted more than j drafts
            sc.per_pos[:a.max()] += (a[:, None] > np.arange(a.max())[None, :]).sum(0)
