"""The JSON object in a model's answer, as side calls (extraction, the identity
judgement, /remember's filing) ask for one.

Models wrap JSON in code fences or a sentence of their own; the outermost ``{…}`` is
taken. What is not one JSON object is None: each caller then keeps its own rule.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def json_object(raw: str) -> dict[str, Any] | None:
    """The answer's JSON object, or None when there is none (or it is not an object)."""
    text = _FENCE.sub("", raw.strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        data = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
