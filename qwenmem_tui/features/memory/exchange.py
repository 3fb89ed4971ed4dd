"""Memory for conversations qwenmem does not hold: requests proxied from other clients
(the OpenAI-compatible proxy of ``qwenmem serve``, contract §9).

A client of the proxy keeps its own history and re-sends all of it with every
request; qwenmem sees only requests. One *exchange* is what follows one user message:
the request that brought it (UserQuery) and the ones that re-send it with tool results
(ToolResult). They are recognised by the history up to and including that message.

Recall follows the API faces' prefetch rules (``memory/prefetch.py``): it starts when
the user message first arrives and its first request waits for it up to
``memory.api_wait_ms`` — a proxy has no typing phase in which recall could have been
warmed, and a reply without tool calls has no later point; a recall ready in time goes
in front of that user message, one that settles later goes after the tool results of
a later request of the same exchange, never between a tool call and its result. The client never sees the block, so every later request of the
exchange gets it again at the same place: the model's view stays the same across the
exchange (and the provider's prompt cache with it).

Extraction after a completed reply is the chat's too, off unless the daemon turns it
on: everything the client sent — its user messages too, which may be a pasted page or
another agent's words — is the client's content, not the words of the person qwenmem
serves (``Provenance.relayed``), so a fact from it is never an active global memory
(held), and a project fact is kept labelled as read from a file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qwenmem_tui.chat.view import content_text
from qwenmem_tui.exchange import Shaped
from qwenmem_tui.features.memory.extract import (
    ExtractionJob,
    MemoryExtractionHook,
    last_exchange,
)
from qwenmem_tui.features.memory.prefetch import (
    insert_after_tool_results,
    prepend_reminder,
)
from qwenmem_tui.llm.wire import Message
from qwenmem_tui.memory.provenance import Provenance

if TYPE_CHECKING:
    from qwenmem_tui.memory.recall import RecallResult
    from qwenmem_tui.memory.service import MemoryService
    from qwenmem_tui.llm.client import LLMClient

log = logging.getLogger("qwenmem.memory")

MAX_EXCHANGES = 512
"""Exchanges remembered at once (least recently used dropped): a client coming back
to an exchange after that many others gets a fresh recall, nothing worse."""
EXCHANGE_TTL_S = 3600.0
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


@dataclass
class _Exchange:
    recall: asyncio.Task[RecallResult | None]
    used_at: float
    block: str = ""
    ids: tuple[int, ...] = ()
    after_tool: str | None = None
    """None: the block leads the user message; else the tool_call_id whose run of
    results it follows."""
    delivered: bool = False


@dataclass
class ExchangeMemory:
    """Recall (and optional extraction) for proxied requests of every project: the
    proxy's `exchange.Exchange`."""

    service: Callable[[], Awaitable[MemoryService]]
    api_wait_ms: int = 1500
    """The most an exchange's first request waits for its recall (`memory.api_wait_ms`):
    a recall that is ready costs nothing; one past this bound goes after a later tool
    result of the exchange, if there is one."""
    llm: LLMClient | None = None
    """For extraction: None, or extraction off, writes nothing."""
    extract: bool = False
    clock: Callable[[], float] = time.monotonic
    _exchanges: OrderedDict[str, _Exchange] = field(default_factory=OrderedDict)
    _extractor: MemoryExtractionHook | None = None

    async def shape(self, project: str, messages: list[Message]) -> Shaped:
        """The request's messages with this exchange's memory block in its one place."""
        last_user = _last_user(messages)
        if last_user is None:
            return Shaped(messages)
        exchange = self._exchange(project, messages, last_user)
        if not exchange.delivered:
            await self._deliver(exchange, messages, last_user, self.api_wait_ms)
        if not exchange.block:
            return Shaped(messages)
        if exchange.after_tool is None:
            shaped = list(messages)
            shaped[last_user] = prepend_reminder(messages[last_user], exchange.block)
            return Shaped(shaped, exchange.ids, exchange.block)
        for index in range(last_user + 1, len(messages)):
            message = messages[index]
            if message.get("role") == "tool" and str(message.get("tool_call_id")) == exchange.after_tool:
                shaped = insert_after_tool_results(messages, index, exchange.block)
                return Shaped(shaped, exchange.ids, exchange.block)
        return Shaped(messages)  # the client dropped that result: nothing to anchor to

    def _exchange(self, project: str, messages: list[Message], last_user: int) -> _Exchange:
        now = self.clock()
        for key in [k for k, e in self._exchanges.items() if now - e.used_at > EXCHANGE_TTL_S]:
            self._forget(key)
        key = _exchange_key(project, messages[: last_user + 1])
        exchange = self._exchanges.get(key)
        if exchange is None:
            query = _REMINDER.sub("", content_text(messages[last_user].get("content"))).strip()
            task = asyncio.create_task(self._recall(project, query), name="proxy-recall")
            exchange = self._exchanges[key] = _Exchange(task, now)
            while len(self._exchanges) > MAX_EXCHANGES:
                self._forget(next(iter(self._exchanges)))
        else:
            self._exchanges.move_to_end(key)
            exchange.used_at = now
        return exchange

    def _forget(self, key: str) -> None:
        exchange = self._exchanges.pop(key)
        exchange.recall.cancel()

    async def _recall(self, project: str, query: str) -> RecallResult | None:
        if not query:
            return None
        try:
            service = await self.service()
            return await service.recall(query, project=project)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # no memory, never a failed request
            log.warning("[PROXY] recall failed, forwarding without memory: %s", exc)
            return None

    async def _deliver(
        self, exchange: _Exchange, messages: list[Message], last_user: int, wait_ms: int
    ) -> None:
        """Take the recall at the first safe point it is ready for (see the module doc)."""
        task = exchange.recall
        at_user = last_user == len(messages) - 1
        at_tools = not at_user and messages[-1].get("role") == "tool"
        if not (at_user or at_tools):
            return
        if at_user and not task.done() and wait_ms > 0:
            await asyncio.wait({task}, timeout=wait_ms / 1000)
        if not task.done():
            return
        exchange.delivered = True
        result = None if task.cancelled() else task.result()
        if result is None or not result.block:
            return
        exchange.block, exchange.ids = result.block, tuple(result.ids)
        exchange.after_tool = None if at_user else str(messages[-1].get("tool_call_id"))
        log.info(
            "[PROXY] memory delivered point=%s count=%d",
            "initial" if at_user else "tool_result",
            len(exchange.ids),
        )

    async def after_reply(self, project: str, messages: list[Message], reply: str) -> None:
        """A reply completed: extract its facts in the background, when turned on."""
        if not self.extract or self.llm is None or not reply.strip():
            return
        if self._extractor is None:
            self._extractor = MemoryExtractionHook(await self.service(), self.llm)
        view = [*messages, {"role": "assistant", "content": reply}]
        transcript, _ = last_exchange(view)
        if transcript:
            self._extractor.submit(ExtractionJob(project, transcript, Provenance.relayed(view)))

    async def close(self) -> None:
        """Drop pending recalls; let a running extraction finish."""
        for key in list(self._exchanges):
            self._forget(key)
        if self._extractor is not None:
            await self._extractor.drain()


def _last_user(messages: list[Message]) -> int | None:
    return next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"),
        None,
    )


def _exchange_key(project: str, history: list[Message]) -> str:
    """The exchange's identity: the project and the history up to its user message."""
    digest = hashlib.sha256(project.encode())
    for message in history:
        digest.update(
            json.dumps(
                [message.get("role"), message.get("content"), message.get("tool_call_id")],
                sort_keys=True,
                default=str,
            ).encode()
        )
    return digest.hexdigest()
