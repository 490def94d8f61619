"""Every serving setting, its default and its help text, written once.

`spsim replay`, `spsim compare` and the runtime's `spsim run` build their options from
`ServingConfig` (`spsim.cli_options.serving_options`), and the builder (`spsim.build`) wires a run
from it, so a default cannot drift between commands or worlds. A command may change a default
only by saying so where it declares its options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from .errors import SpsimError
from .plan import DRAFT_BUDGET


def opt(default, help: str, *flags: str, type=None):
    """A setting: its default, help text and command-line flags (none: not on the command line)."""
    return field(default=default, metadata={"help": help, "flags": flags, "type": type})


MAX_REPLICAS = 1024  # 100,000 replicas took 20 s to set up for a 20-request trace
# entropy's planner holds a table of every draft count up to --max-draft: 40 requests took 2 s at
# 64, 103 s and 4 GB at 1,000, and at 100,000 asked for 822 GiB; published draft lengths stay below 20
MAX_DRAFT = 64


@dataclass
class ServingConfig:
    policy: str = opt("aspire", "Policy spec, e.g. ar, sync:k=4, fixed-k:k=8, entropy, aspire, oracle.",
                      "--policy", "-p")
    seed: int = opt(0, "Seed of the acceptance draws (and of generated prompts on the runtime).", "--seed", "-s")
    model: str = opt("llama-3.1-8b", "Model shape (see `spsim models`).", "--model", "-m")
    gpu: str = opt("h200", "GPU (h200, h100-sxm, h100-nvl, a100-80gb).", "--gpu", "-g")
    tp: int = opt(1, "Tensor-parallel GPUs per replica.", "--tp")
    profile: str | None = opt(None, "Cost profile JSON (replaces --gpu pricing; measured for the run's --model).", "--profile")
    cost: str = opt("auto", "Cost model without --profile: auto (the calibrated profile spsim ships for this --gpu "
                    "and --model where there is one, else the analytic roofline) or roofline.", "--cost")
    acceptance: str | None = opt(None, "Acceptance model spec (default: the embedded preset).", "--acceptance", "-a")
    replicas: int = opt(1, "Model replicas behind the router.", "--replicas", "-r")
    router: str = opt("least-outstanding", "least-outstanding or round-robin.", "--router")
    qps: float | None = opt(None, "Rescale arrivals to this request rate.", "--qps")
    offline: bool = opt(False, "Everything arrives at t=0.", "--offline")
    concurrency: int | None = opt(None, "Closed loop: this many requests in flight.", "--concurrency", "-c")
    max_batch: int = opt(256, "Most requests running per replica.", "--max-batch")
    token_budget: int = opt(8192, "Most tokens per pass (chunked prefill fills the rest).", "--token-budget")
    page_size: int = opt(16, "KV page size in tokens.", "--page-size")
    draft_kv: str = opt("auto", "Draft-KV method: static, verify-quest, verify-attn, step-layer, step-quest, or "
                        "auto (the policy's own); old names verify-refresh, step-refresh.", "--draft-kv")
    draft_budget: int = opt(DRAFT_BUDGET, "Sparse draft KV budget in tokens (sink and recent pages included).",
                            "--draft-budget")
    max_draft: int = opt(16, "The batcher forces a verification at this many drafts (0..64).", "--max-draft")
    weight_dtype: str = opt("bf16", "bf16 or fp8.", "--weight-dtype")
    kv_dtype: str = opt("bf16", "bf16 or fp8.", "--kv-dtype")
    prefix_cache: bool = opt(True, "Share prompt blocks between requests (prefix cache).",
                             "--prefix-cache/--no-prefix-cache")
    kv_pages: int | None = opt(None, "KV pages per replica (default: what GPU memory holds).", "--kv-pages")
    reserve_frac: float | None = opt(None, "GPU memory kept back for activations and graphs (default: spsim.memory's).")
    slo_ttft_s: float = opt(10.0, "Goodput SLO on TTFT in seconds (where the trace has none).", "--slo-ttft")
    slo_tpot_s: float = opt(0.1, "Goodput SLO on TPOT in seconds (where the trace has none).", "--slo-tpot")
    slo: str | None = opt(None, "SLO, e.g. ttft_p90=2s,tpot_p99=60ms (run-level percentiles) or ttft=2s,tpot=60ms "
                          "(per request); sets goodput's bounds and reports whether the run meets it "
                          "(grammar: docs/planning.md).", "--slo")

    def with_(self, **kw):
        return replace(self, **kw)

    def validate(self) -> "ServingConfig":
        """Option ranges, so that bad values fail with the option's name, not deep inside a run."""
        for name in ("replicas", "max_batch", "token_budget", "draft_budget", "tp", "page_size"):
            if getattr(self, name) < 1:
                raise SpsimError(f"{flag(name)} must be >= 1 (got {getattr(self, name)})")
        if self.replicas > MAX_REPLICAS:
            raise SpsimError(f"--replicas must be <= {MAX_REPLICAS:,} (got {self.replicas:,}): one process simulates "
                             "every replica")
        if not 0 <= self.max_draft <= MAX_DRAFT:
            raise SpsimError(f"--max-draft must be in 0..{MAX_DRAFT} (got {self.max_draft:,}): a planner's tables "
                             "grow with it, and no published draft length comes near")
        if self.qps is not None and not (math.isfinite(self.qps) and self.qps > 0):
            raise SpsimError(f"--qps must be a finite number > 0 (got {self.qps})")
        if self.concurrency is not None and self.concurrency < 1:
            raise SpsimError(f"--concurrency must be >= 1 (got {self.concurrency})")
        if self.kv_pages is not None and self.kv_pages < 1:
            raise SpsimError(f"--kv-pages must be >= 1 (got {self.kv_pages})")
        if sum(bool(x) for x in (self.qps, self.offline, self.concurrency)) > 1:
            raise SpsimError("choose one of --qps, --offline, --concurrency")
        for name in ("slo_ttft_s", "slo_tpot_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise SpsimError(f"{flag(name)} must be a finite number > 0 (got {v})")
        if self.slo:  # one grammar (spsim/slo.py); its bounds become goodput's
            from .slo import resolve

            _, self.slo_ttft_s, self.slo_tpot_s = resolve(self.slo, self.slo_ttft_s, self.slo_tpot_s,
                                                          _DEFAULTS["slo_ttft_s"], _DEFAULTS["slo_tpot_s"])
        for name in ("kv_dtype", "weight_dtype"):
            if getattr(self, name) not in ("bf16", "fp8"):
                raise SpsimError(f"{flag(name)} must be bf16 or fp8 (got {getattr(self, name)!r})")
        if self.cost not in ("auto", "roofline"):
            raise SpsimError(f"--cost must be auto or roofline (got {self.cost!r})")
        if self.draft_kv != "auto":
            from .plan import DraftMethod

            DraftMethod.parse(self.draft_kv)
        return self

    @property
    def load(self) -> str:
        return ("offline" if self.offline else f"concurrency={self.concurrency}" if self.concurrency
                else f"qps={self.qps}" if self.qps else "trace")


_DEFAULTS = {f.name: f.default for f in fields(ServingConfig)}


def flag(name: str) -> str:
    """The long flag of a setting, for messages."""
    for f in fields(ServingConfig):
        if f.name == name and f.metadata["flags"]:
            return f.metadata["flags"][0].split("/")[0]
    return name
