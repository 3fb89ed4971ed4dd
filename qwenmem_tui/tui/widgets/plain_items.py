"""The conversation's plain item widgets: messages, tool calls and notes, no Markdown.

Thin views over text, no I/O. Everything from the model or a tool goes through
`terminal_safe` and is rendered as `Content`, never parsed as console markup, so a
reply cannot inject styles or escape sequences. Kept apart from the assistant reply
(`items.AssistantItem`, Markdown): the chat screen draws its first frame with these
alone, and Markdown (markdown-it, Pygments, Rich's Markdown: ~80 ms) loads after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Self

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Collapsible, Static

from qwenmem_tui.text import format_tool_call as format_call
from qwenmem_tui.tui.terminal_text import terminal_safe

if TYPE_CHECKING:
    from qwenmem_tui.storage.sessions import Item

TOOL_RESULT_MAX_LINES = 40
USER_MESSAGE_MAX_LINES = 200
USER_MESSAGE_MAX_CHARS = 20_000
"""A pasted log or file is shown as its beginning: every redraw of a message wraps all
its text again (a 1 MB paste took 45 ms a frame); the whole of it is sent and stored."""
PIN_LABEL = "📌 pinned"


class MessageView(Widget):
    """A user or assistant message in the log, linked to the stored item it shows.

    The item id is what a pin (or any other intent about this message) acts on; a
    streamed reply has none until the session has stored it. `pinned` mirrors the
    item's `meta["pinned"]`, so the user sees what compaction will carry verbatim.
    """

    pinned: reactive[bool] = reactive(False)
    item_id: int | None = None

    def link(self, item: Item) -> Self:
        """Show `item`'s state (its pin) and act on it from now on."""
        self.item_id = item.id
        self.pinned = bool(item.meta.get("pinned"))
        return self

    def watch_pinned(self, pinned: bool) -> None:
        self.set_class(pinned, "-pinned")
        self.border_title = PIN_LABEL if pinned else None


class UserItem(MessageView, Static):
    """A message the user sent."""

    def __init__(self, text: str) -> None:
        shown = clip_lines(
            terminal_safe(text), USER_MESSAGE_MAX_LINES, max_chars=USER_MESSAGE_MAX_CHARS
        )
        super().__init__(Content(shown))


class InterruptedMark(Static):
    """The dim tag under a reply that was cut short."""

    def __init__(self) -> None:
        super().__init__(Content("⏹ interrupted"))


def format_tool_call(name: str, arguments: str) -> str:
    """`name(key=value, …)` on one line, shortened (`text.format_tool_call`), safe
    for the terminal."""
    return terminal_safe(format_call(name, arguments))


def clip_lines(text: str, max_lines: int, *, max_chars: int | None = None) -> str:
    """The first lines of `text` (at most `max_lines`, `max_chars` in all), then a line
    saying how much more there is."""
    lines = text.splitlines() or [""]
    budget = max_chars if max_chars is not None else len(text)
    shown: list[str] = []
    for line in lines[:max_lines]:
        if len(line) > budget:
            shown.append(line[:budget] + "…")
            break
        shown.append(line)
        budget -= len(line)
    hidden = len(lines) - len(shown)
    if hidden:
        shown.append(f"… {hidden:,} more lines")
    return "\n".join(shown)


def clip_tool_result(result: str) -> str:
    """The first lines of a result; a tool can return tens of kilobytes."""
    return clip_lines(terminal_safe(result), TOOL_RESULT_MAX_LINES)


class ToolCallItem(Collapsible):
    """A tool call: name and arguments as the title, the result inside (collapsed)."""

    def __init__(self, name: str, arguments: str) -> None:
        self._call = format_tool_call(name, arguments)
        self._result = Static(Content("running…"), classes="tool-result")
        # Collapsible's title is typed str but accepts Content (a literal title).
        title = self._heading("…")
        super().__init__(self._result, title=title, collapsed=True)  # type: ignore[arg-type]
        self.add_class("-running")

    def _heading(self, status: str) -> Content:
        # Collapsible parses str titles as markup; Content is literal.
        return Content.assemble((status, "bold"), " ", self._call)

    def finish(self, result: str, *, is_error: bool) -> None:
        """Show the result (or the error) and the final status."""
        self.remove_class("-running")
        self.set_class(is_error, "-error")
        self._result.update(Content(clip_tool_result(result)))
        self.title = self._heading("✗" if is_error else "✓")  # type: ignore[assignment]


class InfoItem(Static):
    """A note from qwenmem itself (command output, hints)."""

    def __init__(self, text: str) -> None:
        super().__init__(Content(terminal_safe(text)))


class ErrorItem(Static):
    """One line saying what went wrong; never a traceback."""

    def __init__(self, text: str) -> None:
        line = " ".join(terminal_safe(text).split())
        super().__init__(Content.assemble(("✗ ", "bold"), line))


class DimItem(Static):
    """A dimmed line for display items without a dedicated widget."""

    def __init__(self, text: str, label: str = "") -> None:
        body = terminal_safe(text)
        super().__init__(Content.assemble((label, "bold"), body) if label else Content(body))


ItemWidgetFactory = Callable[["Item"], Widget | None]
"""Builds the widget for a stored display item; None shows nothing."""
