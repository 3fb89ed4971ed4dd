"""The recap's registration: nothing per session (the recap is a side call the faces
make: the TUI's /recap and away recap, the daemon's recap route); its faces."""

from __future__ import annotations

from qwenmem_tui.features.feature import Feature, ItemKind

RECAP = "recap"
RECAP_ITEM = "away_recap"
"""The display item a recap is stored as (`※ recap: ...`)."""

FEATURE: Feature[object] = Feature(
    RECAP,
    settings="qwenmem_tui.features.recap.settings:RECAP_SETTINGS",
    tui="qwenmem_tui.tui.features.recap.controller:recap_extension",
    routes="qwenmem_tui.features.recap.routes:RECAP_ROUTES",
    items=(ItemKind(RECAP_ITEM, markdown="qwenmem_tui.features.recap.session_recap:recap_markdown"),),
    api=("session_recap",),  # the ACP agent's /recap
)
