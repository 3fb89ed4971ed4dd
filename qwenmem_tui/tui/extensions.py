"""How features plug into the app: query hooks, tools, slash commands, item widgets.

Memory, compaction and the recap each contribute one `ExtensionFactory`, listed in
`default_extensions` — the one place the app's feature set is decided from settings.
A factory runs once at startup, after the database and the LLM client are open, and
returns an `Extension`; the app registers its parts and calls `on_ready` when the
chat screen shows a session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from textual.binding import Binding

from qwenmem_tui.chat.tools import Tool
from qwenmem_tui.chat.turns import QueryHook
from qwenmem_tui.config import Settings
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore
from qwenmem_tui.tui.commands import SlashCommand
from qwenmem_tui.tui.widgets.items import ItemWidgetFactory

if TYPE_CHECKING:
    from qwenmem_tui.tui.app import QwenmemApp


@dataclass(frozen=True)
class AppContext:
    """What the app has opened; handed to every extension factory."""

    settings: Settings
    paths: Paths
    project_root: Path
    project: str  # project_id(project_root): the key sessions and memories use
    db: Database
    store: SessionStore
    llm: LLMClient
    clock: Callable[[], float]


@dataclass
class Extension:
    """One feature's contributions. Every field is optional."""

    name: str
    hooks: Sequence[QueryHook] = ()
    tools: Sequence[Tool] = ()
    commands: Sequence[SlashCommand] = ()
    item_widgets: Mapping[str, ItemWidgetFactory] = field(default_factory=dict)
    bindings: Sequence[Binding] = ()
    """App-level keys, e.g. ``Binding("ctrl+p", "command('pin')", "Pin", id="chat.pin")``:
    ``command(name)`` runs a slash command; the id lets users remap the key ([keys])."""
    on_ready: Callable[[QwenmemApp], Awaitable[None] | None] | None = None
    """Called once the chat screen is up (attach TUI controllers, watch reactives)."""
    on_session_opened: Callable[[QwenmemApp, bool], Awaitable[None] | None] | None = None
    """Called after `on_ready` each time a session is shown (startup, /resume); the
    bool says whether it was resumed rather than created."""
    close: Callable[[], Awaitable[None]] | None = None
    """Called when the app shuts down, after the chat session is closed."""


ExtensionFactory = Callable[[AppContext], Awaitable[Extension]]


def default_extensions(settings: Settings) -> list[ExtensionFactory]:
    """The features this configuration turns on, in hook order."""
    # Imported here: the feature modules import this one for AppContext/Extension.
    from qwenmem_tui.tui.compaction_extension import compaction_extension
    from qwenmem_tui.tui.memory_extension import memory_extension
    from qwenmem_tui.tui.recap_controller import recap_extension

    factories: list[ExtensionFactory] = []
    if settings.compaction.enabled:
        # First: compacting rebuilds the request from the model view, so the memory
        # reminders prefetch adds must come after it (see tui/compaction_extension.py).
        factories.append(compaction_extension)
    if settings.memory.enabled:
        factories.append(memory_extension)
    factories.append(recap_extension)  # always: /recap works whatever the settings
    return factories
