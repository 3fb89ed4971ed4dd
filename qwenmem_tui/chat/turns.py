"""Turn kinds and the hook points of a query.

A query is one user message and everything the model does to answer it: a UserQuery
turn, then one ToolResult turn after each batch of tool calls. Memory prefetch,
extraction and compaction plug in through `QueryHook` at fixed points:

1. `on_query_start` — the user message is committed, before any request.
2. `before_request` — before every request (once per turn) with the turn's kind;
   returns the messages actually sent. Must not block on slow work.
3. `on_query_end` — exactly once per started query, whatever the outcome
   (also after a cancellation, with the partial reply already committed).
4. `on_reset` — /clear, before the reset point is recorded.
5. `on_close` — the session is closing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qwenmem_tui.chat.session import ChatSession


class TurnKind(Enum):
    USER_QUERY = "user_query"
    TOOL_RESULT = "tool_result"


@dataclass
class QueryOutcome:
    status: str
    """"ok" | "cancelled" | "error" | "turn_cap" | "context_limit"."""
    error: str | None = None
    used_tools: bool = False
    tool_names: list[str] = field(default_factory=list)


class QueryHook(Protocol):
    async def on_query_start(self, session: ChatSession, text: str) -> None: ...

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[dict]
    ) -> list[dict]: ...

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None: ...

    async def on_reset(self, session: ChatSession) -> None: ...

    async def on_close(self, session: ChatSession) -> None: ...


class BaseQueryHook:
    """Does nothing at every point; subclass and override only what you need."""

    async def on_query_start(self, session: ChatSession, text: str) -> None:
        return None

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[dict]
    ) -> list[dict]:
        return messages

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
        return None

    async def on_reset(self, session: ChatSession) -> None:
        return None

    async def on_close(self, session: ChatSession) -> None:
        return None
