"""One model replica: a SimPy process that runs passes back to back while it has work.

Each loop takes one step (one pass) or, on the fast path, one segment of many decode passes that
end at the first random outcome, completion or page shortage. An arrival routed to a replica in a
segment interrupts it: the segment is cut after the last pass that started before the arrival,
exactly where the step path would first have seen it. Either way it is one SimPy event per step
or segment. Pass times are added on a replica-local clock so both paths give bit-identical
timestamps.

`lag` models a runtime that plans each pass while the previous one runs (the overlapped loop of
`spsim run`, which a profile measured that way prices): a request arriving while pass M runs is
first seen by pass M + 2, not M + 1 (pass M + 1 was planned when M started). An idle replica sees
it at once.
"""

from __future__ import annotations

import numpy as np
import simpy

from spsim.cost.batch import PlanBatch
from spsim.policies.batcher import Batcher

from .executor import SimExecutor
from .segment import FastPath

from spsim.metrics import CATEGORIES


class Replica:
    def __init__(self, env: simpy.Environment, index: int, batcher: Batcher, fast_path: FastPath,
                 executor: SimExecutor, fast: bool = True, max_segment: int = 4096, lag: bool = False):
        self.env = env
        self.index = index
        self.batcher = batcher
        self.fp = fast_path
        self.ex = executor
        self.cost = executor.cost
        fast_path.acc = executor.acc
        self.fast = fast
        self.max_segment = max_segment
        self.clock = 0.0
        self.wake: simpy.Event | None = None
        self.in_segment = False  # interruptible: waiting out a segment's passes
        self.cat_ns = dict.fromkeys(CATEGORIES, 0)  # integer ns: sums independent of order
        self.cat_passes = dict.fromkeys(CATEGORIES, 0)
        self.segments = 0
        self.seg_env = None  # env.now the step path would have after the last segment's passes
        self.lag = lag
        self.started = 0  # passes started
        self.running = -1  # index of the pass running now (-1: none; None: one of a segment's)
        self.held: list[list] = []  # lag: [rid, arrival, pass running at arrival] not yet seen
        self.proc = env.process(self.run())

    @property
    def outstanding(self) -> int:
        """Requests routed here and not finished: waiting or running, and those the lag still holds."""
        return self.batcher.outstanding + len(self.held)

    def arrive(self, rid: int, now: float) -> None:
        """A request routed here: into the batcher's queue, or held for a pass (`lag`)."""
        if self.lag and self.running != -1:
            self.held.append([rid, now, self.running])
        else:
            self._enqueue(rid, now)
        self.notify()

    def _enqueue(self, rid: int, at: float) -> None:
        self.batcher.enqueue(rid, at)
        self.batcher.t.replica[rid] = self.index

    def _release_held(self) -> None:
        """Held requests the pass about to be planned sees: those that arrived two passes back,
        or all of them when nothing else is left to run (the runtime then waits for them)."""
        k, b = self.started, self.batcher
        idle = not b.has_work()
        keep = []
        for h in self.held:
            if idle or h[2] <= k - 2:
                self._enqueue(h[0], h[1])
            else:
                keep.append(h)
        self.held = keep

    def notify(self) -> None:
        """New work arrived: wake an idle replica, or cut a running segment short."""
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()
        elif self.in_segment:
            self.in_segment = False
            self.proc.interrupt()

    def run(self):
        env, b = self.env, self.batcher
        while True:
            if self.held:
                self._release_held()
            if not b.has_work():
                self.seg_env = None
                self.wake = env.event()
                yield self.wake
                self.wake = None
                continue
            # after a segment, the clock SimPy would show had each pass been its own timeout
            now = self.clock = max(self.clock, env.now if self.seg_env is None else self.seg_env)
            self.seg_env = None
            b.admit(now)  # before segment(): a segment only forms once nothing more can be admitted
            sp = self.fp.plan(self.max_segment) if self.fast and not self.held else None
            if sp is not None:
                yield from self._run_segment(sp, now)
                continue
            plan = b.plan(now)
            if plan.is_empty():
                raise RuntimeError("batcher produced an empty pass with work pending")  # a bug, not input
            out = self.ex.execute(plan)
            end = now + out.elapsed_s
            cat = plan.category
            self.cat_ns[cat] += int(np.rint(out.elapsed_s * 1e9))
            self.cat_passes[cat] += 1
            self.running = self.started
            self.started += 1
            yield env.timeout(end - env.now)
            self.clock = end
            b.apply(plan, out, end)  # a closed loop's next request, released here, counts as arriving in this pass
            self.running = -1

    def _run_segment(self, sp, now: float):
        env = self.env
        if sp.seg is None:
            times = self.cost.times(PlanBatch.plain(sp.context, sp.n))
        else:
            times = self.cost.times(sp.seg)
        n = sp.n
        env_now = env.now
        if times.max() * (1 + 1e-9) < env_now:
            ends = times.copy()
            ends[0] += now
            ends = ends.cumsum()  # sequential sums from `now`, as the step path adds pass times
            env_ends = ends
        else:
            # early in a run a pass can outlast the time so far: then SimPy's now + (end - now)
            # after a pass's timeout is not exactly its end, and the next pass starts at the larger
            ends, env_ends = np.empty(n), np.empty(n)
            x, e = now, env_now
            for i, dt in enumerate(times.tolist()):
                y = x + dt
                e = e + (y - e)
                ends[i], env_ends[i] = y, e
                x = y if y > e else e
        self.in_segment = True
        seg_step = False  # the last pass kept is the step path's (see the lag below)
        self.running = None  # an arrival's pass is known once the segment is cut
        try:
            yield env.timeout(ends.item(n - 1) - env.now)
        except simpy.Interrupt:
            # keep the passes that started before this instant; the next one sees the arrival
            starts = np.concatenate(([now], ends[:-1]))
            n = max(1, int(np.count_nonzero(starts < env.now)))
            yield env.timeout(max(0.0, ends.item(n - 1) - env.now))
            if self.lag and n < sp.n:
                # the lag holds the arrival through the next pass, which the step path plans without
                # it: the segment's next pass (its passes before the last finish nothing, so nothing
                # other replicas see changes). Kept here rather than run as a step pass, timed as
                # the step path times it (from this instant, its end the clock: `seg_step`).
                for h in self.held:
                    if h[2] is None:
                        h[2] = self.started + n - 1
                self.running = self.started + n
                # the clock a watch reads (planning/stop.py) is the step path's through that pass:
                # its start (the passes before finish nothing, so nothing else it reads is behind)
                self.clock = max(ends.item(n - 1), env_ends.item(n - 1))
                n += 1
                seg_step = True
                yield env.timeout(ends.item(n - 1) - env.now)
        self.in_segment = False
        for h in self.held:  # arrivals while the kept passes ran: during the last of them
            if h[2] is None:
                h[2] = self.started + n - 1
        self.started += n
        self.running = self.started - 1  # releases by the segment's last pass
        self.segments += 1
        b = self.batcher
        tn = np.rint(times[:n] * 1e9).astype(np.int64)
        if sp.seg is None:  # every pass a pure verify (decode) pass
            self.cat_ns["verify"] += int(tn.sum())
            self.cat_passes["verify"] += n
            accepted = None
        else:
            vids = self.fp.last_verify_ids(sp, n)
            accepted = self.ex.verify(vids, b.t.drafted[vids] + n - 1) if len(vids) else None
            kinds = sp.seg.kind[:n]
            has_d = (kinds == PlanBatch.DRAFT).any(axis=1)
            has_v = (kinds == PlanBatch.VERIFY).any(axis=1)
            for cat, mask in (("mixed", has_d & has_v), ("draft", has_d & ~has_v), ("verify", has_v & ~has_d)):
                if mask.any():
                    self.cat_ns[cat] += int(tn[mask].sum())
                    self.cat_passes[cat] += int(mask.sum())
        self.clock = ends.item(n - 1)
        self.seg_env = None if seg_step else env_ends.item(n - 1)
        self.fp.apply(sp, n, ends, accepted)
        self.running = -1
