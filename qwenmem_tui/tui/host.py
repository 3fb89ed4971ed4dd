"""What commands, extensions and the chat screen may ask of the app: the host interface.

They are written against this protocol, not against `QwenmemApp`: the app satisfies it
(`tui/app.py`), a test may hand them something smaller, and nothing but the app module
knows the app class — so no feature's face sits in an import cycle with it, and what
a feature may do to the app is written down here:

- read what is open: the session on screen, the store, the model, the clock;
- say something: a notice, an info or error line, a widget, a stored display item;
- open a screen, run work in a worker, or run work with a busy state (`busy`);
- show a status badge (`set_badge`), follow the app's focus and state (`watch`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.widget import Widget
    from textual.worker import Worker

    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features.assembly import SessionFeatures
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.paths import Paths
    from qwenmem_tui.storage.sessions import Item, SessionStore
    from qwenmem_tui.tui.commands import CommandTable
    from qwenmem_tui.tui.extensions import BusyState


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
    def screen(self) -> Screen[Any]: ...
    @property
    def screen_stack(self) -> list[Screen[Any]]: ...

    # -- saying something ------------------------------------------------------------
    def notify(self, message: str, *, severity: Any = "information", **options: Any) -> None: ...
    def show(self, widget: Widget) -> None: ...
    def show_info(self, text: str) -> None: ...
    def show_error(self, text: str) -> None: ...
    async def add_display_item(
        self, type: str, content: str, meta: dict[str, Any] | None = None
    ) -> Item: ...
    def widget_for_item(self, item: Item) -> Widget | None: ...
    def item_changed(self, item: Item) -> None: ...
    def set_badge(self, name: str, text: str | None) -> None: ...
    def model_changed(self) -> None: ...
    def copy_to_clipboard(self, text: str) -> None: ...

    # -- doing something -------------------------------------------------------------
    def busy(self, state: str, progress: str) -> AbstractAsyncContextManager[None]: ...
    def push_screen(self, screen: Any, callback: Any = None, wait_for_dismiss: bool = False) -> Any: ...
    def run_worker(self, work: Any, name: str | None = "", group: str = "default", **options: Any) -> Worker[Any]: ...
    def watch(self, obj: Any, attribute_name: str, callback: Callable[..., Any], init: bool = True) -> None: ...
    def open_session(self, session_id: str) -> None: ...
    async def clear_conversation(self) -> None: ...
    def action_resume(self) -> None: ...
    def describe_keys(self) -> Iterator[tuple[str, str]]: ...
    def exit(self, result: Any = None, return_code: int = 0, message: Any = None) -> None: ...

