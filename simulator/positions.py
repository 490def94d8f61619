"""Acceptance by draft position: a run that keeps every verification's outcome.

The fast path draws outcomes ahead (keyed draws it may not use) and applies whole segments at
once, so it keeps totals, not each verification's (drafted, accepted). On the step path every
acceptance draw is a real verification, so a recording wrapper around the acceptance model sees
exactly the run's verifications; the step path gives the same results as the fast path (tests
check it), only slower. Used for vLLM's `num_accepted_tokens_per_pos` and the reports' acceptance
by draft position. Not for `oracle`, which reads the acceptance model itself: its look-ups would be
counted as verifications.
"""

from __future__ import annotations

import numpy as np

from spsim.errors import SpsimError


class PositionRecorder:
    """An acceptance model that counts, per verification with drafts, how far it accepted."""

    def __init__(self, inner, max_draft: int):
        self.inner = inner
        self.drafted = np.zeros(max_draft + 2, np.int64)  # verifications that held > i drafts
        self.accepted = np.zeros(max_draft + 2, np.int64)  # ... whose draft i was accepted
        self.verifications = 0

    def begin(self, rid, prompt_tokens, output_tokens):
        self.inner.begin(rid, prompt_tokens, output_tokens)

    def end(self, rid):
        self.inner.end(rid)

    def draft_entropy(self, *a):
        return self.inner.draft_entropy(*a)

    def verify(self, rid, out_pos, drafted, context, budget, method):
        acc = self.inner.verify(rid, out_pos, drafted, context, budget, method)
        d, a = np.asarray(drafted, np.int64), np.asarray(acc, np.int64)
        top = len(self.drafted)
        self.drafted += np.bincount(np.minimum(d, top), minlength=top + 1)[::-1].cumsum()[::-1][1:]
        self.accepted += np.bincount(np.minimum(a, top), minlength=top + 1)[::-1].cumsum()[::-1][1:]
        self.verifications += int((d > 0).sum())
        return acc

    def __getattr__(self, name):  # anything else the model offers (presets' metadata)
        return getattr(self.inner, name)

    def per_position(self) -> list[int]:
        """num_accepted_tokens_per_pos, up to the last position any verification reached."""
        n = int(np.count_nonzero(self.drafted))
        return self.accepted[:n].tolist()

    def drafted_per_position(self) -> list[int]:
        return self.drafted[: int(np.count_nonzero(self.drafted))].tolist()


def simulate_with_positions(trace, cfg, progress=None, draft_sample: int = 0):
    """`simulate` on the step path with every verification's outcome kept: the summary gains
    `num_accepted_tokens_per_pos` and `num_drafted_per_pos` (verifications that held draft i),
    whose ratio is the acceptance rate of draft position i."""
    from spsim.build import build_acceptance
    from spsim.metrics import vllm_spec_counters
    from spsim.policies.registry import parse_policy

    from .engine import simulate

    if parse_policy(cfg.policy).cls.oracle:
        raise SpsimError(f"acceptance by draft position is not recorded for {cfg.policy!r}: it reads the "
                         "acceptance model itself, so its look-ups are not verifications")
    rec = PositionRecorder(build_acceptance(cfg), cfg.max_draft)
    res = simulate(trace, cfg.with_(fast=False), acceptance=rec, progress=progress, draft_sample=draft_sample)
    s = res.summary
    s.update(vllm_spec_counters(s["num_drafts"], s["num_draft_tokens"], s["num_accepted_tokens"], rec.per_position()))
    s["num_drafted_per_pos"] = rec.drafted_per_position()
    return res
