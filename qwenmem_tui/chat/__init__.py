"""The chat core: turn kinds and hooks, tools, events, the model view and the ChatSession loop.

The core imports no feature (compaction, memory, recap plug in through `QueryHook`
and the model view in `chat/view.py`; tests/unit/test_import_contract.py checks it).
`ChatSession` lives in `qwenmem_tui.chat.session`; it is not re-exported here, so
that importing `chat.turns` for the hook protocol stays light.
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
