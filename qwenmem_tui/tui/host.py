"""What commands, extensions and the chat screen may ask of the app: the host interface.

They are written against this protocol, not against `QwenmemApp`: the app satisfies it
(`tui/app.py`), a test may hand them something smaller, and nothing but the app module
knows the app class — so no feature's face sits in an import cycle with it, and what
a feature may do to the app is written down here:

- read what is open: the session on screen, the store, the model, the clock;
- say something: a notice, an info or error line, a widget, a stored display item;
- open a screen, run work in a worker, or run work with a busy state (`busy`);
- show a status badge (`set_badge`), follow the app's focus and state (`watch`).

What one registers on the host lives here too, because the host's interface names it
and it names the host: a `SlashCommand` (its handler gets the `Host`) in the host's
`CommandTable`, and the `BusyState`s `busy` runs in. Parsing and the built-in commands
are `tui/commands.py`; how a feature contributes them, `tui/extensions.py`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload

if TYPE_CHECKING:
    from asyncio import Future

    from rich.console import RenderableType
    from textual.notifications import SeverityLevel
    from textual.screen import Screen, ScreenResultCallbackType
    from textual.widget import AwaitMount, Widget
    from textual.types import WatchCallbackType
    from textual.worker import Worker

    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features.assembly import SessionFeatures
    from qwenmem_tui.llm.wire import JSONObject
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.paths import Paths
    from qwenmem_tui.storage.sessions import Item, SessionStore


@dataclass(frozen=True)
class BusyState:
    """A state an extension's long-running command puts the app in (`host.busy`)."""

    label: str
    """What the status line says meanwhile, e.g. "compacting history…"."""
    stopped: str
    """What a message sent meanwhile stops, e.g. "the recap": it says "Stopped the
    recap: your message goes first." (side work yields to the user)."""


CommandHandler = Callable[["Host", str], Awaitable[None] | None]
"""Called with the app (as the host interface, below) and the text after the
command name (stripped, may be "")."""


@dataclass(frozen=True)
class SlashCommand:
    """One slash command as listed by /help and the suggestion dropdown."""

    name: str  # without the leading slash
    description: str
    handler: CommandHandler
    usage: str = ""  # argument hint shown after the name, e.g. "<text>"

    @property
    def signature(self) -> str:
        """`/name <usage>` as shown to the user."""
        return f"/{self.name} {self.usage}".rstrip()

    async def run(self, app: Host, args: str) -> None:
        """Run the handler, awaiting it when it is a coroutine function."""
        result = self.handler(app, args)
        if inspect.isawaitable(result):
            await result


class CommandTable:
    """Registered commands by name; registering a name again replaces it."""

    def __init__(self, commands: tuple[SlashCommand, ...] = ()) -> None:
        self._commands: dict[str, SlashCommand] = {}
        for command in commands:
            self.register(command)

    def register(self, command: SlashCommand) -> None:
        """Add or replace a command."""
        self._commands[command.name] = command

    def get(self, name: str) -> SlashCommand | None:
        """The command called `name` (without slash), if any."""
        return self._commands.get(name)

    def matching(self, prefix: str) -> list[SlashCommand]:
        """Commands whose name starts with `prefix` (without slash), sorted by name."""
        return sorted(
            (command for name, command in self._commands.items() if name.startswith(prefix)),
            key=lambda command: command.name,
        )

    def __iter__(self) -> Iterator[SlashCommand]:
        return iter(sorted(self._commands.values(), key=lambda command: command.name))

    def __len__(self) -> int:
        return len(self._commands)


R = TypeVar("R")

class Host(Protocol):
    """The app as its commands, extensions and screens see it."""

    settings: Settings
    paths: Paths
    project_root: Path
    project: str
    clock: Callable[[], float]
    commands: CommandTable
    state: str
    """"starting", "idle", "responding", "running_tool", or an extension's busy state."""
    terminal_focused: bool
    busy_states: dict[str, BusyState]
    """The extensions' busy states by name (`busy`)."""
    help_keys: list[tuple[str, str]]
    """(key, description) /help lists besides the bindings (extensions' focused keys)."""

    @property
    def has_session(self) -> bool: ...
    @property
    def session(self) -> ChatSession: ...
    @property
    def store(self) -> SessionStore: ...
    @property
    def llm(self) -> LLMClient: ...
    @property
    def session_features(self) -> SessionFeatures: ...
    @property
    def model_label(self) -> str: ...
    @property
    def idle(self) -> bool: ...
    @property
    def selected_item_id(self) -> int | None: ...
    @property
    def screen(self) -> Screen[object]: ...
    @property
    def screen_stack(self) -> list[Screen[Any]]: ...  # Textual's own signature

    # -- saying something ------------------------------------------------------------
    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None: ...
    def show(self, widget: Widget) -> None: ...
    def show_info(self, text: str) -> None: ...
    def show_error(self, text: str) -> None: ...
    async def add_display_item(
        self, type: str, content: str, meta: JSONObject | None = None
    ) -> Item: ...
    def widget_for_item(self, item: Item) -> Widget | None: ...
    def item_changed(self, item: Item) -> None: ...
    def set_badge(self, name: str, text: str | None) -> None: ...
    def model_changed(self) -> None: ...
    def copy_to_clipboard(self, text: str) -> None: ...

    # -- doing something -------------------------------------------------------------
    def busy(self, state: str, progress: str) -> AbstractAsyncContextManager[None]: ...
    # Textual's own signatures: the app is checked against them, never cast.
    @overload
    def push_screen(
        self,
        screen: Screen[R] | str,
        callback: ScreenResultCallbackType[R] | None = None,
        wait_for_dismiss: Literal[False] = False,
        *,
        mode: str | None = None,
    ) -> AwaitMount: ...
    @overload
    def push_screen(
        self,
        screen: Screen[R] | str,
        callback: ScreenResultCallbackType[R] | None = None,
        wait_for_dismiss: Literal[True] = True,
        *,
        mode: str | None = None,
    ) -> Future[R]: ...
    # Overloaded as Textual's WorkType is a union: given an async method, a union
    # parameter leaves mypy no result type to infer.
    @overload
    def run_worker(
        self,
        work: Callable[[], Coroutine[Any, Any, R]],
        name: str | None = "",
        group: str = "default",
        description: str = "",
        exit_on_error: bool = True,
        start: bool = True,
        exclusive: bool = False,
        thread: bool = False,
    ) -> Worker[R]: ...
    @overload
    def run_worker(
        self,
        work: Awaitable[R],
        name: str | None = "",
        group: str = "default",
        description: str = "",
        exit_on_error: bool = True,
        start: bool = True,
        exclusive: bool = False,
        thread: bool = False,
    ) -> Worker[R]: ...
    @overload
    def run_worker(
        self,
        work: Callable[[], R],
        name: str | None = "",
        group: str = "default",
        description: str = "",
        exit_on_error: bool = True,
        start: bool = True,
        exclusive: bool = False,
        thread: bool = False,
    ) -> Worker[R]: ...
    # `obj` is a DOMNode to Textual; an extension watches the app itself, which this
    # protocol sees as a Host, so the one parameter no type here can name.
    def watch(
        self, obj: Any, attribute_name: str, callback: WatchCallbackType, init: bool = True
    ) -> None: ...
    def open_session(self, session_id: str) -> None: ...
    async def clear_conversation(self) -> None: ...
    def action_resume(self) -> None: ...
    def describe_keys(self) -> Iterator[tuple[str, str]]: ...
    def exit(
        self, result: None = None, return_code: int = 0, message: RenderableType | None = None
    ) -> None: ...

