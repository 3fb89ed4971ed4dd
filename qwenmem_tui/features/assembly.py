"""A session's features, assembled in one place for both faces (the TUI and the daemon).

The faces only decide *which* features run (the settings, or a test's selection) and
open what they own (the database, the LLM client); everything below is the same for
both, so a rule lives here once:

- **Order.** Compaction's hook comes first: when it compacts it throws the request
  away and rebuilds it from the (now folded) model view, so the memory reminder
  prefetch adds must come after it — and prefetch, re-applying earlier deliveries to
  the rebuilt request, frees the memories whose anchor was summarised away. Then
  memory prefetch, then memory extraction.
- **Explicit hand-over.** Before a block is summarised away its messages go to memory
  extraction: compaction is *given* the extractor (`extract=`) when it is built; no
  feature looks for another among the hooks.
- **The local model.** A model that cannot call tools is offered none — neither the
  built-in ones nor a feature's (`offers_tools`); its short system prompt is chosen by
  the runtime (`runtime.system_prompt_for`), with every other chat's.
- **The recall adapter.** Prefetch recalls through `MemoryAccess.recall`, scoped to
  the project, waiting for the service where waiting is harmless.

`Assembly.session()` builds a fresh set of hooks: the TUI calls it once (its hooks
follow the one session on screen, across /resume), the daemon once per session it
serves (sessions there run queries concurrently, and hooks keep per-session state).
The memory service is shared by every set: `MemoryAccess` opens it in the background
(the TUI must not wait for a vector index before its first frame) or is awaited right
away (the daemon).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwenmem_tui.features.memory.prefetch import MemoryPrefetchHook
from qwenmem_tui.chat.tools import Tool, ToolContext, ToolError, ToolRegistry, builtin_tools
from qwenmem_tui.chat.session import BaseQueryHook, QueryHook
from qwenmem_tui.chat.turns import QueryOutcome
from qwenmem_tui.features.compaction.hook import CompactionHook
from qwenmem_tui.config import Settings
from qwenmem_tui.features.mcp.servers import McpServers
from qwenmem_tui.features.memory.extract import MemoryExtractionHook
from qwenmem_tui.features.memory.receipts import MemoryReceiptHook
from qwenmem_tui.features.memory.service import MemoryService
from qwenmem_tui.features.memory.tool import OnWrite, save_memory_tool, save_memory_tool_for
from qwenmem_tui.paths import Paths
from qwenmem_tui.features.titles.hook import SessionTitleHook

if TYPE_CHECKING:
    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.llm.local_server import LocalChatDefaults
    from qwenmem_tui.features.memory.live import Freshness, LiveBlocks
    from qwenmem_tui.features.memory.model import Memory
    from qwenmem_tui.features.memory.recall import RecallResult

log = logging.getLogger("qwenmem.features")

COMPACTION = "compaction"
MEMORY = "memory"
MCP = "mcp"
TITLES = "titles"


def enabled_features(settings: Settings) -> frozenset[str]:
    """The features this configuration turns on."""
    return frozenset(feature.name for feature in FEATURES if feature.enabled(settings))


def offers_tools(model_defaults: LocalChatDefaults | None) -> bool:
    """Whether the model is offered tools: not the bundled local model that cannot call them."""
    return model_defaults is None or model_defaults.supports_tools


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
    ) -> None:
        """``rows_first``: the service counts as open once its store is (rows only);
        the vectors (embedder, index) load at the first recall or write, or in the
        background from :meth:`warm_vectors` on. For a face that must answer at once
        (``qwenmem mcp``: list before the index is up; loading it meanwhile would hold
        the GIL for the first answer). ``llm`` None: no model (rule-only identity)."""
        self.settings = settings
        self.project = project
        self._paths = paths
        self._llm = llm
        self._clock = clock
        self._rows_first = rows_first
        self._vectors: asyncio.Task[None] | None = None
        self.progress_listeners: list[Callable[[int, int], None]] = []
        """Called with (done, total) while the vector index is rebuilt at opening."""
        self.notice_listeners: list[Callable[[str], None]] = []
        """One-line notices of the store (PostgreSQL down at start, reconnects)."""
        self._opening: asyncio.Task[MemoryService] | None = None
        # Weak: a daemon session's features go when its chat is closed.
        self._extractions: weakref.WeakSet[MemoryExtraction] = weakref.WeakSet()

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
            await asyncio.to_thread(importlib.import_module, "qwenmem_tui.features.memory.index")
            await service.load_vectors()
        except Exception as exc:  # the first recall or write tries again and reports it
            log.warning("[MEMORY] loading the vector index failed: %s", exc)

    def _progress(self, done: int, total: int) -> None:
        for listener in self.progress_listeners:
            listener(done, total)

    def _notice(self, text: str) -> None:
        for listener in self.notice_listeners:
            listener(text)

    def opening(self) -> bool:
        """The service is being opened now (started, not finished)."""
        return self._opening is not None and not self._opening.done()

    @property
    def opened(self) -> MemoryService | None:
        """The service if it is open already, else None (never waits)."""
        task = self._opening
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

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

    async def recall(
        self, text: str, excluded: frozenset[int], *, record: bool = True
    ) -> RecallResult:
        """The recall MemoryPrefetchHook runs: this project's memories, minus `excluded`."""
        service = await self.service()
        return await service.recall_for(self.project)(text, excluded, record=record)

    async def live(
        self, groups: list[tuple[int, ...]], since: Freshness | None
    ) -> LiveBlocks | None:
        """Delivered memories as they stand now, for MemoryPrefetchHook (issue 14)."""
        service = await self.service()
        return await service.live(groups, since, project=self.project)

    async def record_delivery(self, point: str) -> None:
        await (await self.service()).record_delivery(point)

    async def fetch(self, ids: Sequence[int]) -> list[Memory]:
        """Memories by id as they stand (for a reply's receipt), this user's only."""
        service = await self.service()
        return [m for m in await service.store.fetch(list(ids)) if m.user == service.user]

    async def record_recall(self, result: RecallResult) -> None:
        await (await self.service()).record_recall(result)

    def save_memory_tool(self, on_write: OnWrite | None = None) -> Tool:
        """save_memory as registered at startup; it waits for the service on first use.
        ``on_write`` is told of each write (the reply's receipt)."""
        tool: Tool | None = None

        async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
            nonlocal tool
            if tool is None:
                try:
                    tool = save_memory_tool(await self.service(), on_write=on_write)
                except MemoryUnavailable as exc:
                    raise ToolError(str(exc)) from exc
            return await tool.handler(args, ctx)

        return save_memory_tool_for(handler)

    def extraction(self, *, enabled: bool) -> MemoryExtraction:
        """A new extraction hook for one set of features (drained by :meth:`close`)."""
        extraction = MemoryExtraction(self, self._llm, enabled=enabled)
        self._extractions.add(extraction)
        return extraction


class MemoryExtraction(BaseQueryHook):
    """Memory extraction after each turn, once there is a service to write to."""

    def __init__(self, memory: MemoryAccess, llm: LLMClient, *, enabled: bool) -> None:
        self._memory = memory
        self._llm = llm
        self._enabled = enabled
        self._hook: MemoryExtractionHook | None = None

    @property
    def hook(self) -> MemoryExtractionHook | None:
        """The extraction hook, once the service is open."""
        if self._hook is None:
            service = self._memory.opened
            if service is not None:
                self._hook = MemoryExtractionHook(service, self._llm, enabled=self._enabled)
        return self._hook

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
        hook = self.hook
        if hook is None:
            log.debug("[MEMORY_EXTRACT] skipped: memory is still opening")
            return
        await hook.on_query_end(session, outcome)

    async def extract_block(self, messages: list[dict[str, Any]]) -> None:
        """Compaction's hand-over: the facts of a block about to be summarised away.

        Unlike a turn, it waits for the service: the block will not come back. Raises
        MemoryUnavailable; compaction logs it.
        """
        await self._memory.service()
        hook = self.hook
        if hook is not None:
            await hook.extract_block(self._memory.project, messages)

    async def on_close(self, session: ChatSession) -> None:
        if self._hook is not None:
            await self._hook.on_close(session)

    async def drain(self) -> None:
        """Wait until no extraction runs or waits (shutdown, tests)."""
        if self._hook is not None:
            await self._hook.drain()


@dataclass(frozen=True)
class FeatureContext:
    """What a feature opens with, once per runtime."""

    settings: Settings
    paths: Paths
    llm: LLMClient | None
    """None only where no chat is served (`serves_chats`): memory alone opens there."""
    project_root: Path
    project: str  # project_id(project_root): the key sessions and memories use
    model_defaults: LocalChatDefaults | None = None
    clock: Callable[[], float] = time.time
    serves_chats: bool = True
    """False: a face that serves memory, not chats (`qwenmem mcp`): memory counts as
    open with its rows, its vectors load at the first recall or write."""

    @property
    def offers_tools(self) -> bool:
        return offers_tools(self.model_defaults)


BlockExtractor = Callable[[list[dict[str, Any]]], Awaitable[None]]


@dataclass
class SessionWiring:
    """The explicit hand-overs between the features of one session: a feature built
    earlier (`FEATURES` order) leaves here what a later one is given — nothing finds
    another feature by looking through hooks."""

    extract_block: BlockExtractor | None = None
    """Memory extraction of a block of messages (compaction hands over what it is
    about to summarise away)."""


@dataclass(frozen=True)
class SessionPart:
    """What one feature adds to one chat session."""

    hooks: tuple[QueryHook, ...] = ()
    tools: tuple[Tool, ...] = ()
    tool_providers: tuple[Callable[[], list[Tool]], ...] = ()
    """Tools that join later (MCP servers coming up), asked at each request."""
    handle: Any = None
    """The faces' handle on it (the compaction hook, memory's hooks)."""
    warm: Callable[[ChatSession, str], None] | None = None
    """Typing paused on this text (the TUI): start work the query will want."""
    drain: Callable[[], Awaitable[None]] | None = None
    """Wait for its background work (shutdown, tests)."""


@dataclass(frozen=True)
class Feature:
    """One feature's registration: how it opens, and what it adds to each session.

    Adding a feature is writing one of these and one line in `FEATURES`.
    """

    name: str
    hook_rank: int
    """Where its hooks run in the loop, lowest first (see the module docstring)."""
    enabled: Callable[[Settings], bool]
    session: Callable[[Any, FeatureContext, SessionWiring], SessionPart]
    """A fresh part for one session, given the feature's state (what `open` returned)."""
    open: Callable[[FeatureContext], Any] | None = None
    """Its state for the runtime's life (e.g. `MemoryAccess`), not started yet; None
    from it: nothing to run here (no MCP server configured). Without `open` the
    feature runs with no state of its own (`session` gets True)."""
    start: Callable[[Any], None] | None = None
    """Start the state in the background once the runtime is open (MCP servers)."""
    close: Callable[[Any], Awaitable[None]] | None = None


def _memory_open(context: FeatureContext) -> MemoryAccess:
    return MemoryAccess(
        context.settings,
        context.paths,
        llm=context.llm,
        project=context.project,
        clock=context.clock,
        rows_first=not context.serves_chats,
    )


@dataclass(frozen=True)
class MemorySession:
    """Memory's hooks in one session, for the faces (warm recall, receipts, tests)."""

    prefetch: MemoryPrefetchHook
    receipts: MemoryReceiptHook
    extraction: MemoryExtraction


def _memory_session(
    memory: MemoryAccess, context: FeatureContext, wiring: SessionWiring
) -> SessionPart:
    settings = context.settings.memory
    extraction = memory.extraction(enabled=settings.extraction)
    prefetch = MemoryPrefetchHook(
        memory.recall,
        initial_wait_ms=settings.initial_wait_ms,
        record_delivery=memory.record_delivery,
        record_recall=memory.record_recall,
        live=memory.live,
        opening=memory.opening,
    )
    # After prefetch: it reads what this query's requests carried.
    receipts = MemoryReceiptHook(prefetch, memory.fetch)
    wiring.extract_block = extraction.extract_block
    return SessionPart(
        hooks=(prefetch, receipts, extraction),
        tools=(memory.save_memory_tool(on_write=receipts.record_write),),
        handle=MemorySession(prefetch, receipts, extraction),
        warm=prefetch.warm,
        drain=extraction.drain,
    )


async def _memory_close(memory: MemoryAccess) -> None:
    await memory.close()


def _compaction_session(state: None, context: FeatureContext, wiring: SessionWiring) -> SessionPart:
    assert context.llm is not None  # a runtime with chats has a model client
    hook = CompactionHook(context.llm, context.settings, extract=wiring.extract_block)
    return SessionPart(hooks=(hook,), handle=hook)


def _mcp_open(context: FeatureContext) -> McpServers | None:
    settings = context.settings
    if not settings.mcp.servers or not context.offers_tools:
        return None
    return McpServers(
        settings.mcp, cwd=context.project_root, home=context.paths.home, project=context.project
    )


def _mcp_session(servers: McpServers, context: FeatureContext, wiring: SessionWiring) -> SessionPart:
    return SessionPart(tool_providers=(servers.tools,))  # servers join as they come up


def _mcp_start(servers: McpServers) -> None:
    servers.start()


async def _mcp_close(servers: McpServers) -> None:
    await servers.close()


def _titles_session(state: None, context: FeatureContext, wiring: SessionWiring) -> SessionPart:
    hook = SessionTitleHook()
    return SessionPart(hooks=(hook,), handle=hook, drain=hook.drain)


FEATURES: tuple[Feature, ...] = (
    Feature(
        MEMORY,
        hook_rank=10,
        enabled=lambda settings: settings.memory.enabled,
        open=_memory_open,
        session=_memory_session,
        close=_memory_close,
    ),
    Feature(
        COMPACTION,
        hook_rank=0,  # first: see the module docstring
        enabled=lambda settings: settings.compaction.enabled,
        session=_compaction_session,
    ),
    Feature(
        MCP,
        hook_rank=20,
        enabled=lambda settings: bool(settings.mcp.servers),
        open=_mcp_open,
        session=_mcp_session,
        start=_mcp_start,
        close=_mcp_close,
    ),
    Feature(
        TITLES,
        hook_rank=30,  # last: it only reads the finished exchange
        # A background model call per session, like extraction's per turn: a setup that
        # turns those off (`extraction = false`: no model calls but the user's) gets none.
        enabled=lambda settings: settings.llm.session_titles and settings.memory.extraction,
        session=_titles_session,
    ),
)
"""Every feature, in build order (a feature is handed what an earlier one left in the
`SessionWiring`: memory before compaction); hooks run in `hook_rank` order."""


@dataclass(frozen=True)
class SessionFeatures:
    """What the features add to a chat session, with a handle on each for the faces."""

    hooks: tuple[QueryHook, ...]
    """In the one correct order; pass them to ChatSession as they are."""
    tools: ToolRegistry
    parts: Mapping[str, SessionPart] = field(default_factory=dict)

    def handle(self, name: str) -> Any:
        """The faces' handle on feature `name` (None when it does not run)."""
        part = self.parts.get(name)
        return None if part is None else part.handle

    def warm_recall(self, session: ChatSession, text: str) -> None:
        """Typing paused: start what a query sending this text will want (memory
        recall, so a question sent as it stands gets its memory in the first request)."""
        for part in self.parts.values():
            if part.warm is not None:
                part.warm(session, text)

    async def drain(self) -> None:
        """Wait for the features' background work (extraction; shutdown, tests)."""
        await asyncio.gather(*(p.drain() for p in self.parts.values() if p.drain is not None))


@dataclass(frozen=True)
class Assembly:
    """Builds sessions' features from what a face has opened, in the one correct order."""

    context: FeatureContext
    features: frozenset[str]
    states: Mapping[str, Any]
    """The state of each feature that runs, by name (what its `open` returned)."""
    extra_tools: Sequence[Tool] = ()  # tests' own tools, offered like a feature's

    @classmethod
    def create(
        cls,
        settings: Settings,
        paths: Paths,
        *,
        llm: LLMClient | None,
        project_root: Path,
        project: str,
        features: Collection[str] | None = None,
        model_defaults: LocalChatDefaults | None = None,
        extra_tools: Sequence[Tool] = (),
        clock: Callable[[], float] = time.time,
        serves_chats: bool = True,
    ) -> Assembly:
        """The assembly of `features` (None: what the settings turn on).

        Each feature's state is opened but not started: the runtime starts the ones
        that run in the background (`start`); memory's `MemoryAccess` starts when a
        face listens to its notices (TUI) or awaits it (daemon).
        """
        names = enabled_features(settings) if features is None else frozenset(features)
        unknown = names - {feature.name for feature in FEATURES}
        if unknown:
            raise ValueError(f"unknown features: {', '.join(sorted(unknown))}")
        context = FeatureContext(
            settings=settings,
            paths=paths,
            llm=llm,
            project_root=project_root,
            project=project,
            model_defaults=model_defaults,
            clock=clock,
            serves_chats=serves_chats,
        )
        states: dict[str, Any] = {}
        for feature in FEATURES:
            if feature.name in names:
                state = feature.open(context) if feature.open is not None else True
                if state is not None:
                    states[feature.name] = state
        return cls(context=context, features=names, states=states, extra_tools=tuple(extra_tools))

    def _running(self) -> list[Feature]:
        return [f for f in FEATURES if f.name in self.states]

    def state(self, name: str) -> Any:
        """Feature `name`'s state (None when it does not run)."""
        return self.states.get(name)

    @property
    def memory(self) -> MemoryAccess | None:
        """The memory service's access, for the faces (None: memory does not run)."""
        return self.state(MEMORY)

    @property
    def mcp(self) -> McpServers | None:
        """The configured MCP servers (None: none configured, or no tools offered)."""
        return self.state(MCP)

    def start(self) -> None:
        """Start what runs in the background (a slow MCP server joins when ready)."""
        for feature in self._running():
            if feature.start is not None:
                feature.start(self.states[feature.name])

    def session(self) -> SessionFeatures:
        """A fresh set of hooks and tools for one chat session (or one TUI)."""
        with_tools = self.context.offers_tools
        tools = builtin_tools(self.context.project_root) if with_tools else ToolRegistry()
        wiring = SessionWiring()
        parts = {
            f.name: f.session(self.states[f.name], self.context, wiring) for f in self._running()
        }
        ranked = sorted(self._running(), key=lambda f: f.hook_rank)
        hooks = tuple(hook for f in ranked for hook in parts[f.name].hooks)
        offered = [*self.extra_tools, *(t for part in parts.values() for t in part.tools)]
        for tool in offered if with_tools else ():
            tools.register(tool)
        for part in parts.values():
            for provider in part.tool_providers:
                tools.add_provider(provider)
        return SessionFeatures(hooks=hooks, tools=tools, parts=parts)

    async def close(self) -> None:
        """Close the features' states, the last opened first (memory drains extraction)."""
        for feature in reversed(self._running()):
            if feature.close is not None:
                await feature.close(self.states[feature.name])
