"""Turn kinds and the outcome of a query: the values the loop, its events and its
hooks share.

A query is one user message and everything the model does to answer it: a UserQuery
turn, then one ToolResult turn after each batch of tool calls. The hook points a
query passes are `QueryHook` in `chat/session.py`, beside the session they are
handed (a hook and the session name each other: one module, no import cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


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
