"""The stdio MCP server behind ``qwenmem mcp`` (contract §8), on the official SDK.

Clients (Claude Code, qwen-code, Cursor) spawn it once per session, so it must answer
fast: it opens the one `Runtime` every face opens, serving no chats
(``Runtime.open(..., chats=False)``: memory only, no model), as soon as the protocol is
up; the memory store counts as open with its rows (~10 ms), and the
vector side (embedder, FAISS: ~0.4 s of CPU) loads after the first tool answer (or for
the first search or write, which need it), so the handshake and a first
``list_memories`` do not share the GIL with it. The secret scanner likewise loads from
the first tool call on.

Which project: ``--project``, else the client's first root (``roots/list``), else the
directory the client started us in — resolved once, at the first tool call, because
roots can only be asked for after the handshake.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ListResourcesResult, PaginatedRequestParams
from mcp_types import Resource as MCPResource

from qwenmem_tui import collector
from qwenmem_tui import secrets as scanner
from qwenmem_tui.features import registry
from qwenmem_tui.features.feature import load_function
from qwenmem_tui.features.memory.feature import MEMORY_STATE
from qwenmem_tui.features.memory.remote import Caller, ProjectMemory
from qwenmem_tui.features.memory.views import project_memory
from qwenmem_tui.mcp_server import stdio
from qwenmem_tui.paths import Paths, project_root
from qwenmem_tui.runtime import Runtime, StartupError

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings

log = logging.getLogger("qwenmem.mcp")

SERVER_NAME = "qwenmem"
ROOTS_TIMEOUT_S = 2.0
INSTRUCTIONS = (
    "Long-term memory shared with the qwenmem chat. search_memory before answering "
    "questions about the user, their preferences or this project; remember durable "
    "facts the user states (not secrets, not passing details); forget_memory when the "
    "user asks. Memories can be out of date: prefer what the user says now. Writes "
    "from here are held for the user's review in qwenmem when they read as instructions, "
    "would apply to every project or name a link or address."
)


class MemoryBackend:
    """What the tools share: the runtime (opening behind the handshake), the project
    once known."""

    def __init__(
        self, open_runtime: Callable[[], Awaitable[Runtime]], *, project_dir: Path | None, cwd: Path
    ) -> None:
        """``open_runtime``: opens the face's `Runtime` (``chats=False``: memory only)."""
        self._open_runtime = open_runtime
        self._opening: asyncio.Task[Runtime] | None = None
        self._project_dir = project_dir
        self._cwd = cwd
        self._root: Path | None = None
        self._project_lock = asyncio.Lock()

    def start(self) -> None:
        """Open the runtime and its memory store now (the vectors behind them), without
        waiting for either."""
        if self._opening is None:
            self._opening = asyncio.create_task(self._open(), name="mcp-runtime")

    async def _open(self) -> Runtime:
        try:
            runtime = await self._open_runtime()
        finally:
            # Held by the CLI since launch: what the SDK and the runtime built lives
            # until exit, and is left out of every later collection.
            collector.release(freeze=True)
        if (memory := runtime.state(MEMORY_STATE)) is not None:
            memory.start()
        return runtime

    async def runtime(self) -> Runtime:
        """The open runtime; a ToolError with its one line when it cannot open."""
        self.start()
        assert self._opening is not None
        try:
            return await asyncio.shield(self._opening)
        except StartupError as exc:  # a damaged database, a full disk: its one line
            raise ToolError(str(exc)) from None
        except Exception as exc:  # the traceback to the debug log, never to the client
            log.exception("[MCP] the runtime did not open")
            raise ToolError(f"qwenmem could not open its memory: {type(exc).__name__}") from None

    def warm(self) -> None:
        """After a tool's answer: the vectors load behind it, for the next search."""
        opening = self._opening
        if opening is None or not opening.done() or opening.cancelled() or opening.exception():
            return
        memory = opening.result().state(MEMORY_STATE)
        if memory is not None:
            memory.warm_vectors()

    async def close(self) -> None:
        if self._opening is None:
            return
        if not self._opening.done():
            self._opening.cancel()
        try:
            runtime = await self._opening
        except BaseException:  # it never opened: nothing to close
            return
        await runtime.close()

    async def project_root(self, ctx: Context) -> Path:
        """The project: --project, else the client's first root, else the cwd."""
        async with self._project_lock:
            if self._root is None:
                root = self._project_dir or await _first_root(ctx) or self._cwd
                self._root = project_root(root.resolve())
                log.info("[MCP] serving the memory of project %s", self._root)
            return self._root

    async def memory(self, ctx: Context) -> ProjectMemory:
        # Writes cut secrets out: the scanner loads in the background from the first
        # call on (a write that comes before it is loaded waits for it).
        scanner.preload()
        runtime = await self.runtime()
        try:
            return project_memory(runtime, _caller(ctx), await self.project_root(ctx))
        except StartupError as exc:  # memory is turned off in the config
            raise ToolError(str(exc)) from None


def _caller(ctx: Context) -> Caller:
    """The client as it named itself at initialize (clientInfo), for the audit trail."""
    try:
        params = ctx.request_context.session.client_params
        info = params.client_info if params is not None else None
    except (AttributeError, ValueError):
        info = None
    if info is None:
        return Caller("MCP")
    name = " ".join(str(part) for part in (info.name, info.version) if part)
    return Caller("MCP", "".join(ch for ch in name if ch.isprintable())[:80])


async def _first_root(ctx: Context) -> Path | None:
    """The first ``file://`` root the client lists, if it can list any."""
    try:
        session = ctx.request_context.session
        capabilities = session.client_capabilities
        if capabilities is None or capabilities.roots is None:
            return None
        async with asyncio.timeout(ROOTS_TIMEOUT_S):
            result = await session.list_roots()
    except Exception as exc:  # no roots is an answer too: fall back to the cwd
        log.info("[MCP] could not list the client's roots: %s", exc)
        return None
    for root in result.roots:
        url = urlparse(str(root.uri))
        if url.scheme == "file":
            path = Path(unquote(url.path))
            if path.is_dir():
                return path
    return None


ResourceLister = Callable[[Context], Awaitable[list[MCPResource]]]


class QwenmemServer(MCPServer):
    """The SDK's server, whose `resources/list` also lists what features list per
    request (`resource_listers`): a memory is a resource (`memory://12`), and the
    memories change while the server runs, where the SDK lists only resources
    registered up front (and templates, which a client cannot browse)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resource_listers: list[ResourceLister] = []

    async def _handle_list_resources(  # the SDK's handler, extended
        self, ctx: Any, params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        result = await super()._handle_list_resources(ctx, params)
        context = Context(request_context=ctx, mcp_server=self)
        for lister in self.resource_listers:
            result.resources.extend(await lister(context))
        return result


def build_server(backend: MemoryBackend) -> QwenmemServer:
    """The MCP server with what every feature offers (`Feature.mcp`): memory's four
    tools of contract §8, its memories as resources and its `recall` prompt."""

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        backend.start()
        try:
            yield
        finally:
            await backend.close()

    server = QwenmemServer(SERVER_NAME, instructions=INSTRUCTIONS, lifespan=lifespan)
    for feature in registry.FEATURES:
        if feature.mcp is not None:
            load_function(feature.mcp)(server, backend)
    return server


async def serve_stdio(
    settings: Settings, paths: Paths, *, project_dir: Path | None, cwd: Path
) -> None:
    """Serve until the client closes stdin."""

    def open_runtime() -> Awaitable[Runtime]:
        # The project is known only at the first tool call (`project_memory(caller,
        # root)` names it per call); the runtime's own root is where we started.
        return Runtime.open(settings, paths, project_root(cwd), cwd=cwd, chats=False)

    backend = MemoryBackend(open_runtime, project_dir=project_dir, cwd=cwd)
    # As `MCPServer.run_stdio_async`, with stdin checked: a malformed request gets an
    # error answer instead of silence (`mcp_server/stdio.py`).
    await stdio.serve(build_server(backend)._lowlevel_server)
