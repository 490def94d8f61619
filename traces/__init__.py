"""Request traces: the canonical format, readers for public formats, generators and transforms."""

from .generate import PRESETS, arrivals, generate, preset  # noqa: F401
from .io import FORMATS, detect_format, read_trace, shipped, write_trace  # noqa: F401
from .lengths import length_dist  # noqa: F401
from .stats import stats  # noqa: F401
from .trace import SCHEMA_VERSION, Trace  # noqa: F401
from .transforms import clip_lengths, filter_lengths, first, merge, rescale_qps, sample, window  # noqa: F401
