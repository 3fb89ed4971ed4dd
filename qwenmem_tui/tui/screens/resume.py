"""The /resume picker: this project's sessions, newest first, filtered as you type."""

from __future__ import annotations

from collections.abc import Callable

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from qwenmem_tui.storage.sessions import SessionInfo, SessionStore
from qwenmem_tui.tui.screens.picker import PickerScreen
from qwenmem_tui.tui.terminal_text import terminal_safe


def format_age(seconds: float) -> str:
    """ "just now", "5m ago", "3h ago", "2d ago", "7w ago"."""
    seconds = max(0.0, seconds)
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"


def session_matches(info: SessionInfo, query: str) -> bool:
    """Every word of `query` appears in the title or the id (case-insensitive)."""
    haystack = f"{info.title} {info.id}".lower()
    return all(word in haystack for word in query.lower().split())


class ResumeScreen(PickerScreen):
    """Pick a session; dismisses with its id, or None on Esc."""

    CSS_PATH = "resume.tcss"
    BINDINGS = [Binding("escape", "close", "Close", id="resume.close")]

    def __init__(
        self,
        store: SessionStore,
        project: str,
        clock: Callable[[], float],
        *,
        exclude: str | None = None,
    ) -> None:
        super().__init__()
        self._store = store
        self._project = project
        self._clock = clock
        self._exclude = exclude
        self._sessions: list[SessionInfo] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="picker"):
            yield Static(Content.assemble(("Resume a session", "bold")), id="picker-title")
            yield Input(placeholder="Type to filter", id="filter")
            yield OptionList(id="sessions")
            yield Static(Content("enter open · esc close"), id="picker-help")

    def on_mount(self) -> None:
        self.load_sessions()

    @work(exclusive=True, group="resume-list")
    async def load_sessions(self) -> None:
        """Read this project's sessions (empty ones and the current one left out)."""
        sessions = await self._store.list_sessions(self._project)
        self._sessions = [
            info for info in sessions if info.message_count > 0 and info.id != self._exclude
        ]
        self._show(self.query_one("#filter", Input).value)

    def _show(self, query: str) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        now = self._clock()
        matching = [info for info in self._sessions if session_matches(info, query)]
        if not matching:
            message = (
                "No sessions match." if self._sessions else "No earlier sessions in this project."
            )
            options.add_option(Option(Content(message), disabled=True))
            return
        options.add_options(Option(self._label(info, now), id=info.id) for info in matching)
        options.highlighted = 0

    def _label(self, info: SessionInfo, now: float) -> Content:
        title = " ".join(terminal_safe(info.title).split()) or "(untitled)"
        count = f"{info.message_count} message{'s' if info.message_count != 1 else ''}"
        return Content.assemble(
            title, "\n", (f"{format_age(now - info.updated_at)} · {count}", "dim")
        )

    @on(Input.Changed, "#filter")
    def _filter(self, event: Input.Changed) -> None:
        self._show(event.value)

    @on(Input.Submitted, "#filter")
    def _open_highlighted(self) -> None:
        chosen = self.highlighted_id()
        if chosen is not None:
            self.dismiss(chosen)
