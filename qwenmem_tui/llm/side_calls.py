"""Side calls give way to the user's own requests on an endpoint that serves one at a time.

Extraction, recaps, compaction summaries and key naming are side calls: nobody is
waiting on them. The bundled llama.cpp server answers one request at a time, so a side
call still running when the user sends a message made the reply wait behind it (14-20 s
of "responding…" after every reply, measured). With a `SideCallGate` in force, a user
request cancels the side calls in flight, and side calls that start while a user request
runs wait for it to end: the side call is deferred, retried from scratch once the
endpoint is free, and given up (an `LLMError` of kind "yielded", which every side call
already treats as a failed call) after `MAX_DEFERRALS` tries.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from qwenmem_tui.llm.errors import LLMError

T = TypeVar("T")

MAX_DEFERRALS = 3
YIELDED_MESSAGE = "gave way to the conversation"


class SideCallGate:
    """Counts the user's requests in flight and the side calls they may cancel."""

    def __init__(self, *, enabled: bool = True, max_deferrals: int = MAX_DEFERRALS) -> None:
        self.enabled = enabled
        self.max_deferrals = max_deferrals
        self.deferrals = 0
        """Side calls cancelled or held back for a user request so far (for tests, logs)."""
        self._foreground = 0
        self._free = asyncio.Event()
        self._free.set()
        self._running: set[asyncio.Future[object]] = set()
        self._yielded: set[asyncio.Future[object]] = set()

    @property
    def busy(self) -> bool:
        """A user request is in flight."""
        return self._foreground > 0

    @asynccontextmanager
    async def foreground(self) -> AsyncIterator[None]:
        """Hold while a user request runs: side calls in flight are cancelled."""
        if not self.enabled:
            yield
            return
        self._foreground += 1
        self._free.clear()
        for call in list(self._running):
            if not call.done():
                self._yielded.add(call)
                call.cancel()
        try:
            yield
        finally:
            self._foreground -= 1
            if self._foreground == 0:
                self._free.set()

    async def side(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run a side call (made afresh by `make` on each try) once no user request runs."""
        if not self.enabled:
            return await make()
        for attempt in range(self.max_deferrals + 1):
            if not self._free.is_set():
                if attempt == 0:
                    self.deferrals += 1  # held back before it started
                await self._free.wait()
            call: asyncio.Future[T] = asyncio.ensure_future(make())
            self._running.add(call)  # type: ignore[arg-type]
            try:
                await asyncio.wait({call})
            except asyncio.CancelledError:
                call.cancel()  # our caller was cancelled: so is its call
                raise
            finally:
                self._running.discard(call)  # type: ignore[arg-type]
            if call in self._yielded:
                self._yielded.discard(call)  # type: ignore[arg-type]
                if call.cancelled():
                    self.deferrals += 1
                    continue  # a user request took the endpoint: try again after it
            return call.result()
        raise LLMError("yielded", YIELDED_MESSAGE)
