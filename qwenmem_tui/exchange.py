"""What the daemon's OpenAI-compatible proxy asks of the feature that shapes the
conversations it relays (`Feature.exchange`, contract §9): the proxy names no feature,
the feature implements this protocol (memory's recall: `features/memory/exchange.py`).

Here, beside the base and below every face and feature, so both sides import it
without one importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from qwenmem_tui.llm.wire import Message


@dataclass(frozen=True)
class Shaped:
    """A request's messages as they go upstream, and what the exchange added to them."""

    messages: list[Message]
    ids: tuple[int, ...] = ()
    """The ids of the records the messages carry (the `X-Qwenmem-Memories` header)."""
    block: str = ""
    """The block the messages carry ("" when none): a face that speaks another format
    (the Responses API forwarded) places it in its own items."""


@runtime_checkable  # the daemon checks what a feature's `exchange` made
class Exchange(Protocol):
    """Shapes each relayed request, hears each completed reply, closes with the proxy."""

    @property
    def extract(self) -> bool:
        """Whether it wants the replies (`after_reply`): the proxy keeps a streamed
        reply's bytes only then."""
        ...

    async def shape(self, project: str, messages: list[Message]) -> Shaped:
        """The request's messages as they go upstream (never raises for the request)."""
        ...

    async def after_reply(self, project: str, messages: list[Message], reply: str) -> None:
        """A reply to `messages` completed with this text."""
        ...

    async def close(self) -> None:
        """The proxy closes: drop pending work, let started work finish."""
        ...
