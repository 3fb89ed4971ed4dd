"""A qwenmem conversation as ACP session updates: a running query's events as they
come (`ReplyUpdates`), and a stored session's items when a client loads it
(`replay`).

Both speak through one `Send` (the connection's `session_update` for one session), so
a live reply and its replay read the same in the client: text as agent message
chunks, each tool call a `tool_call` then a `tool_call_update` with its result, and
qwenmem's own lines (the memory receipt, a compaction, a recap, an error,
"⏹ interrupted") as plain text lines of the reply, as the TUI shows them under it.
A tool call's ACP id is the id of the reply that made it and the model's id, so ids
stay unique in a session even where a model reuses its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from acp import (
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_tool_call,
    update_user_message_text,
)
from acp.helpers import SessionUpdate
from acp.schema import ToolCallLocation, ToolCallStatus, ToolKind

from qwenmem_tui.chat.events import (
    AssistantDelta,
    ChatEventHandler,
    ItemAdded,
    Notice,
    ReasoningDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnStarted,
)
from qwenmem_tui.chat.view import COMPACTION_ITEM, content_text
from qwenmem_tui.features.memory.receipts import RECEIPT_ITEM, receipt_of
from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.text import format_tool_call

Send = Callable[[SessionUpdate], Awaitable[None]]
"""Sends one session update (an `acp.schema` update model) to the client."""

INTERRUPTED = "⏹ interrupted"
_KINDS: dict[str, ToolKind] = {"read_file": "read", "list_directory": "read"}
_NO_ID = "call"


def tool_call_id(reply: Item | None, call_id: str) -> str:
    """The ACP id of a call: its reply's row id and the model's id for it."""
    prefix = f"{reply.id}-" if reply is not None and reply.id is not None else ""
    return f"{prefix}{call_id or _NO_ID}"


def receipt_line(item: Item) -> str:
    """A receipt as one plain line: ``⌁ 2 memories: user/editor, project/tests``, then
    a line per memory the model saved (as the TUI's dim lines under a reply)."""
    receipt = receipt_of(item)
    lines = [w.line() for w in receipt.writes]
    if receipt.memories:
        names = ", ".join(m.name for m in receipt.memories)
        lines.insert(0, f"{receipt.lines()[0]}: {names}")
    return "\n".join(lines) or item.content


def item_line(item: Item) -> str | None:
    """The plain line a display item is in a conversation (None: not shown)."""
    if item.type == RECEIPT_ITEM:
        return receipt_line(item)
    if item.type == "away_recap":
        return f"※ recap: {item.content}"
    if item.type == COMPACTION_ITEM:
        return f"⟲ {item.content}"
    if item.type == "error":
        return f"✗ {item.content}"
    return item.content if item.content.strip() else None


def _arguments(arguments: str) -> object:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


def _locations(name: str, arguments: object, root: Path) -> list[ToolCallLocation] | None:
    """Where a file tool looks, as an absolute path the client can open."""
    path = arguments.get("path") if isinstance(arguments, dict) else None
    if name not in _KINDS or not isinstance(path, str) or not path:
        return None
    return [ToolCallLocation(path=str((root / path).resolve(strict=False)))]


class Lines:
    """A reply's text as Markdown paragraphs: qwenmem's own lines, and the text of each
    model turn after a tool call, start a paragraph of their own."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._sent = False  # some text went out: a new paragraph needs a blank line
        self._break = False  # the next text starts a paragraph

    def paragraph(self) -> None:
        """The next text starts a paragraph (a new model turn)."""
        self._break = self._sent

    async def text(self, text: str) -> None:
        if not text:
            return
        if self._break:
            text, self._break = "\n\n" + text, False
        self._sent = True
        await self._send(update_agent_message_text(text))

    async def line(self, text: str) -> None:
        self.paragraph()
        await self.text(text)
        self.paragraph()


class ToolCalls:
    """Tool calls as `tool_call` / `tool_call_update`, live and replayed alike."""

    def __init__(self, send: Send, root: Path) -> None:
        self._send = send
        self._root = root

    async def started(self, acp_id: str, name: str, arguments: str, status: ToolCallStatus) -> None:
        args = _arguments(arguments)
        await self._send(
            start_tool_call(
                acp_id,
                format_tool_call(name, arguments),
                kind=_KINDS.get(name, "other"),
                status=status,
                locations=_locations(name, args, self._root),
                raw_input=args,
            )
        )

    async def finished(self, acp_id: str, result: str, is_error: bool) -> None:
        await self._send(
            update_tool_call(
                acp_id,
                status="failed" if is_error else "completed",
                content=[tool_content(text_block(result))],
                raw_output=result,
            )
        )


class ReplyUpdates(ChatEventHandler):
    """A running query's events as session updates (the user's own message is the
    client's: it is not echoed)."""

    def __init__(self, send: Send, root: Path) -> None:
        self.lines = Lines(send)
        self.calls = ToolCalls(send, root)
        self.reply: Item | None = None  # the committed reply whose calls run now
        self.running: dict[str, str] = {}  # model call id -> ACP id, while it runs
        self._shown: dict[str, asyncio.Event] = {}  # ACP id -> its tool_call was sent

    async def sent(self, acp_id: str) -> None:
        """Wait until the `tool_call` of `acp_id` has gone out (events reach this
        handler after the loop emitted them: a permission request about a call must
        not overtake the call)."""
        await self._shown.setdefault(acp_id, asyncio.Event()).wait()

    async def turn_started(self, event: TurnStarted) -> None:
        self.lines.paragraph()

    async def assistant_delta(self, event: AssistantDelta) -> None:
        await self.lines.text(event.text)

    async def notice(self, event: Notice) -> None:
        """A hook's one-liner (a compaction that failed, memory unreachable): a line,
        as the TUI shows it in a toast."""
        await self.lines.line(f"⚠ {event.text}" if event.level in ("warning", "error") else event.text)

    async def reasoning_delta(self, event: ReasoningDelta) -> None:
        return None  # thoughts stay out of the reply (as the TUI folds them away)

    async def tool_call_started(self, event: ToolCallStarted) -> None:
        acp_id = self.running[event.call.id] = tool_call_id(self.reply, event.call.id)
        await self.calls.started(acp_id, event.call.name, event.call.arguments, "in_progress")
        self._shown.setdefault(acp_id, asyncio.Event()).set()

    async def tool_call_finished(self, event: ToolCallFinished) -> None:
        acp_id = self.running.pop(event.call.id, None) or tool_call_id(self.reply, event.call.id)
        await self.calls.finished(acp_id, event.result, event.is_error)

    async def item_added(self, event: ItemAdded) -> None:
        item = event.item
        if item.type == "assistant":
            self.reply = item
            if item.meta.get("interrupted"):
                await self.lines.line(INTERRUPTED)
        elif item.type not in ("user", "tool", "error"):  # an error is the answer's
            line = item_line(item)
            if line:
                await self.lines.line(line)


async def replay(items: Sequence[Item], send: Send, root: Path) -> None:
    """A stored session as the updates its live queries sent, the user's messages too
    (`session/load`: the client shows the conversation it resumes)."""
    lines = Lines(send)
    calls = ToolCalls(send, root)
    acp_ids: dict[str, str] = {}
    for item in items:
        message = item.message or {}
        if item.type == "user":
            await send(update_user_message_text(content_text(message.get("content", item.content))))
            lines = Lines(send)  # a new reply starts
        elif item.type == "assistant":
            lines.paragraph()
            await lines.text(content_text(message.get("content", item.content)))
            if item.meta.get("interrupted"):
                await lines.line(INTERRUPTED)
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                acp_id = acp_ids[str(call.get("id", ""))] = tool_call_id(item, str(call.get("id", "")))
                await calls.started(
                    acp_id, str(function.get("name", "tool")), str(function.get("arguments", "")), "pending"
                )
        elif item.type == "tool":
            call_id = str(message.get("tool_call_id", ""))
            acp_id = acp_ids.get(call_id) or tool_call_id(None, call_id)
            await calls.finished(acp_id, content_text(message.get("content", item.content)), bool(item.meta.get("is_error")))
        elif (line := item_line(item)) is not None:
            await lines.line(line)
