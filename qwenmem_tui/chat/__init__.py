"""The chat core: turn kinds and hooks, tools, events, and the ChatSession loop.

`ChatSession` lives in `qwenmem_tui.chat.session`; it is not re-exported here so
that modules the session itself imports (compaction) can import `chat.turns`
without a cycle.
"""

from qwenmem_tui.chat.tools import Tool, ToolContext, ToolError, ToolRegistry, ToolResult, builtin_tools
from qwenmem_tui.chat.turns import BaseQueryHook, QueryHook, QueryOutcome, TurnKind

__all__ = [
    "BaseQueryHook",
    "QueryHook",
    "QueryOutcome",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "TurnKind",
    "builtin_tools",
]
