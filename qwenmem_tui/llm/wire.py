"""The JSON the OpenAI-compatible wire carries, named once.

Messages, tool schemas and stream chunks travel as JSON objects: `json.loads` and the
SDK's `model_dump()` hand them over as `dict[str, Any]`, so the `Any` is the json
module's and the wire format's, not ours. The names say which JSON a value is.
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias

JSONObject: TypeAlias = dict[str, Any]
"""A JSON object as `json.loads` returns it."""
Message: TypeAlias = JSONObject
"""One chat message as the API takes it: ``{"role": ..., "content": ...}`` and, for the
assistant's, ``tool_calls``; for a tool result, ``tool_call_id``."""


def wire_json(payload: object) -> str:
    """``payload`` as JSON text that always encodes to UTF-8: as written, or with ASCII
    escapes when it holds a lone surrogate (``"\\ud800"`` is valid JSON a client may
    send and a model may echo, and no UTF-8 encoder takes it as a character)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload, separators=(",", ":"))
    return text
