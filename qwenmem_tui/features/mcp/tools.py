"""MCP tools as the model sees them: `mcp__SERVER__TOOL`, their schemas, their output.

An MCP tool's output is text someone else's program wrote: it goes back to the model
as a tool message, which the provenance guard counts as untrusted content in view,
like a file read_file returned (`Tool.untrusted_output`).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.text import one_line

if TYPE_CHECKING:
    from mcp.types import CallToolResult

PREFIX = "mcp__"
_INVALID = re.compile(r"[^A-Za-z0-9_-]")
NAME_LIMIT = 64
"""OpenAI's limit on a function name (`^[a-zA-Z0-9_-]{1,64}$`)."""


def tool_name(server: str, tool: str) -> str:
    """The model's name for `tool` of `server`: characters OpenAI refuses become `_`."""
    return (PREFIX + server + "__" + _INVALID.sub("_", tool))[:NAME_LIMIT]


def function_parameters(schema: JSONObject) -> JSONObject:
    """The tool's input schema as a function's parameters: always an object schema."""
    parameters = dict(schema)
    if parameters.get("type") != "object":
        parameters = {"type": "object", "properties": {}}
    parameters.setdefault("properties", {})
    return parameters


def result_text(result: CallToolResult) -> str:
    """What the model reads of a result: its text blocks, else its structured content.

    Images and audio are named, not sent (the chat is text); a resource's text is
    included, a link to one is named.
    """
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '')}]")
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource: {getattr(resource, 'uri', '')}]")
        elif kind == "resource_link":
            parts.append(f"[resource: {getattr(block, 'uri', '')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def describe_arguments(arguments: JSONObject, limit: int = 200) -> str:
    """The call's arguments on one line, for the permission prompt."""
    text = one_line(json.dumps(arguments, ensure_ascii=False)) if arguments else "(no arguments)"
    return text if len(text) <= limit else text[: limit - 1] + "…"
