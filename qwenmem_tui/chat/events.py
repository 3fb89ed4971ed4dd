"""What `ChatSession.run_query` yields: plain facts about the query, in order.

A query yields `QueryStarted`, then per turn `TurnStarted`, deltas, and for tool
calls `ToolCallStarted`/`ToolCallFinished`; every committed row is announced by
`ItemAdded`. `QueryFinished` is always the last event.
"""

from __future__ import annotations

from dataclasses import dataclass

from qwenmem_tui.chat.turns import QueryOutcome, TurnKind
from qwenmem_tui.llm.client import ToolCall
from qwenmem_tui.storage.sessions import Item


@dataclass
class QueryStarted:
    text: str


@dataclass
class TurnStarted:
    kind: TurnKind
    index: int
    """0 for the UserQuery turn, then 1, 2, ... for each ToolResult turn."""


@dataclass
class AssistantDelta:
    text: str


@dataclass
class ReasoningDelta:
    text: str


@dataclass
class ToolCallStarted:
    call: ToolCall


@dataclass
class ToolCallFinished:
    call: ToolCall
    result: str
    is_error: bool


@dataclass
class ItemAdded:
    item: Item


@dataclass
class Notice:
    """A transient one-liner (e.g. a warning from a hook); not persisted."""

    text: str
    level: str = "info"


@dataclass
class QueryFinished:
    outcome: QueryOutcome


ChatEvent = (
    QueryStarted
    | TurnStarted
    | AssistantDelta
    | ReasoningDelta
    | ToolCallStarted
    | ToolCallFinished
    | ItemAdded
    | Notice
    | QueryFinished
)


class ChatEventHandler:
    """What a face does with each event of a query: one method per event, each a no-op.

    A face that presents a query (the TUI's reply view, the daemon's reply and its SSE
    stream) overrides the methods of the events it shows and feeds every event to
    `handle`; the walk over the event types lives here once, so a new event is one
    method here, and a face that ignores it needs no change.
    """

    async def handle(self, event: ChatEvent) -> None:
        """Call the method for `event`'s type."""
        await getattr(self, _HANDLERS[type(event)])(event)

    async def query_started(self, event: QueryStarted) -> None:
        pass

    async def turn_started(self, event: TurnStarted) -> None:
        pass

    async def assistant_delta(self, event: AssistantDelta) -> None:
        pass

    async def reasoning_delta(self, event: ReasoningDelta) -> None:
        pass

    async def tool_call_started(self, event: ToolCallStarted) -> None:
        pass

    async def tool_call_finished(self, event: ToolCallFinished) -> None:
        pass

    async def item_added(self, event: ItemAdded) -> None:
        pass

    async def notice(self, event: Notice) -> None:
        pass

    async def query_finished(self, event: QueryFinished) -> None:
        pass


_HANDLERS: dict[type, str] = {
    QueryStarted: "query_started",
    TurnStarted: "turn_started",
    AssistantDelta: "assistant_delta",
    ReasoningDelta: "reasoning_delta",
    ToolCallStarted: "tool_call_started",
    ToolCallFinished: "tool_call_finished",
    ItemAdded: "item_added",
    Notice: "notice",
    QueryFinished: "query_finished",
}
