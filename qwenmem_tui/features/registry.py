"""THE feature registry: every feature of qwenmem, one line each, in build order.

A feature is handed what an earlier one left in the session's `SessionWiring` (memory
before compaction); hooks run in `hook_rank` order whatever the order here. The TUI's
extensions (in this order: /help, the palette) and the daemon's routes come from the
same entries (`Feature.tui`, `Feature.routes`). To add a feature: a package under `features/` with its
`feature.py`, and its line here.
"""

from __future__ import annotations

from qwenmem_tui import sections
from qwenmem_tui.features import feature
from qwenmem_tui.features.compaction import feature as compaction
from qwenmem_tui.features.export import feature as export
from qwenmem_tui.features.instructions import feature as instructions
from qwenmem_tui.features.mcp import feature as mcp
from qwenmem_tui.features.memory import feature as memory
from qwenmem_tui.features.model import feature as model
from qwenmem_tui.features.recap import feature as recap
from qwenmem_tui.features.titles import feature as titles

FEATURES: tuple[feature.AnyFeature, ...] = (
    memory.FEATURE,
    compaction.FEATURE,
    recap.FEATURE,
    mcp.FEATURE,
    instructions.FEATURE,
    model.FEATURE,
    export.FEATURE,
    titles.FEATURE,
)



def settings_sections() -> tuple[object, ...]:
    """The registered features' settings sections (read from `FEATURES` at each call)."""
    from qwenmem_tui.config import SettingsSection  # pydantic: asked when the config is

    return tuple(
        feature.load_face(f.settings, SettingsSection) if isinstance(f.settings, str) else f.settings
        for f in FEATURES
        if f.settings is not None
    )


# The config is composed from the features registered here: their tables are validated
# and read like the core's (`config.settings_model`).
sections.register_sections(settings_sections)


def item_kind(name: str) -> feature.ItemKind | None:
    """The registered kind of display item `name` (None: a core item, or no feature
    that runs here stores it)."""
    return next((kind for f in FEATURES for kind in f.items if kind.name == name), None)
