"""The MCP servers of one face, and their tools as chat tools.

`McpServers.start()` starts every enabled server in the background when the face
opens: nothing waits for it, and a server's tools join the model's tool list from the
first request after it is ready (`tools` is a `ToolRegistry` provider). A tool asks
the user first unless `permissions.needs_asking` says otherwise; the face that can
ask sets `approver` (the TUI), a face without one runs trusted servers' tools only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from qwenmem_tui.chat.tools import Tool, ToolContext, ToolError
from qwenmem_tui.features.mcp.settings import McpSettings
from qwenmem_tui.features.mcp.permissions import (
    Approver,
    Decision,
    PermissionRequest,
    PermissionStore,
    needs_asking,
)
from qwenmem_tui.features.mcp.server import McpCallError, McpServer, ServerTool
from qwenmem_tui.features.mcp.tools import function_parameters, result_text, tool_name
from qwenmem_tui.llm.wire import JSONObject

log = logging.getLogger("qwenmem.mcp")

HEADLESS_REFUSAL = (
    "{name} was not run: it needs the user's permission, and here nobody can give it "
    "(only tools of servers with trust = true run without asking)."
)
DENIED = "The user denied this call of {name}."


class McpServers:
    """Every `[mcp.servers.NAME]` of the config, for one face (one process each)."""

    def __init__(self, settings: McpSettings, *, cwd: Path, home: Path, project: str) -> None:
        self.servers: dict[str, McpServer] = {
            name: McpServer(name, server, cwd=cwd, on_change=self._changed)
            for name, server in settings.servers.items()
        }
        self.permissions = PermissionStore(home, project)
        self.approver: Approver | None = None
        """Asks the user (the TUI sets it); None: only trusted servers' tools run."""
        self.listeners: list[Callable[[McpServer], None]] = []
        """Told of every state change (the TUI: /mcp, a failure line)."""

    def __bool__(self) -> bool:
        return bool(self.servers)

    def _changed(self, server: McpServer) -> None:
        if server.state == "ready":
            for line in self.collisions():
                log.warning("[MCP] %s", line)
        for listener in self.listeners:
            try:
                listener(server)
            except Exception:
                log.exception("[MCP] a listener failed")

    def start(self) -> None:
        """Start every enabled server in the background (no waiting)."""
        for server in self.servers.values():
            if server.state != "disabled":
                server.start()

    async def settled(self) -> None:
        """Wait until every started server whose tools could be offered has listed them
        or failed (each within its own `timeout`): a face that answers once
        (`qwenmem -p`) has no later request for a slow server to join."""
        offerable = [
            server.opening
            for server in self.servers.values()
            if server.opening is not None and (self.approver is not None or server.settings.trust)
        ]
        if offerable:
            await asyncio.wait(offerable)

    async def close(self) -> None:
        """Stop every server (their processes end)."""
        await asyncio.gather(*(server.stop() for server in self.servers.values()))

    # -- tools ---------------------------------------------------------------------------

    def _listed(self) -> dict[str, list[tuple[McpServer, ServerTool]]]:
        """Every listed tool of every enabled server, by the model's (mangled) name."""
        by_name: dict[str, list[tuple[McpServer, ServerTool]]] = {}
        for server in self.servers.values():
            if server.state == "disabled":
                continue
            for listed in server.tools:
                by_name.setdefault(tool_name(server.name, listed.name), []).append((server, listed))
        return by_name

    def collisions(self) -> list[str]:
        """One line per model name two tools would share ("a.b" and "a_b", server "x__y"
        beside server "x"): none of them is offered — the model could not say which it
        calls, and an answer given for one must not run the other."""
        return [
            f"MCP tools {', '.join(f'{server.name}.{listed.name}' for server, listed in tools)} "
            f"would all be called {name}: none of them is offered"
            for name, tools in self._listed().items()
            if len(tools) > 1
        ]

    def tools(self) -> list[Tool]:
        """The tools to offer now: those of the servers that have listed theirs, less
        any whose model name another tool shares (`collisions`)."""
        offered: list[Tool] = []
        for name, tools in self._listed().items():
            if len(tools) > 1:
                continue
            server, listed = tools[0]
            if self.approver is None and not server.settings.trust:
                continue  # nobody could allow them: not offered at all
            offered.append(self._tool(server, listed, name))
        return offered

    def _tool(self, server: McpServer, listed: ServerTool, name: str) -> Tool:
        async def handler(args: JSONObject, ctx: ToolContext) -> str:
            await self._check_permission(server, listed, name, args)
            try:
                result = await server.call(listed.name, args)
            except McpCallError as exc:
                raise ToolError(str(exc)) from None
            text = result_text(result)
            if result.is_error:
                raise ToolError(text or f"{name} failed (the server gave no reason)")
            return text

        description = listed.description or f"{listed.name} (MCP server {server.name})"
        return Tool(
            name=name,
            description=description,
            parameters=function_parameters(listed.input_schema),
            handler=handler,
            untrusted_output=True,  # someone else's program wrote it: like a file read
        )

    async def _check_permission(
        self, server: McpServer, listed: ServerTool, name: str, args: JSONObject
    ) -> None:
        if not needs_asking(
            trusted=server.settings.trust,
            read_only=obeyed_read_only(server, listed),
            remembered=self.permissions.allowed(server.name, listed.name),
        ):
            return
        if self.approver is None:
            raise ToolError(HEADLESS_REFUSAL.format(name=name))
        request = PermissionRequest(
            server.name, listed.name, name, listed.description, dict(args), says_read_only=listed.read_only
        )
        decision = await self.approver(request)
        if decision is Decision.DENY:
            raise ToolError(DENIED.format(name=name))
        if decision is Decision.ALWAYS:
            try:
                self.permissions.allow(server.name, listed.name)
            except OSError as exc:  # still allowed this once; said in the debug log
                log.warning("[MCP] could not remember the permission for %s: %s", name, exc)


def obeyed_read_only(server: McpServer, listed: ServerTool) -> bool:
    """The tool's read-only hint, where the config takes the server's word for it."""
    return listed.read_only and server.settings.trust_read_only_hint


STATE_LABELS = {
    "disabled": "disabled (enabled = false)",
    "stopped": "stopped",
    "starting": "starting…",
    "ready": "ready",
    "failed": "failed",
}


def describe_servers(servers: McpServers | None, config: str = "config.toml") -> str:
    """What /mcp shows: each server, its state and its tools (and which ask first)."""
    if not servers:
        return (
            f"No MCP servers configured. Add one to {config}, e.g.\n"
            '  [mcp.servers.time]\n  command = "mcp-server-time"'
        )
    lines = ["MCP servers:"]
    for server in servers.servers.values():
        settings = server.settings
        where = settings.url or " ".join([settings.command or "", *settings.args]).strip()
        state = STATE_LABELS[server.state]
        if server.state == "failed" and server.error:
            state = f"failed: {server.error}"
        trust = " · trusted" if settings.trust else ""
        lines.append(f"  {server.name}  {state}{trust}  ({where})")
        for listed in server.tools:
            name = tool_name(server.name, listed.name)
            asks = needs_asking(
                trusted=settings.trust,
                read_only=obeyed_read_only(server, listed),
                remembered=servers.permissions.allowed(server.name, listed.name),
            )
            mark = "asks first" if asks else ("read-only" if obeyed_read_only(server, listed) else "allowed")
            if asks and listed.read_only:
                mark += "; the server calls it read-only"
            lines.append(f"    {name}  ({mark})")
        if server.state == "ready" and not server.tools:
            lines.append("    (no tools)")
    lines.extend(f"  {line}" for line in servers.collisions())
    return "\n".join(lines)
