"""Numbers as a report's tables print them: never in exponent notation (a TTFT p99 read
`1.297e+04`), thousands separated, a few significant digits below 1,000."""

from __future__ import annotations


def readable(v, digits: int = 4) -> str:
    """`12,970` for 12970.4, `25.37` for 25.3712 (digits=4), `0.934`; ints and text as they are."""
    if isinstance(v, bool) or not isinstance(v, float):
        return str(v)
    if v != v:
        return "-"
    if abs(v) >= 999.5:  # 999.96 would print as "1e+03" in .3g
        return f"{v:,.0f}"
    if abs(v) < 1e-4:  # below any figure a report shows (ms, req/s, rates)
        return "0"
    return f"{v:,.{digits}g}"
