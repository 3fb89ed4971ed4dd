"""Memory's registration: the service opened once per runtime, and per session the
prefetch hook (recall that never delays a reply), the receipt of what a reply used,
extraction after each turn and the save_memory tool. Its faces: the TUI extension
(/memory, /remember, receipts), the daemon's /memory routes and the tools of
`qwenmem mcp`.

Hook order inside the feature: prefetch, then receipts (it reads what this query's
requests carried), then extraction. Compaction, built after memory, is handed this
session's extractor through the wiring (`extract_block`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qwenmem_tui.features.feature import (
    Feature,
    FeatureContext,
    FeatureKey,
    ItemKind,
    SessionPart,
    SessionWiring,
)
from qwenmem_tui.features.memory.items import RECEIPT_ITEM

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features.memory.access import MemoryAccess
    from qwenmem_tui.features.memory.extract import MemoryExtractionHook
    from qwenmem_tui.features.memory.prefetch import MemoryPrefetchHook
    from qwenmem_tui.features.memory.receipts import MemoryReceiptHook

MEMORY = "memory"


@dataclass(frozen=True)
class MemorySession:
    """Memory's hooks in one session, for the faces (warm recall, receipts, tests)."""

    prefetch: MemoryPrefetchHook
    receipts: MemoryReceiptHook
    extraction: MemoryExtractionHook


MEMORY_STATE: FeatureKey[MemoryAccess] = FeatureKey(MEMORY)
"""Memory's state for the runtime's life: the service, open or opening."""
MEMORY_SESSION: FeatureKey[MemorySession] = FeatureKey(MEMORY)
"""Memory's part of one session: its hooks."""


def _open(context: FeatureContext) -> MemoryAccess:
    # The registration is read by every `qwenmem` command (its settings, its CLI): the
    # memory stack loads when a runtime opens it.
    from qwenmem_tui.features.memory.access import MemoryAccess

    return MemoryAccess(
        context.settings,
        context.paths,
        llm=context.llm,
        project=context.project,
        clock=context.clock,
        # Every face opens the rows first: the vectors (a model, an index of a store of
        # years) load behind the first frame or answer (`warm_vectors`, `_ready`) or at
        # the first recall or write, never before them.
        rows_first=True,
        vectors_when_ready=context.serves_chats,
    )


def _enabled(settings: Settings) -> bool:
    from qwenmem_tui.memory.settings import MEMORY_SETTINGS

    return MEMORY_SETTINGS.of(settings).enabled


def _session(memory: MemoryAccess, context: FeatureContext, wiring: SessionWiring) -> SessionPart:
    from qwenmem_tui.features.memory.prefetch import MemoryPrefetchHook
    from qwenmem_tui.features.memory.receipts import MemoryReceiptHook
    from qwenmem_tui.memory.settings import MEMORY_SETTINGS

    settings = MEMORY_SETTINGS.of(context.settings)
    extraction = memory.extraction(enabled=settings.extraction)
    prefetch = MemoryPrefetchHook(
        memory.project_recall.recall,
        initial_wait_ms=settings.initial_wait_ms,
        api_wait_ms=settings.api_wait_ms,
        record_delivery=memory.record_delivery,
        record_recall=memory.record_recall,
        live=memory.project_recall.live,
        opening=memory.opening,
    )
    # After prefetch: it reads what this query's requests carried.
    receipts = MemoryReceiptHook(prefetch, memory.fetch, memory.record_tokens)
    wiring.extract_block = extraction.extract_block
    return SessionPart(
        hooks=(prefetch, receipts, extraction),
        tools=(memory.save_memory_tool(on_write=receipts.record_write),),
        handle=MemorySession(prefetch, receipts, extraction),
        warm=prefetch.warm,
        drain=extraction.drain,
    )


async def _close(memory: MemoryAccess) -> None:
    await memory.close()


async def _ready(memory: MemoryAccess) -> None:
    """The service open (and, serving chats, its vectors loaded): a broken store fails
    the runtime's opening with its line."""
    from qwenmem_tui.features.memory.access import MemoryUnavailable
    from qwenmem_tui.reads import StartupError

    try:
        await memory.ready()
    except MemoryUnavailable as exc:
        raise StartupError(str(exc)) from exc


def _listen(memory: MemoryAccess, notice: Callable[[str], None]) -> None:
    memory.notice_listeners.append(notice)


def _embeds_on_the_endpoint(settings: Settings) -> bool:
    """The memory embedder is the configured endpoint's (`embedding = "openai"`, not
    the bundled local model, which a memory-only face never starts)."""
    import os

    from qwenmem_tui.memory.settings import MEMORY_SETTINGS
    from qwenmem_tui.llm.provider import resolve_provider

    embedding = MEMORY_SETTINGS.of(settings).embedding
    return embedding == "openai" and resolve_provider(settings, os.environ) != "local"


FEATURE = Feature(
    MEMORY,
    settings="qwenmem_tui.memory.settings:MEMORY_SETTINGS",
    hook_rank=10,
    enabled=_enabled,
    open=_open,
    session=_session,
    close=_close,
    ready=_ready,
    listen=_listen,
    without_chats=True,  # `qwenmem mcp` serves memory alone
    needs_model=_embeds_on_the_endpoint,
    tui="qwenmem_tui.tui.features.memory.extension:memory_extension",
    routes="qwenmem_tui.features.memory.routes:MEMORY_ROUTES",
    cli="qwenmem_tui.features.memory.cli:register",
    exchange="qwenmem_tui.features.memory.views:exchange_memory",
    items=(ItemKind(RECEIPT_ITEM, markdown="qwenmem_tui.features.memory.receipts:receipt_markdown"),),
    mcp="qwenmem_tui.features.memory.mcp_tools:register_tools",
    # access: MemoryAccess/MemoryUnavailable (MCP server, `qwenmem serve`); remote: the
    # MCP tools' ProjectMemory; exchange: the proxy's recall; receipts: the daemon's
    # "memories" field.
    # views: a project's memory and the proxy's, over an open runtime.
    api=("access", "remote", "exchange", "receipts", "views"),
)
