"""Acceptance models: which drafted tokens the target model accepts (simulated world only).

`make_acceptance(spec, seed)` builds one from a spec (`fixed:p=0.8`, `position:p0=0.9,decay=0.02`,
a preset such as `sparsespec-llama8b:temperature=0.7`); `DEFAULT_ACCEPTANCE` is the simulator's
embedded default; `list_presets()` names the presets. See docs/acceptance.md.
"""

from .base import AcceptanceModel  # noqa: F401
from .latent import LatentAcceptance, LatentParams  # noqa: F401
from .presets import DEFAULT_ACCEPTANCE, list_presets, load_preset, make_acceptance  # noqa: F401
from .simple import FixedAcceptance, PositionAcceptance  # noqa: F401
