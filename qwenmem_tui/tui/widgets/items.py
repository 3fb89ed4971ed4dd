"""The conversation's item widgets: thin views over text, no I/O.

Everything from the model or a tool goes through `terminal_safe` and is rendered as
`Content` / Markdown, never parsed as console markup, so a reply cannot inject styles
or escape sequences.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, Static
from textual.widgets.markdown import MarkdownStream

from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.tui.terminal_text import terminal_safe

TOOL_RESULT_MAX_LINES = 40
TOOL_ARGS_MAX_CHARS = 80


class UserItem(Static):
    """A message the user sent."""

    def __init__(self, text: str) -> None:
        super().__init__(Content(terminal_safe(text)))


class AssistantItem(Vertical):
    """An assistant reply: Markdown, streamed while it arrives, final when it is stored."""

    def __init__(self, markdown: str = "", *, interrupted: bool = False) -> None:
        super().__init__()
        self._markdown = terminal_safe(markdown)
        self._interrupted = interrupted

    def compose(self) -> ComposeResult:
        yield Markdown(self._markdown)
        if self._interrupted:
            yield InterruptedMark()

    def stream(self) -> MarkdownStream:
        """A stream that appends fragments to the Markdown; the caller must `stop()` it."""
        return Markdown.get_stream(self.query_one(Markdown))

    async def mark_interrupted(self) -> None:
        """Show that the reply was cut short (Esc or an error mid-stream)."""
        if not self._interrupted:
            self._interrupted = True
            await self.mount(InterruptedMark())


class InterruptedMark(Static):
    """The dim tag under a reply that was cut short."""

    def __init__(self) -> None:
        super().__init__(Content("⏹ interrupted"))


def format_tool_call(name: str, arguments: str) -> str:
    """`name(key=value, …)` on one line, shortened; raw text when it is not a JSON object."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        args = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in parsed.items())
    else:
        args = arguments
    args = " ".join(args.split())
    if len(args) > TOOL_ARGS_MAX_CHARS:
        args = args[: TOOL_ARGS_MAX_CHARS - 1] + "…"
    return terminal_safe(f"{name}({args})")


def clip_tool_result(result: str) -> str:
    """The first lines of a result; a tool can return tens of kilobytes."""
    lines = terminal_safe(result).splitlines() or [""]
    if len(lines) <= TOOL_RESULT_MAX_LINES:
        return "\n".join(lines)
    hidden = len(lines) - TOOL_RESULT_MAX_LINES
    return "\n".join(lines[:TOOL_RESULT_MAX_LINES] + [f"… {hidden} more lines"])


class ToolCallItem(Collapsible):
    """A tool call: name and arguments as the title, the result inside (collapsed)."""

    def __init__(self, name: str, arguments: str) -> None:
        self._call = format_tool_call(name, arguments)
        self._result = Static(Content("running…"), classes="tool-result")
        super().__init__(self._result, title=self._title("…"), collapsed=True)  # type: ignore[arg-type]
        self.add_class("-running")

    def _title(self, status: str) -> Content:
        # Collapsible parses str titles as markup; Content is literal.
        return Content.assemble((status, "bold"), " ", self._call)

    def finish(self, result: str, *, is_error: bool) -> None:
        """Show the result (or the error) and the final status."""
        self.remove_class("-running")
        self.set_class(is_error, "-error")
        self._result.update(Content(clip_tool_result(result)))
        self.title = self._title("✗" if is_error else "✓")  # type: ignore[assignment]


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


ItemWidgetFactory = Callable[[Item], Widget | None]
"""Builds the widget for a stored display item; None shows nothing."""


def _away_recap_line(item: Item) -> Widget:
    # Fallback until the recap widget registers itself for "away_recap".
    return DimItem(item.content, label="※ recap: ")


DEFAULT_ITEM_WIDGETS: Mapping[str, ItemWidgetFactory] = {
    "user": lambda item: UserItem(item.content),
    "assistant": lambda item: (
        AssistantItem(item.content, interrupted=bool(item.meta.get("interrupted")))
        if item.content.strip() or item.meta.get("interrupted")
        else None  # an assistant turn that only called tools: its ToolCallItems say it all
    ),
    "info": lambda item: InfoItem(item.content),
    "error": lambda item: ErrorItem(item.content),
    "system": lambda item: None,
    "away_recap": _away_recap_line,
}
