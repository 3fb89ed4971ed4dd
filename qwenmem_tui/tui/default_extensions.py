"""The TUI extensions a configuration turns on — the app's feature list.

Its own module, not `tui/extensions.py`: the feature modules import that one for
`Extension` and `AppContext`, and this list imports them (no import cycle).
"""

from __future__ import annotations

from qwenmem_tui.config import Settings
from qwenmem_tui.features.assembly import enabled_features
from qwenmem_tui.features.compaction.tui.extension import compaction_extension
from qwenmem_tui.tui.extensions import ExtensionFactory
from qwenmem_tui.features.export.tui.extension import export_extension
from qwenmem_tui.features.instructions.tui.extension import instructions_extension
from qwenmem_tui.features.mcp.tui.extension import mcp_extension
from qwenmem_tui.features.memory.tui.extension import memory_extension
from qwenmem_tui.features.model.tui.extension import model_extension
from qwenmem_tui.features.recap.tui.controller import recap_extension
from qwenmem_tui.features.titles.tui.extension import titles_extension

EXTENSIONS: tuple[ExtensionFactory, ...] = (
    compaction_extension,
    memory_extension,
    recap_extension,
    mcp_extension,
    instructions_extension,
    model_extension,
    export_extension,
    titles_extension,
)
"""Every TUI extension, one line each (hook order is the assembly's, not this)."""


def default_extensions(settings: Settings) -> list[ExtensionFactory]:
    """The extensions whose features this configuration turns on, and those that are
    always there (/recap, /mcp saying how to add a server, /context, /model, /copy,
    /export)."""
    names = enabled_features(settings)
    return [factory for factory in EXTENSIONS if factory.always or frozenset(factory.features) <= names]
