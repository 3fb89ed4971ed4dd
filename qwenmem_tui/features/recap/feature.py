"""The recap's registration: nothing per session (the recap is a side call the faces
make: the TUI's /recap and away recap, the daemon's recap route); its faces."""

from __future__ import annotations

from qwenmem_tui.features.feature import Feature
from qwenmem_tui.features.recap.settings import RECAP_SETTINGS

RECAP = "recap"

FEATURE = Feature(
    RECAP,
    settings=RECAP_SETTINGS,
    tui="qwenmem_tui.tui.features.recap.controller:recap_extension",
    routes="qwenmem_tui.features.recap.routes:RECAP_ROUTES",
)
