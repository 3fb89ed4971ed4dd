"""How features show in the app: slash commands, item widgets, key bindings.

What a feature *does* to a session — its hooks, tools, prefetch and extractor — is
its registration's (`features/<name>/feature.py`), assembled the same for every face.
A TUI extension only presents a feature: it lives in `tui/features/<name>/`, the
registration offers it (`Feature.tui`), each `ExtensionFactory` names the core
features it presents, the app assembles those once, and the factory gets the result
(`AppContext.features`, `AppContext.state(KEY)`) to build its commands and widgets
on. `default_extensions` (`tui/default_extensions.py`) is the list the settings turn on.

An extension talks to the app through the host interface (`tui/host.py`), never to
the app class: its commands and callbacks get a `Host`. A long-running command
(/compact, /recap) declares its `BusyState` and runs under `host.busy(state, progress)`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from textual.binding import Binding, BindingType

from qwenmem_tui.config import Settings
from qwenmem_tui.features.feature import FeatureKey
from qwenmem_tui.paths import Paths
from qwenmem_tui.tui.host import BusyState, Host, SlashCommand
from qwenmem_tui.tui.widgets.plain_items import ItemWidgetFactory

if TYPE_CHECKING:
    # Types only: features loads the memory stack (numpy/FAISS), the client and the
    # storage the chat loop; the app imports them in its startup worker, after the
    # first frame.
    from qwenmem_tui.features.assembly import SessionFeatures
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.storage.database import Database
    from qwenmem_tui.storage.sessions import SessionStore


T = TypeVar("T")

@dataclass(frozen=True)
class AppContext:
    """What the app has opened and assembled; handed to every extension factory."""

    settings: Settings
    paths: Paths
    project_root: Path
    project: str  # project_id(project_root): the key sessions and memories use
    db: Database
    store: SessionStore
    llm: LLMClient
    clock: Callable[[], float]
    features: SessionFeatures
    """The app's one set of hooks and tools (they follow the session on screen)."""
    states: Mapping[str, object] = field(default_factory=dict)
    """Each running feature's state for the runtime's life, by name (memory's
    `MemoryAccess`, opening in the background; MCP's servers, starting)."""
    prompt_parts: Mapping[str, object] = field(default_factory=dict)
    """What each feature added to the system prompt (the instruction files)."""

    def prompt_part(self, key: FeatureKey[T]) -> T | None:
        """What feature `key` added to the system prompt, typed by its key."""
        return cast("T | None", self.prompt_parts.get(key.name))

    def state(self, key: FeatureKey[T]) -> T | None:
        """A feature's state (None when it does not run), typed by its `FeatureKey`."""
        return cast("T | None", self.states.get(key.name))


@dataclass
class Extension:
    """One feature's contributions to the face. Every field is optional."""

    name: str
    commands: Sequence[SlashCommand] = ()
    item_widgets: Mapping[str, ItemWidgetFactory] = field(default_factory=dict)
    busy_states: Mapping[str, BusyState] = field(default_factory=dict)
    """The states its commands run in (`host.busy(name, progress)`), by name."""
    bindings: Sequence[Binding] = ()
    """App-level keys, e.g. ``Binding("ctrl+p", "command('pin')", "Pin", id="chat.pin")``:
    ``command(name)`` runs a slash command; the id lets users remap the key ([keys],
    once `keymap.binding_ids` lists it). Not priority: they join through `App.bind`."""
    help_keys: Sequence[tuple[str, str]] = ()
    """(key, description) /help lists besides the bindings: keys of widgets that only
    have them while focused (a receipt's list)."""
    on_ready: Callable[[Host], Awaitable[None] | None] | None = None
    """Called once the chat screen is up (attach TUI controllers, watch reactives)."""
    on_session_opened: Callable[[Host, bool], Awaitable[None] | None] | None = None
    """Called after `on_ready` each time a session is shown (startup, /resume); the
    bool says whether it was resumed rather than created."""
    close: Callable[[], Awaitable[None]] | None = None
    """Called when the app shuts down, after the chat session is closed."""
    css_paths: Sequence[Path] = ()
    """The stylesheets its screens name in `CSS_PATH`: the app reads them at startup,
    since Textual reads a screen's on its first push, then reparses every source and
    restyles every widget in the app while the user waits for that screen."""


@dataclass(frozen=True)
class ExtensionFactory:
    """One TUI feature: the core features it presents and how to build its face.

    The app assembles the union of its factories' `features`, then calls each factory
    (once, at startup, after the database and the LLM client are open). A plain
    ``async def build(context) -> Extension`` is accepted too: it presents no feature.
    """

    name: str
    build: Callable[[AppContext], Awaitable[Extension]]
    features: Collection[str] = frozenset()
    always: bool = False
    """Shown whatever the settings (the assembly opens its features only as far as
    they are configured: /mcp without a server says how to add one)."""
    keys: Callable[[], Iterable[BindingType]] | None = None
    """The bindings its extension and its screens declare, ids and all, so `[keys]` may
    name them (`keymap.binding_ids`); called only when `[keys]` has entries, so it may
    import its screens then."""

    async def __call__(self, context: AppContext) -> Extension:
        return await self.build(context)


def busy_notice(command: str) -> str:
    """What a command that needs the app idle answers while something runs."""
    return f"Cannot run /{command} while another operation is in progress."
