"""A query's answer as an API face reports it: the reply text, the memories it used,
the tokens it cost.

The daemon's prompt route, its SSE stream and `qwenmem -p` fold the same chat events
into the same answer; the fold lives here once (not in the chat loop, which knows no
feature: the memory receipt is the memory feature's item).
"""

from __future__ import annotations

from qwenmem_tui.chat.events import (
    AssistantDelta,
    ChatEventHandler,
    ItemAdded,
    QueryFinished,
    TurnStarted,
)
from qwenmem_tui.features.memory.receipts import RECEIPT_ITEM, memories_json
from qwenmem_tui.llm.wire import JSONObject


class ReplyCollector(ChatEventHandler):
    """Folds chat events into the final reply: the text of every model turn of the
    query, in order — a reply that called a tool is its words before and after the
    call, not only the last turn's ("The tool returned 44 characters.")."""

    def __init__(self) -> None:
        self._turns: list[str] = []  # the text of each finished turn
        self._current: list[str] = []  # deltas of the turn streaming now
        self.status = "ok"
        self.error: str | None = None
        self.memories: list[JSONObject] = []  # the reply's receipt: what it used
        self._usage: dict[str, int] | None = None

    async def turn_started(self, event: TurnStarted) -> None:
        if self._current:
            self._turns.append("".join(self._current))
            self._current = []

    async def assistant_delta(self, event: AssistantDelta) -> None:
        self._current.append(event.text)

    async def item_added(self, event: ItemAdded) -> None:
        if event.item.type == RECEIPT_ITEM:
            self.memories = memories_json(event.item)
        elif event.item.type == "assistant":
            # The stored turn is the truth (deltas may have been cut or rewritten).
            self._current = []
            self._turns.append(event.item.content)
            self._add_usage(event.item.meta.get("usage"))

    async def query_finished(self, event: QueryFinished) -> None:
        self.status = event.outcome.status
        self.error = event.outcome.error

    def _add_usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        total = self._usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        total["prompt_tokens"] += prompt
        total["completion_tokens"] += completion
        total["total_tokens"] += prompt + completion
        self._usage = total

    @property
    def usage(self) -> dict[str, int] | None:
        """Tokens the endpoint counted for the query's requests, summed over its turns;
        None when it reported none."""
        return dict(self._usage) if self._usage is not None else None

    @property
    def text(self) -> str:
        parts = [*self._turns, "".join(self._current)]
        return "\n\n".join(part for part in parts if part.strip())
