"""MCP servers in the app: started with the session, /mcp, the permission prompt.

The servers and their tools are assembled in the core (`qwenmem_tui/features/mcp/`,
`Assembly.mcp`) and started by the runtime in the background (neither the first frame
nor the first message waits); this module says in one line when one fails to start,
lists them on /mcp and asks the user before an untrusted tool runs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING

from qwenmem_tui.features.mcp.feature import MCP, MCP_STATE
from qwenmem_tui.features.mcp.permissions import Decision, PermissionRequest
from qwenmem_tui.features.mcp.server import McpServer
from qwenmem_tui.features.mcp.servers import McpServers, describe_servers
from qwenmem_tui.tui.extensions import AppContext, Extension, ExtensionFactory
from qwenmem_tui.tui.host import SlashCommand

if TYPE_CHECKING:
    from qwenmem_tui.tui.host import Host

log = logging.getLogger("qwenmem.tui")


class McpController:
    """Asks for permission on the app's screen and reports background failures."""

    def __init__(self, context: AppContext, servers: McpServers | None) -> None:
        self._context = context
        self._servers = servers
        self._app: Host | None = None
        self._shown = False  # a session is on screen: lines shown now stay
        self._pending: list[str] = []  # failures before the first session was shown
        self._said: set[str] = set()  # tool-name collisions already shown

    def on_ready(self, app: Host) -> None:
        self._app = app
        if self._servers is not None:
            self._servers.approver = self.approve

    def on_session_opened(self, app: Host, resumed: bool) -> None:
        self._shown = True
        for line in self._pending:
            app.show_error(line)
        self._pending.clear()

    def watch(self) -> None:
        """A server that fails to start (the runtime starts them) is one line here."""
        servers = self._servers
        if servers is None:
            return
        for server in servers.servers.values():
            opening = server.opening
            if opening is not None:
                opening.add_done_callback(functools.partial(self._opened, server))

    def _opened(self, server: McpServer, opening: object) -> None:
        self._started(server)

    def _started(self, server: McpServer) -> None:
        if server.state == "ready" and self._servers is not None:
            # Two tools one model name would share: refused, said once each.
            for line in self._servers.collisions():
                if line not in self._said:
                    self._said.add(line)
                    self._say(line)
        if server.state != "failed":
            return
        self._say(f"MCP server {server.name} {server.error} (see /mcp; it is retried on the next call)")

    def _say(self, line: str) -> None:
        if self._app is None or not self._shown:
            self._pending.append(line)
        else:
            self._app.show_error(line)

    async def approve(self, request: PermissionRequest) -> Decision:
        """Ask on screen; the turn waits. Esc cancels the turn."""
        from qwenmem_tui.tui.features.mcp.permission import PermissionScreen

        app = self._app
        assert app is not None
        answer: asyncio.Future[Decision | None] = asyncio.get_running_loop().create_future()

        def answered(decision: Decision | None) -> None:
            if not answer.done():
                answer.set_result(decision)

        screen = PermissionScreen(request)
        app.push_screen(screen, answered)
        try:
            decision = await answer
        except asyncio.CancelledError:
            if screen.is_attached and app.screen is screen:
                screen.dismiss(None)  # the turn was cancelled elsewhere: the question goes
            raise
        if decision is None:  # Esc: cancel the turn, as Esc does on the chat screen
            app.session.cancel()
            await asyncio.Event().wait()  # the cancellation arrives here
            raise asyncio.CancelledError  # not reached: the wait ends by cancellation
        return decision

    def show(self, app: Host, args: str) -> None:
        source = app.settings.source or app.paths.config_file
        app.show_info(describe_servers(self._servers, str(source)))


async def _build(context: AppContext) -> Extension:
    servers = context.state(MCP_STATE)
    controller = McpController(context, servers)
    controller.watch()

    async def close() -> None:
        if servers is not None:
            servers.approver = None

    return Extension(
        name="mcp",
        commands=(SlashCommand("mcp", "MCP servers: their state and tools", controller.show),),
        on_ready=controller.on_ready,
        on_session_opened=controller.on_session_opened,
        close=close,
    )


mcp_extension = ExtensionFactory("mcp", _build, features=frozenset({MCP}), always=True)
"""The MCP client: in `default_extensions` always (/mcp says how to add a server)."""
