"""How big a request is: a local token estimate, calibrated by what the provider counted.

Compaction decides by it when to summarise; the pins' budget is counted with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from qwenmem_tui.chat.view import content_text
from qwenmem_tui.llm.wire import Message
from qwenmem_tui.text import estimate_text_tokens

__all__ = ["TokenGauge", "estimate_text_tokens", "estimate_tokens"]


def estimate_tokens(messages: Sequence[Message]) -> int:
    """Local prompt-size estimate: content, tool calls and a few tokens per message."""
    total = 0
    for message in messages:
        total += 4 + estimate_text_tokens(content_text(message.get("content")))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += 8 + estimate_text_tokens(
                str(function.get("name", "")) + str(function.get("arguments", ""))
            )
    return total


@dataclass
class TokenGauge:
    """The local estimate, scaled by what the provider reported for an earlier request.

    Providers count with their own tokenizer and the template around each message; one
    observed (estimate, prompt_tokens) pair corrects most of the difference. Some
    streaming providers send no usage: then the raw estimate stands.
    """

    ratio: float = 1.0

    def observe(self, estimate: int, prompt_tokens: int) -> None:
        if estimate > 0 and prompt_tokens > 0:
            self.ratio = min(3.0, max(0.5, prompt_tokens / estimate))

    def count(self, messages: Sequence[Message]) -> int:
        return math.ceil(estimate_tokens(messages) * self.ratio)
