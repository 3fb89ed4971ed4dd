"""The conversation's item widgets: thin views over text, no I/O.

Everything from the model or a tool goes through `terminal_safe` and is rendered as
`Content` / Markdown, never parsed as console markup, so a reply cannot inject styles
or escape sequences.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Self

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, Static
from textual.widgets.markdown import MarkdownStream

from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.tui.terminal_text import terminal_safe

TOOL_RESULT_MAX_LINES = 40
TOOL_ARGS_MAX_CHARS = 80
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
        super().__init__(Content(terminal_safe(text)))


class AssistantItem(MessageView, Vertical):
    """An assistant reply: Markdown, streamed while it arrives, final when it is stored.

    Deltas are buffered and handed to `Markdown.get_stream()` in batches. Every append
    makes the screen lay out the whole reply again, and each yield to the event loop
    lets that layout run, so writing per token makes a long reply quadratic. The pump
    flushes at most every FLUSH_MIN seconds and backs off to three times as long as the
    loop was last blocked (capped at FLUSH_MAX), so layouts take about a quarter of the
    time at most and reading the stream keeps up.
    """

    FLUSH_MIN = 1 / 30
    FLUSH_MAX = 1.0

    def __init__(self, markdown: str = "", *, interrupted: bool = False) -> None:
        super().__init__()
        self._markdown = terminal_safe(markdown)
        self._interrupted = interrupted
        self._pending: list[str] = []
        self._stream_done = asyncio.Event()
        self._pump_task: asyncio.Task[None] | None = None

    def compose(self) -> ComposeResult:
        yield Markdown(self._markdown)
        if self._interrupted:
            yield InterruptedMark()

    def append(self, text: str) -> None:
        """Queue streamed text; it reaches the screen on the next flush."""
        self._pending.append(terminal_safe(text))
        if self._pump_task is None:
            self._pump_task = asyncio.create_task(self._pump())

    async def end_stream(self) -> None:
        """Flush what is left and stop streaming; safe to call more than once."""
        self._stream_done.set()
        if self._pump_task is not None:
            await self._pump_task

    async def _pump(self) -> None:
        stream = Markdown.get_stream(self.query_one(Markdown))
        loop = asyncio.get_running_loop()
        interval = self.FLUSH_MIN
        try:
            while self._pending or not self._stream_done.is_set():
                if self._pending:
                    text = "".join(self._pending)
                    self._pending.clear()
                    await stream.write(text)
                started = loop.time()
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._stream_done.wait(), interval)
                blocked = loop.time() - started - interval
                interval = min(self.FLUSH_MAX, max(self.FLUSH_MIN, 3 * blocked))
        finally:
            await _stop(stream)

    def on_unmount(self) -> None:
        if self._pump_task is not None:
            self._pump_task.cancel()

    async def mark_interrupted(self) -> None:
        """Show that the reply was cut short (Esc or an error mid-stream)."""
        if not self._interrupted:
            self._interrupted = True
            await self.mount(InterruptedMark())


async def _stop(stream: MarkdownStream) -> None:
    # MarkdownStream.stop() re-raises the CancelledError of its own task when that
    # task never got to run; only a cancellation of *this* task should propagate.
    try:
        await stream.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


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
        args = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in parsed.items()
        )
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


ItemWidgetFactory = Callable[[Item], Widget | None]
"""Builds the widget for a stored display item; None shows nothing."""


def _away_recap_line(item: Item) -> Widget:
    # Fallback until the recap widget registers itself for "away_recap".
    return DimItem(item.content, label="※ recap: ")


DEFAULT_ITEM_WIDGETS: Mapping[str, ItemWidgetFactory] = {
    "user": lambda item: UserItem(item.content).link(item),
    "assistant": lambda item: (
        AssistantItem(item.content, interrupted=bool(item.meta.get("interrupted"))).link(item)
        if item.content.strip() or item.meta.get("interrupted")
        else None  # an assistant turn that only called tools: its ToolCallItems say it all
    ),
    "info": lambda item: InfoItem(item.content),
    "error": lambda item: ErrorItem(item.content),
    "system": lambda item: None,
    "away_recap": _away_recap_line,
}
