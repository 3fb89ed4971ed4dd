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
