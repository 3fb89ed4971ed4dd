"""The TUI extensions a configuration turns on — the app's feature list.

Its own module, not `tui/extensions.py`: the feature modules import that one for
`Extension` and `AppContext`, and this list imports them (no import cycle).
"""

from __future__ import annotations

from qwenmem_tui.config import Settings
from qwenmem_tui.features import COMPACTION, MEMORY, enabled_features
from qwenmem_tui.tui.compaction_extension import compaction_extension
from qwenmem_tui.tui.extensions import ExtensionFactory
from qwenmem_tui.tui.instructions_extension import instructions_extension
from qwenmem_tui.tui.mcp_extension import mcp_extension
from qwenmem_tui.tui.memory_extension import memory_extension
from qwenmem_tui.tui.recap_controller import recap_extension


def default_extensions(settings: Settings) -> list[ExtensionFactory]:
    """The features this configuration turns on (hook order is the assembly's)."""
    names = enabled_features(settings)
    factories: list[ExtensionFactory] = []
    if COMPACTION in names:
        factories.append(compaction_extension)
    if MEMORY in names:
        factories.append(memory_extension)
    factories.append(recap_extension)  # always: /recap works whatever the settings
    factories.append(mcp_extension)  # always: /mcp says how to add a server
    factories.append(instructions_extension)  # always: /context
    return factories
