"""One configured MCP server: its connection, its state and its tools.

The official SDK's transports and `ClientSession` are async context managers that
must be entered and left in one task, so each connection lives in a task of its own
(`_serve`) that holds it open until it is stopped; calls from the chat's turns go
through the session it opened (the SDK multiplexes requests by id).

Nothing here may hang a turn: starting and every call are bounded by the server's
`timeout`. A server that dies, hangs or answers garbage ends in state "failed" with
one line saying why, and is started again by the next call of one of its tools.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from qwenmem_tui.features.mcp.settings import McpServerSettings
from qwenmem_tui.exits import exit_status
from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.text import one_line

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.client.session import IncomingMessage
    from mcp.types import CallToolResult

log = logging.getLogger("qwenmem.mcp")

ServerState = Literal["disabled", "stopped", "starting", "ready", "failed"]
STDERR_TAIL_LINES = 20
"""Lines of a stdio server's stderr kept to explain why it failed (debug log only)."""


class McpCallError(Exception):
    """A call that could not be made or answered; ``str(e)`` is the one line shown."""


@dataclass(frozen=True)
class ServerTool:
    """One tool as the server lists it (MCP names, not the model's)."""

    name: str
    description: str
    input_schema: JSONObject
    read_only: bool  # annotations.readOnlyHint: the server says it changes nothing


class McpServer:
    """A server of `[mcp.servers.NAME]`; `start()` runs in the background."""

    def __init__(
        self,
        name: str,
        settings: McpServerSettings,
        *,
        cwd: Path,
        on_change: Callable[[McpServer], None] = lambda server: None,
    ) -> None:
        self.name = name
        self.settings = settings
        self._cwd = cwd
        self._on_change = on_change
        self.state: ServerState = "stopped" if settings.enabled else "disabled"
        self.error: str | None = None
        """Why it failed (one line), while state is "failed"."""
        self.tools: tuple[ServerTool, ...] = ()
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[ClientSession] | None = None
        self._stop: asyncio.Event | None = None
        self._garbled = False  # the server wrote something that is not JSON-RPC
        self._process: object = None  # the stdio server's process, to say how it ended

    @property
    def timeout(self) -> float:
        return self.settings.timeout

    @property
    def opening(self) -> asyncio.Future[ClientSession] | None:
        """The latest start, done once it is ready or failed (None: never started)."""
        return self._ready

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> asyncio.Future[ClientSession]:
        """Start connecting in the background (no-op when starting or ready)."""
        if self._ready is not None and not (self._ready.done() and self.state != "ready"):
            return self._ready
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._stop = asyncio.Event()
        self._set_state("starting")
        self._task = asyncio.create_task(self._serve(self._ready, self._stop), name=f"mcp-{self.name}")
        return self._ready

    async def _serve(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        _SPAWNING.set(self)  # this task's stdio_client hands us the process it spawns
        try:
            async with AsyncExitStack() as stack:
                # asyncio.timeout, not wait_for: the SDK's context managers must be
                # entered in this very task (wait_for runs its coroutine in another).
                async with asyncio.timeout(self.timeout):
                    session = await self._connect(stack)
                self._session = session
                self._set_state("ready")
                if not ready.done():
                    ready.set_result(session)
                await stop.wait()
        except asyncio.CancelledError:
            self._failed_start(ready, "stopped")
            raise
        except BaseException as exc:  # noqa: BLE001 - the SDK raises exception groups
            log.warning("[MCP] server %s failed", self.name, exc_info=True)
            self._fail(ready, self._ended(describe_failure(exc, self._timed_out())))
        else:
            self._failed_start(ready, "stopped")
        finally:
            self._session = None

    async def _connect(self, stack: AsyncExitStack) -> ClientSession:
        # The SDK is imported here, in the server's task: the first frame never waits for it.
        from mcp import ClientSession

        read, write = await stack.enter_async_context(self._transport())
        self._garbled = False
        session = await stack.enter_async_context(
            ClientSession(read, write, message_handler=self._incoming)
        )
        await session.initialize()
        self.tools = await self._list_tools(session)
        log.info("[MCP] server %s ready: %d tools", self.name, len(self.tools))
        return session

    async def _incoming(self, message: IncomingMessage) -> None:
        # The SDK hands over what it could not parse as an exception: the request it
        # answered never completes, so the timeout says "garbage" instead of "slow".
        if isinstance(message, Exception):
            log.warning("[MCP] server %s sent garbage: %s", self.name, one_line(str(message))[:200])
            self._garbled = True

    def _timed_out(self) -> str:
        if self._garbled:
            return "answered garbage (not MCP's JSON-RPC)"
        return f"did not answer within {self.timeout:g}s"

    def _transport(self) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        _watch_spawns()

        settings = self.settings
        if settings.url is not None:
            return streamable_http_client(settings.url)
        assert settings.command is not None
        cwd = Path(settings.cwd).expanduser() if settings.cwd else self._cwd
        params = StdioServerParameters(
            command=settings.command,
            args=list(settings.args),
            # The server gets the user's environment plus its own table (PATH, HOME: a
            # server started by npx or uvx needs them).
            env={**os.environ, **settings.env},
            cwd=cwd if cwd.is_absolute() else self._cwd / cwd,
        )
        # Its stderr is its own diagnostics: kept off the terminal (the TUI owns it).
        return stdio_client(params, errlog=open(os.devnull, "w"))  # noqa: SIM115 - closed by the process

    async def _list_tools(self, session: ClientSession) -> tuple[ServerTool, ...]:
        from mcp.types import PaginatedRequestParams

        tools: list[ServerTool] = []
        cursor: str | None = None
        while True:
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            listed = await session.list_tools(params=params)
            for tool in listed.tools:
                annotations = tool.annotations
                tools.append(
                    ServerTool(
                        name=tool.name,
                        description=tool.description or tool.title or "",
                        input_schema=dict(tool.input_schema or {}),
                        read_only=bool(annotations is not None and annotations.read_only_hint),
                    )
                )
            cursor = listed.next_cursor
            if not cursor:
                return tuple(tools)

    def _set_state(self, state: ServerState, error: str | None = None) -> None:
        self.state = state
        self.error = error
        self._on_change(self)

    def _fail(self, ready: asyncio.Future[ClientSession], reason: str) -> None:
        self.tools = self.tools if self.state == "ready" else ()
        self._set_state("failed", reason)
        if not ready.done():
            ready.set_exception(McpCallError(f"MCP server {self.name} {reason}"))
            ready.exception()  # retrieved: a start nobody awaited must not warn

    def _failed_start(self, ready: asyncio.Future[ClientSession], state: ServerState) -> None:
        if self.state != "failed":
            self._set_state(state)
        if not ready.done():
            ready.set_exception(McpCallError(f"MCP server {self.name} stopped"))
            ready.exception()

    async def stop(self) -> None:
        """Close the connection (the stdio server process ends with it)."""
        task, stop = self._task, self._stop
        self._task = None
        if task is None:
            return
        if stop is not None:
            stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 5)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
            await asyncio.wait({task})
        except Exception:
            log.debug("[MCP] server %s stopped with an error", self.name, exc_info=True)

    async def _restart_after(self, reason: str) -> None:
        """Mark it failed and close what is left; the next call starts it again."""
        log.warning("[MCP] server %s: %s", self.name, reason)
        task = self._task
        self._task = None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})  # the SDK reaps the process: its exit status is known
        self.tools = self.tools  # keep offering them: the next call restarts the server
        self._set_state("failed", self._ended(reason))

    def _ended(self, reason: str) -> str:
        """A closed connection said as how the process ended, when it did end
        ("crashed (SIGSEGV: segmentation fault)", "stopped (exit code 3)")."""
        code = getattr(self._process, "returncode", None)
        if reason != CLOSED or code is None:
            return reason
        return exit_status(code)

    # -- calls ---------------------------------------------------------------------------

    async def session(self) -> ClientSession:
        """The open session, starting (or restarting) the server first if need be."""
        if self.state == "disabled":
            raise McpCallError(f"MCP server {self.name} is disabled in the config")
        ready = self.start()
        try:
            return await asyncio.wait_for(asyncio.shield(ready), self.timeout)
        except TimeoutError:
            reason = f"did not start within {self.timeout:g}s"
            await self._restart_after(reason)
            raise McpCallError(f"MCP server {self.name} {reason}") from None

    async def call(self, tool: str, arguments: JSONObject) -> CallToolResult:
        """Call one tool, bounded by the timeout; McpCallError with one line on failure.

        A protocol error the server answers with (unknown tool, bad arguments) leaves it
        running; a timeout, a dead process or a garbled answer restarts it next time.
        """
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        session = await self.session()
        try:
            async with asyncio.timeout(self.timeout):
                return await session.call_tool(tool, arguments)
        except TimeoutError:
            reason = self._timed_out()
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:  # the server answered: it is alive
                raise McpCallError(f"{self.name}: {one_line(exc.message)}") from None
            reason = CLOSED
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - dead pipes, garbage, exception groups
            log.warning("[MCP] call %s.%s failed", self.name, tool, exc_info=True)
            reason = describe_failure(exc, self._timed_out())
        await self._restart_after(reason)
        raise McpCallError(f"MCP server {self.name} {self.error or reason}; it restarts on the next call")


CLOSED = "closed the connection (did the process exit?)"

_SPAWNING: contextvars.ContextVar[McpServer] = contextvars.ContextVar("qwenmem_mcp_spawning")
"""The server whose task is connecting (each connection has a task, so a context)."""
_watching = False


def _watch_spawns() -> None:
    """Keep the process the SDK's stdio client spawns, so a dead server's line can say
    how it ended: the SDK keeps it to itself. Wraps its one spawning function (the SDK
    2.x name); should a release rename it, the line stays "closed the connection"."""
    global _watching
    if _watching:
        return
    _watching = True
    import mcp.client.stdio as sdk_stdio

    spawn = getattr(sdk_stdio, "_create_platform_compatible_process", None)
    if spawn is None:
        return

    async def spawn_and_keep(*args: Any, **kwargs: Any) -> Any:
        process = await spawn(*args, **kwargs)
        server = _SPAWNING.get(None)
        if server is not None:
            server._process = process
        return process

    sdk_stdio._create_platform_compatible_process = spawn_and_keep


def describe_failure(exc: BaseException, timed_out: str) -> str:
    """One line for a failed server, from the innermost cause of an exception group
    (`timed_out`: what to say when that is a timeout)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return timed_out
    if isinstance(exc, FileNotFoundError):
        return f"could not start: command not found ({exc.filename or exc})"
    if isinstance(exc, PermissionError):
        return f"could not start: permission denied ({exc.filename or exc})"
    text = one_line(str(exc)) or type(exc).__name__
    if type(exc).__name__ in ("ConnectError", "ConnectTimeout"):  # httpx: an HTTP server
        return f"could not connect: {text}"
    if type(exc).__name__ in ("ClosedResourceError", "EndOfStream", "BrokenResourceError"):
        return CLOSED
    return f"failed: {text}"
