"""The chat core: turn kinds, tools, events, the model view and the ChatSession loop.

The core imports no feature (compaction, memory, recap plug in through `QueryHook`
and the model view in `chat/view.py`; tests/unit/test_import_contract.py checks it).
`ChatSession` and its hook protocol (`QueryHook`, `BaseQueryHook`) live in
`qwenmem_tui.chat.session`; they are not re-exported here, so that importing the
package for its tools or turn values stays light.
"""

from qwenmem_tui.chat.tools import (
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolResult,
    builtin_tools,
)
from qwenmem_tui.chat.turns import QueryOutcome, TurnKind

__all__ = [
    "QueryOutcome",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "TurnKind",
    "builtin_tools",
]
