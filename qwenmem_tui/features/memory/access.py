"""One face's memory service, open or opening, shared by all its chat sessions.

The TUI must not wait for a vector index before its first frame, so `MemoryAccess`
opens the service in the background (`start`); the daemon awaits it right away. What
needs the service waits for it where waiting is harmless: recall in the prefetch task
(never awaited by the turn), the save_memory tool inside its own turn, commands in their
workers. `close` lets extraction finish, then closes the service.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from qwenmem_tui.chat.tools import Tool, ToolContext, ToolError
from qwenmem_tui.config import Settings
from qwenmem_tui.features.memory.extract import MemoryExtractionHook
from qwenmem_tui.features.memory.prefetch import ProjectRecall
from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.features.memory.tool import (
    OnWrite,
    save_memory_tool,
    save_memory_tool_for,
)
from qwenmem_tui.paths import Paths

if TYPE_CHECKING:
    from qwenmem_tui.memory.model import Memory
    from qwenmem_tui.memory.recall import RecallResult
    from qwenmem_tui.llm.client import LLMClient

log = logging.getLogger("qwenmem.memory")


class MemoryUnavailable(Exception):
    """The memory service could not be opened; ``str(e)`` is the one line the user sees."""


class MemoryAccess:
    """The memory service of one face, open or opening, shared by its sessions' features.

    Whatever needs the service awaits :meth:`service` where waiting is harmless: recall
    in the prefetch task (never awaited by the turn), the save_memory tool inside its own
    turn, commands in their workers. Extraction of a finished turn is the exception: it
    skips a turn that ends before memory is up (best effort, never holds a turn open).
    """

    def __init__(
        self,
        settings: Settings,
        paths: Paths,
        *,
        llm: LLMClient | None,
        project: str,
        clock: Callable[[], float] = time.time,
        rows_first: bool = False,
        vectors_when_ready: bool = False,
    ) -> None:
        """``rows_first``: the service counts as open once its store is (rows only);
        the vectors (embedder, index) load at the first recall or write, or in the
        background from :meth:`warm_vectors` on. For a face that must answer at once
        (``qwenmem mcp``: list before the index is up; loading it meanwhile would hold
        the GIL for the first answer) and for the TUI (the first frame and keys come
        first; it warms them once its screen is up). ``vectors_when_ready``: a face that
        awaits :meth:`ready` (the daemon) has them loaded by then. ``llm`` None: no
        model (rule-only identity)."""
        self.settings = settings
        self.project = project
        self._paths = paths
        self._llm = llm
        self._clock = clock
        self._rows_first = rows_first
        self._vectors_when_ready = vectors_when_ready
        self._vectors: asyncio.Task[None] | None = None
        self.progress_listeners: list[Callable[[int, int], None]] = []
        """Called with (done, total) while the vector index is rebuilt at opening."""
        self.notice_listeners: list[Callable[[str], None]] = []
        """One-line notices of the store (PostgreSQL down at start, reconnects)."""
        self._opening: asyncio.Task[MemoryService] | None = None
        # Weak: a daemon session's features go when its chat is closed.
        self._extractions: weakref.WeakSet[MemoryExtractionHook] = weakref.WeakSet()
        self.project_recall = ProjectRecall(self.service, project)
        """This project's recall and live view, for the prefetch hook."""

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> asyncio.Task[MemoryService]:
        """Start opening the service in the background, once; the opening task (faces
        watch it to report a failure). Listeners must be added before."""
        if self._opening is None:
            self._opening = asyncio.create_task(self._open(), name="memory-open")
        return self._opening

    async def _open(self) -> MemoryService:
        service = await MemoryService.open(
            self.settings,
            self._paths,
            llm=self._llm,
            clock=self._clock,
            progress=self._progress,
            on_notice=self._notice,
            lazy=self._rows_first,
        )
        return service

    def warm_vectors(self) -> None:
        """Load the vectors in the background now, once (``rows_first``; the service
        must be open)."""
        service = self.opened
        if service is not None and self._vectors is None:
            self._vectors = asyncio.create_task(self._load_vectors(service), name="memory-vectors")

    @staticmethod
    async def _load_vectors(service: MemoryService) -> None:
        try:
            # numpy and FAISS import in a worker (~0.35 s): on the loop they would hold
            # every answer queued behind them.
            await asyncio.to_thread(importlib.import_module, "qwenmem_tui.memory.index")
            await service.load_vectors()
        except Exception as exc:  # the first recall or write tries again and reports it
            log.warning("[MEMORY] loading the vector index failed: %s", exc)
            return
        await service.warm_recall()

    def _progress(self, done: int, total: int) -> None:
        for listener in self.progress_listeners:
            listener(done, total)

    def _notice(self, text: str) -> None:
        for listener in self.notice_listeners:
            listener(text)

    def opening(self) -> bool:
        """Memory is still opening: the service, or (opened rows first) its vectors. A
        message sent meanwhile waits for its recall rather than going without: the rows
        alone recall nothing by meaning."""
        task = self._opening
        if task is None:
            return False
        if not task.done():
            return True
        if self._vectors is not None and not self._vectors.done():
            return True  # the vectors, then one recall that readies the embedder's first use
        service = self.opened
        return service is not None and not service.vectors.loaded

    @property
    def opened(self) -> MemoryService | None:
        """The service if it is open already, else None (never waits)."""
        task = self._opening
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    async def ready(self) -> MemoryService:
        """The service open, and its vectors too when this face asked for them then
        (``vectors_when_ready``); raises MemoryUnavailable."""
        service = await self.service()
        if self._vectors_when_ready:
            await service.load_vectors()
        return service

    async def service(self) -> MemoryService:
        """The open service, once its index is loaded (raises MemoryUnavailable)."""
        try:
            # Shielded: a cancelled caller (Esc on a turn) must not cancel the opening.
            return await asyncio.shield(self.start())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise MemoryUnavailable(f"Long-term memory is unavailable: {exc}") from exc

    async def close(self) -> None:
        """Let extraction finish, then close the service (a still-opening one is cancelled:
        MemoryService.open closes what it opened)."""
        task = self._opening
        if task is None:
            return
        task.cancel()
        await asyncio.wait({task})
        if self._vectors is not None:
            # Not cancelled: an index stopped half-loaded must not be saved as current.
            await asyncio.wait({self._vectors})
        service = self.opened
        if service is None:
            return
        await self.drain()
        await service.close()

    async def drain(self) -> None:
        """Wait until no extraction of any set of features runs or waits."""
        await asyncio.gather(*(extraction.drain() for extraction in list(self._extractions)))

    # -- what the features call ----------------------------------------------------------

    async def record_delivery(self, point: str) -> None:
        await (await self.service()).record_delivery(point)

    async def fetch(self, ids: Sequence[int]) -> list[Memory]:
        """Memories by id as they stand (for a reply's receipt), this user's only."""
        service = await self.service()
        return [m for m in await service.store.fetch(list(ids)) if m.user == service.user]

    async def record_recall(self, result: RecallResult) -> None:
        await (await self.service()).record_recall(result)

    async def record_tokens(self, tokens: int) -> None:
        await (await self.service()).record_tokens(tokens)

    def save_memory_tool(self, on_write: OnWrite | None = None) -> Tool:
        """save_memory as registered at startup; it waits for the service on first use.
        ``on_write`` is told of each write (the reply's receipt)."""
        tool: Tool | None = None

        async def handler(args: JSONObject, ctx: ToolContext) -> str:
            nonlocal tool
            if tool is None:
                try:
                    tool = save_memory_tool(await self.service(), on_write=on_write)
                except MemoryUnavailable as exc:
                    raise ToolError(str(exc)) from exc
            return await tool.handler(args, ctx)

        return save_memory_tool_for(handler)

    def extraction(self, *, enabled: bool) -> MemoryExtractionHook:
        """A new extraction hook for one set of features (drained by :meth:`close`)."""
        assert self._llm is not None, "extraction needs a model"
        extraction = MemoryExtractionHook(self, self._llm, enabled=enabled)
        self._extractions.add(extraction)
        return extraction
