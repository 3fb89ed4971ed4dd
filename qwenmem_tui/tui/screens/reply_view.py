"""One query on the chat screen: the chat loop's events turned into widgets.

`ChatScreen.stream_reply` runs a query through a `ReplyView`: the streamed reply
(Markdown), its tool calls, the stored items, the app's state and the status line.
Apart from the screen because it needs the chat loop's events and the reply's
Markdown, which the first frame does not: the startup worker's thread imports this
module (`QwenmemApp._startup_imports`) behind the drawn screen.
"""

from __future__ import annotations

from dataclasses import astuple
from typing import TYPE_CHECKING

from qwenmem_tui.chat.events import (
    AssistantDelta,
    ChatEvent,
    ChatEventHandler,
    ItemAdded,
    Notice,
    QueryFinished,
    ReasoningDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnStarted,
)
from qwenmem_tui.tui.terminal_text import terminal_safe
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.plain_items import ToolCallItem

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.storage.sessions import Item
    from qwenmem_tui.tui.host import Host
    from qwenmem_tui.tui.widgets.chat_log import ChatLog
    from qwenmem_tui.tui.widgets.status_line import StatusLine


class ReplyView(ChatEventHandler):
    """One query on screen: the streamed reply, its tool calls, the app's state."""

    def __init__(self, app: Host, session: ChatSession, log: ChatLog, status: StatusLine) -> None:
        self._app = app
        self._session = session
        self._status = status
        self._log = log
        self._reply: AssistantItem | None = None
        self._replied = False
        self._tool_items: dict[str, ToolCallItem] = {}
        self._error_shown = False

    async def handle(self, event: ChatEvent) -> None:
        # The model streams reasoning (never shown) until its first other event.
        self._status.thinking = isinstance(event, ReasoningDelta)
        self._status.streaming = False  # until the event is the reply's text
        await super().handle(event)

    async def _end_reply(self) -> None:
        if self._reply is not None:
            await self._reply.end_stream()
        self._reply = None

    async def assistant_delta(self, event: AssistantDelta) -> None:
        if self._reply is None:
            self._reply = AssistantItem(clock=self._app.clock)
            self._replied = True
            await self._log.add(self._reply)
        self._reply.append(event.text)
        self._status.streaming = True

    async def tool_call_started(self, event: ToolCallStarted) -> None:
        await self._end_reply()
        self._app.state = "running_tool"
        item = ToolCallItem(event.call.name, event.call.arguments)
        self._tool_items[event.call.id] = item
        await self._log.add(item)

    async def tool_call_finished(self, event: ToolCallFinished) -> None:
        found = self._tool_items.get(event.call.id)
        if found is not None:
            found.finish(event.result, is_error=event.is_error)
        self._app.state = "responding"

    async def turn_started(self, event: TurnStarted) -> None:
        await self._end_reply()
        self._app.state = "responding"

    async def item_added(self, event: ItemAdded) -> None:
        item = event.item
        self._error_shown = self._error_shown or item.type == "error"
        await self._show_item(item)
        self._status.title = self._session.info.title
        if item.type == "assistant":
            self._status.tokens = astuple(self._session.usage_total())
            await self._end_reply()

    async def _show_item(self, item: Item) -> None:
        reply = self._reply
        if item.type == "assistant":
            if reply is None:
                # Nothing was streamed (e.g. a reply that came in one piece).
                widget = self._app.widget_for_item(item)
                if widget is not None:
                    await self._log.add(widget)
            else:
                reply.link(item)  # the streamed widget now shows the stored reply
                if item.meta.get("interrupted"):
                    await reply.mark_interrupted()
        elif item.type != "tool":  # tool results arrive as ToolCallFinished
            widget = self._app.widget_for_item(item)
            if widget is not None:
                await self._log.add(widget)

    async def notice(self, event: Notice) -> None:
        self._app.notify(terminal_safe(event.text), severity=_severity(event.level))

    async def query_finished(self, event: QueryFinished) -> None:
        outcome = event.outcome
        failed = outcome.status in ("error", "context_limit")
        if failed and outcome.error and not self._error_shown:
            self._app.show_error(outcome.error)

    async def cancelled(self) -> None:
        """The query was cancelled. The session has already yielded its cleanup (the
        partial reply stored as interrupted, open tool calls answered); say so when
        nothing on screen does."""
        if self._reply is not None:
            await self._reply.mark_interrupted()
        if not self._replied and not self._tool_items:
            self._app.show_info("Cancelled.")

    async def close(self) -> None:
        self._status.thinking = False
        await self._end_reply()


def _severity(level: str) -> SeverityLevel:
    return "warning" if level == "warning" else "error" if level == "error" else "information"
