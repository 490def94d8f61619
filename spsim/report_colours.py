"""One colour per policy (a plan: per configuration) across every plot of a report.

Plotly colours traces by their index within each figure, so the same policy came out blue in one
plot and red in the next (a box plot's TTFT and TPOT panels even gave it two). Reports give every
trace its colour from one `PolicyColours`, built once from the report's own list of policies.
Pass kinds (stacked GPU-time bars) are greys, which no policy gets, so a bar of a pass kind is never
read as a policy.
"""

from __future__ import annotations

# qualitative, no greys: D3's ten less its grey, then Dark24's darker hues less its near-black
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
           "#2e91e5", "#e15f99", "#1ca71c", "#fb0d0d", "#da16ff", "#b68100", "#750d86", "#eb663b", "#511cfb",
           "#00a08b", "#fb00d1", "#fc0080", "#b2828d", "#6c7c32", "#778aae", "#862a16", "#a777f1", "#620042",
           "#1616a7", "#da60ca", "#6c4516", "#0d2a63", "#af0038")
PASS_KINDS = {"prefill": "#333333", "mixed": "#6e6e6e", "draft": "#a3a3a3", "verify": "#c9c9c9"}  # verify: still darker than the plot's background


class PolicyColours:
    """name -> colour, in the order the report lists its policies; past len(PALETTE) names the
    colours repeat (a plan of more configurations than that)."""

    def __init__(self, names):
        self._of: dict[str, str] = {}
        for n in names:
            self._of.setdefault(n, PALETTE[len(self._of) % len(PALETTE)])

    def __call__(self, name: str) -> str:
        return self._of[name]

    def of(self, names) -> list[str]:
        return [self._of[n] for n in names]
