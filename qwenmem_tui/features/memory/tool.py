"""The ``save_memory`` tool (contract §4): how the model writes a memory.

It goes through MemoryService.save like every other write — guard, TTL, supersede,
audit — with origin ``tool`` and its provenance: the tool outputs in the model's view
since the last /clear or compaction and the user's own messages, so a global fact or
an order the model took from a file it read is held instead of trusted.
"""

from __future__ import annotations

from collections.abc import Callable

from qwenmem_tui.chat.tools import Tool, ToolContext, ToolError, ToolHandler
from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.memory.guard import KEY_PATTERN, MAX_VALUE_CHARS
from qwenmem_tui.memory.model import Category, Origin, WriteAction, WriteRequest, WriteResult
from qwenmem_tui.memory.provenance import Provenance
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.writer import MemoryRejected
from qwenmem_tui.paths import project_id

SAVE_MEMORY = "save_memory"

DESCRIPTION = (
    "Save a durable fact to long-term memory so it is available in future conversations. "
    "Use it when the user states a lasting preference, correction, fact about themselves, "
    "fact about this project, or a useful reference. Saving a new value under an existing "
    "key replaces the old value. Do not save secrets or things only relevant right now. "
    "Categories: user (who the user is), feedback (how the user wants you to work), "
    "project (facts about this codebase), reference (where to find things)."
)

PARAMETERS: JSONObject = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": [c.value for c in Category]},
        "key": {
            "type": "string",
            "pattern": KEY_PATTERN.pattern,
            "description": "Short snake_case identifier, e.g. current_project, preferred_language.",
        },
        "value": {
            "type": "string",
            "maxLength": MAX_VALUE_CHARS,
            "description": "The fact, one or two sentences.",
        },
        "ttl_days": {
            "type": "integer",
            "minimum": 1,
            "description": "Optional lifetime in days; defaults by category.",
        },
    },
    "required": ["category", "key", "value"],
    "additionalProperties": False,
}

_ANSWERS = {
    WriteAction.CREATED: "Saved memory #{id} ({category}/{key}).",
    WriteAction.SUPERSEDED: "Saved memory #{id} ({category}/{key}); it replaces the previous value.",
    WriteAction.REFRESHED: "Memory #{id} ({category}/{key}) already had this value; refreshed it.",
    WriteAction.DEDUPLICATED: "The same fact is already saved as #{id} ({category}/{key}); refreshed it.",
    WriteAction.QUARANTINED: (
        "Memory #{id} was held for review (flags: {flags}) and will not be used until the user approves it."
    ),
}


OnWrite = Callable[[str, WriteResult], None]
"""Told of every write with the session it ran in (the reply's memory receipt)."""


def save_memory_tool(service: MemoryService, *, on_write: OnWrite | None = None) -> Tool:
    """The Tool to register: ``registry.register(save_memory_tool(service))``."""

    async def handler(args: JSONObject, ctx: ToolContext) -> str:
        ttl = args.get("ttl_days")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int)):
            raise ToolError("ttl_days must be an integer number of days.")
        try:
            result = await service.save(
                WriteRequest(
                    str(args["category"]),
                    str(args["key"]),
                    str(args["value"]),
                    origin=Origin.TOOL,
                    project=project_id(ctx.project_root),
                    ttl_days=ttl,
                    # What the model saw (recalled notes included) and what it has done since.
                    provenance=Provenance.from_messages(
                        [*ctx.request, *ctx.view()], ctx.turn_outputs, trusted_tools=ctx.trusted_tools
                    ),
                    reason=f"save_memory in session {ctx.session_id}",
                )
            )
        except MemoryRejected as exc:
            raise ToolError(f"Memory not saved: {exc}.") from exc
        if on_write is not None:
            on_write(ctx.session_id, result)
        m = result.memory
        return _ANSWERS[result.action].format(
            id=m.id, category=m.category, key=m.key, flags=", ".join(m.flags)
        )

    return save_memory_tool_for(handler)


def save_memory_tool_for(handler: ToolHandler) -> Tool:
    """The save_memory Tool around ``handler`` (`MemoryAccess` wraps one that waits for
    the service): one definition of its name, schema and trust."""
    return Tool(
        name=SAVE_MEMORY,
        description=DESCRIPTION,
        parameters=PARAMETERS,
        handler=handler,
        untrusted_output=False,  # its answer is a receipt of qwenmem's own
    )
