"""Bounds on values read from a trace.

They lie far beyond any real trace, so what crosses them is a wrong unit or a corrupt row: an
error naming the field, instead of a length that wraps around in int64 or a clock no float resolves.
"""

MAX_TOKENS = 2**31 - 1  # prompt or output tokens per request: over 2,000x a 1M-token context window
MAX_TIME_S = 1e12  # |arrival time| in seconds (~31,700 years); float64 still resolves 0.2 ms there
MAX_BLOCK_ID = 2**63 - 1  # prefix block ids are int64
