"""Long-term memory in the app: the service, its hooks and tool, /memory /remember /forget.

The service opens in the background: loading (or rebuilding) the vector index must not
hold the first frame. Whatever needs it awaits it where waiting is harmless — recall in
the prefetch task (never awaited by the turn), the save_memory tool inside its own turn,
the commands in their workers. Extraction is the exception: it skips a turn that ends
before memory is up, because it is best effort and must never hold a turn open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from qwenmem_tui.chat.prefetch import MemoryPrefetchHook
from qwenmem_tui.chat.tools import Tool, ToolContext, ToolError
from qwenmem_tui.chat.turns import BaseQueryHook, QueryOutcome
from qwenmem_tui.memory.extract import MemoryExtractionHook
from qwenmem_tui.memory.model import Memory, WriteAction, WriteResult
from qwenmem_tui.memory.recall import RecallResult
from qwenmem_tui.memory.service import MemoryRejected, MemoryService
from qwenmem_tui.memory.tool import DESCRIPTION, PARAMETERS, SAVE_MEMORY, save_memory_tool
from qwenmem_tui.tui.commands import SlashCommand
from qwenmem_tui.tui.extensions import AppContext, Extension

if TYPE_CHECKING:
    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.tui.app import QwenmemApp

log = logging.getLogger("qwenmem.tui")

REBUILD_NOTICE_MIN = 500
"""Rebuilds of fewer vectors end before anyone could read a notice about them."""
CONFIRM_VALUE_CHARS = 80


class MemoryUnavailable(Exception):
    """The service could not be opened; ``str(e)`` is the one line the user sees."""


class MemoryFeature:
    """Owns the service for one app and hands it to hooks, tool, commands and screen."""

    def __init__(self, context: AppContext) -> None:
        self._context = context
        self._app: QwenmemApp | None = None
        self._pending_notices: list[tuple[str, str]] = []
        self._rebuilding: int | None = None  # vectors in a rebuild worth a notice
        self._extraction: MemoryExtractionHook | None = None
        self.prefetch = MemoryPrefetchHook(
            self._recall,
            initial_wait_ms=context.settings.memory.initial_wait_ms,
            record_delivery=self._record_delivery,
            record_recall=self._record_recall,
        )
        self._opening = asyncio.create_task(self._open(), name="memory-open")
        self._opening.add_done_callback(self._opened)

    @property
    def project(self) -> str:
        return self._context.project

    @property
    def clock(self) -> Callable[[], float]:
        return self._context.clock

    @property
    def extraction_hook(self) -> MemoryExtractionHook | None:
        """The extraction hook, once the service is open."""
        return self._extraction

    async def service(self) -> MemoryService:
        """The open service, once its index is loaded (raises MemoryUnavailable)."""
        try:
            # Shielded: a cancelled caller (Esc on a turn) must not cancel the opening.
            return await asyncio.shield(self._opening)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise MemoryUnavailable(f"Long-term memory is unavailable: {exc}") from exc

    # -- lifecycle ---------------------------------------------------------------------

    async def _open(self) -> MemoryService:
        context = self._context
        service = await MemoryService.open(
            context.settings,
            context.paths,
            llm=context.llm,
            clock=context.clock,
            progress=self._progress,
            # PostgreSQL store: server down at start, write retries, reconnects.
            on_notice=lambda text: self._notify(text, "warning"),
        )
        self._extraction = MemoryExtractionHook(
            service, context.llm, enabled=context.settings.memory.extraction
        )
        if self._rebuilding is not None:
            self._notify(f"Memory index rebuilt ({self._rebuilding} memories).")
        return service

    def _progress(self, done: int, total: int) -> None:
        if self._rebuilding is None and total >= REBUILD_NOTICE_MIN:
            self._rebuilding = total
            self._notify(f"Rebuilding the memory index ({total} memories)…")

    def _opened(self, task: asyncio.Task[MemoryService]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("[MEMORY] could not open the memory service: %s", exc, exc_info=exc)
            self._notify(f"Long-term memory is off: {exc}", "error")

    def _notify(self, text: str, severity: str = "information") -> None:
        if self._app is None:
            self._pending_notices.append((text, severity))
        else:
            self._app.notify(text, severity=severity)  # type: ignore[arg-type]

    def attach(self, app: QwenmemApp) -> None:
        """The chat screen is up: notices can show now."""
        self._app = app
        pending, self._pending_notices = self._pending_notices, []
        for text, severity in pending:
            self._notify(text, severity)

    async def close(self) -> None:
        """After the chat session closed (extraction already cancelled): close the store."""
        self._opening.cancel()  # still opening: MemoryService.open closes what it opened
        await asyncio.wait({self._opening})
        if self._opening.cancelled() or self._opening.exception() is not None:
            return
        service = self._opening.result()
        if self._extraction is not None:
            await self._extraction.drain()
        await service.close()

    # -- what the hooks and the tool call ----------------------------------------------

    async def _recall(
        self, text: str, excluded: frozenset[int], *, record: bool = True
    ) -> RecallResult:
        service = await self.service()
        return await service.recall(text, project=self.project, exclude=excluded, record=record)

    async def _record_delivery(self, point: str) -> None:
        await (await self.service()).record_delivery(point)

    async def _record_recall(self, result: RecallResult) -> None:
        await (await self.service()).record_recall(result)

    def save_memory(self) -> Tool:
        """save_memory as registered at startup; it waits for the service on first use."""
        tool: Tool | None = None

        async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
            nonlocal tool
            if tool is None:
                try:
                    tool = save_memory_tool(await self.service())
                except MemoryUnavailable as exc:
                    raise ToolError(str(exc)) from exc
            return await tool.handler(args, ctx)

        return Tool(name=SAVE_MEMORY, description=DESCRIPTION, parameters=PARAMETERS, handler=handler)

    def extraction(self) -> BaseQueryHook:
        return _ExtractionWhenReady(self)

    # -- commands ----------------------------------------------------------------------

    async def memory_command(self, app: QwenmemApp, args: str) -> None:
        """/memory: the Memory screen."""
        from qwenmem_tui.tui.screens.memory import MemoryScreen

        try:
            service = await self.service()
        except MemoryUnavailable as exc:
            app.show_error(str(exc))
            return
        await app.push_screen(MemoryScreen(service, self.project, self.clock))

    async def remember_command(self, app: QwenmemApp, args: str) -> None:
        """/remember <text>: the person's own words, stored with origin user."""
        if not args:
            app.show_info("Usage: /remember <text>, e.g. /remember I prefer tabs over spaces")
            return
        try:
            service = await self.service()
            result = await service.remember(args, project=self.project)
        except MemoryUnavailable as exc:
            app.show_error(str(exc))
            return
        except MemoryRejected as exc:
            app.show_error(f"Not remembered: {exc}.")
            return
        app.show_info(remember_confirmation(result))

    async def forget_command(self, app: QwenmemApp, args: str) -> None:
        """/forget <id>: delete one memory of this user (audited)."""
        if not args.isdigit():
            app.show_info("Usage: /forget <id> (the ids are on the /memory screen)")
            return
        memory_id = int(args)
        try:
            service = await self.service()
        except MemoryUnavailable as exc:
            app.show_error(str(exc))
            return
        found = await service.get(memory_id)
        forgotten = None
        if found is not None and found.user == service.user:
            forgotten = await service.forget(memory_id, reason="/forget")
        if forgotten is None:
            app.show_info(f"No memory with id {memory_id}")
        else:
            app.show_info(f"Forgot memory #{memory_id} ({_name(forgotten)}).")


class _ExtractionWhenReady(BaseQueryHook):
    """The extraction hook, once there is a service to write to."""

    def __init__(self, feature: MemoryFeature) -> None:
        self._feature = feature

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
        hook = self._feature.extraction_hook
        if hook is None:
            log.debug("[MEMORY_EXTRACT] skipped: memory is still opening")
            return
        await hook.on_query_end(session, outcome)

    async def extract_block(self, project: str, messages: list[dict[str, Any]]) -> None:
        """Compaction's hand-over (issue 6), found among the app's hooks by that method.

        Unlike a turn, it waits for the service: the block is about to be summarised
        away and will not come back. Raises MemoryUnavailable; compaction logs it.
        """
        await self._feature.service()
        hook = self._feature.extraction_hook
        if hook is not None:
            await hook.extract_block(project, messages)

    async def on_close(self, session: ChatSession) -> None:
        hook = self._feature.extraction_hook
        if hook is not None:
            await hook.on_close(session)


def _name(memory: Memory) -> str:
    return f"{memory.category}/{memory.key}"


def _clip(value: str) -> str:
    value = " ".join(value.split())
    return value if len(value) <= CONFIRM_VALUE_CHARS else value[: CONFIRM_VALUE_CHARS - 1] + "…"


def remember_confirmation(result: WriteResult) -> str:
    """The one line /remember answers with: where the note went, or why it is held."""
    memory = result.memory
    if result.action is WriteAction.QUARANTINED:
        return (
            f"Quarantined: {', '.join(memory.flags)} — #{memory.id} {_name(memory)} is held "
            "for review; approve it on /memory to use it."
        )
    # The id is what /forget takes: shown so undoing a note needs no trip to /memory.
    line = f"Remembered #{memory.id} {_name(memory)}: {_clip(memory.value)}"
    if result.action is WriteAction.SUPERSEDED:
        return f"{line} (replaces the previous value)"
    if result.action is WriteAction.DEDUPLICATED:
        return f"{line} (already saved as #{memory.id})"
    return line


async def memory_extension(context: AppContext) -> Extension:
    """Long-term memory: recall before requests, save_memory, extraction, the commands."""
    feature = MemoryFeature(context)
    return Extension(
        name="memory",
        hooks=(feature.prefetch, feature.extraction()),
        tools=(feature.save_memory(),),
        commands=(
            SlashCommand("memory", "Browse, approve and forget long-term memories", feature.memory_command),
            SlashCommand("remember", "Save a note to long-term memory", feature.remember_command, "<text>"),
            SlashCommand("forget", "Delete a memory by id", feature.forget_command, "<id>"),
        ),
        on_ready=feature.attach,
        close=feature.close,
    )
