"""`sync` with auto k planned many cycles ahead, for an executor that advances a fixed batch of
decode requests through many passes at once (the simulator's fast path: `Sync.fast_plan`).

The batch's k is chosen at each cycle's start. The first cycle's k is the one `targets` gave on
the pass the executor asked; each later one is asked of the policy on a copy of its estimator
(`Sync.shadow`) moved by the cycles before it (their keyed outcomes), as the step path would ask on
that cycle's first pass; the executor replays those looks (`Sync.look`) between the outcomes. The
plan ends before a cycle of 0 drafts (asked again there: its plain passes are `zero_run`'s), at
the first finish, or after ROUNDS cycles.
"""

from __future__ import annotations

import numpy as np

I64 = np.int64
ROUNDS = 16  # cycles planned ahead at most


def sync_cycles(pol, ahead, K: int, max_passes: int):
    t = ahead.t
    run = np.array(ahead.running, dtype=I64)
    r = len(run)
    runl = run.tolist()
    out, com, ctx, d = t.output[run].tolist(), t.committed[run].tolist(), t.ctx[run].tolist(), t.drafted[run].tolist()
    md, n = ahead.max_draft, max_passes
    runs = ahead.prefix_table()
    vps, vjs, dvs, accs = [], [], [], []
    idle, looks = [], []
    cols = list(range(r))
    shadow = None
    s = 0  # the cycle's first pass (every request's)
    for rnd in range(ROUNDS):
        # one reaches the target: all verify (after the fewest passes of drafting); a request
        # that drafted all its output can use sits the rest out (Batcher._sync_verify)
        caps = [o - c - 1 - x for o, c, x in zip(out, com, d)]
        w0 = max(caps)  # every request capped after w0 passes
        kk = min(K, md)
        for x, cap in zip(d, caps):
            w = kk - x
            if w < w0 and (w <= 0 or cap >= w):
                w0 = w
        if w0 < 0:
            w0 = 0
        v = s + w0  # the batch's verification
        xs = []
        for j, cap in enumerate(caps):
            if cap < w0:  # drafts cap passes, then sits out until the batch verifies
                if s + cap < n:
                    idle.append((j, s + cap, v, d[j] + cap))
                xs.append(d[j] + cap)
            else:
                xs.append(d[j] + w0)
        if v >= n:  # drafting through the last pass
            break
        spec = [j for j in cols if xs[j] > 0]
        a = [0] * r
        if spec:
            for j, y in zip(spec, ahead.accepted(runs, spec, [xs[j] for j in spec], runl, com, ctx, out)):
                a[j] = y
        fin = False
        for j in cols:
            vps.append(v)
            vjs.append(j)
            dvs.append(xs[j])
            accs.append(a[j])
            com[j] += a[j] + 1
            ctx[j] += a[j] + 1
            if com[j] >= out[j]:
                fin = True
        n = v + 1
        if fin or rnd + 1 == ROUNDS or not spec:
            break
        # the next cycle's k, asked as on its first pass (after this cycle's outcomes)
        if shadow is None:
            shadow = pol.shadow(runl)
        sj = run[spec] if len(spec) < r else run
        shadow.update(sj, np.array([xs[j] for j in spec], I64), np.array([a[j] for j in spec], I64))
        committed = np.array(com, I64)
        view = ahead.view(run, np.array(ctx, I64), committed, np.array(out, I64) - committed, np.zeros(r, I64),
                          t.last_entropy[run], t.sum_entropy[run], r)
        K = pol.choose_ahead(view, shadow)
        if K == 0:  # asked again there (zero_run's plain passes follow)
            break
        looks.append((n, committed, K))
        s = n
        n = max_passes
        d = [0] * r
    return ahead.synchronous(n, vps, vjs, dvs, accs, K, idle, looks)
