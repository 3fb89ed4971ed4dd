"""The JSON the OpenAI-compatible wire carries, named once.

Messages, tool schemas and stream chunks travel as JSON objects: `json.loads` and the
SDK's `model_dump()` hand them over as `dict[str, Any]`, so the `Any` is the json
module's and the wire format's, not ours. The names say which JSON a value is.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JSONObject: TypeAlias = dict[str, Any]
"""A JSON object as `json.loads` returns it."""
Message: TypeAlias = JSONObject
"""One chat message as the API takes it: ``{"role": ..., "content": ...}`` and, for the
assistant's, ``tool_calls``; for a tool result, ``tool_call_id``."""
