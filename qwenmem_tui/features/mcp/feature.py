"""MCP's registration: the configured servers, started in the background once per
runtime, their tools offered to each session as they come up. Its face: /mcp and the
permission prompt."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qwenmem_tui.features.feature import (
    Feature,
    FeatureContext,
    FeatureKey,
    SessionPart,
    SessionWiring,
)

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features.mcp.servers import McpServers
    from qwenmem_tui.features.mcp.settings import McpSettings

MCP = "mcp"
MCP_STATE: FeatureKey[McpServers] = FeatureKey(MCP)
"""MCP's state: the configured servers (None when none is configured)."""


def _servers(settings: Settings) -> McpSettings:
    from qwenmem_tui.features.mcp.settings import MCP_SETTINGS

    return MCP_SETTINGS.of(settings)


def _open(context: FeatureContext) -> McpServers | None:
    settings = _servers(context.settings)
    if not settings.servers or not context.offers_tools:
        return None
    from qwenmem_tui.features.mcp.servers import McpServers  # the MCP SDK: only when configured

    return McpServers(
        settings, cwd=context.project_root, home=context.paths.home, project=context.project
    )


def _session(servers: McpServers, context: FeatureContext, wiring: SessionWiring) -> SessionPart:
    return SessionPart(tool_providers=(servers.tools,))  # servers join as they come up


def _start(servers: McpServers) -> None:
    servers.start()


async def _settled(servers: McpServers) -> None:
    await servers.settled()


async def _close(servers: McpServers) -> None:
    await servers.close()


FEATURE = Feature(
    MCP,
    settings="qwenmem_tui.features.mcp.settings:MCP_SETTINGS",
    hook_rank=20,
    enabled=lambda settings: bool(_servers(settings).servers),
    open=_open,
    session=_session,
    start=_start,
    close=_close,
    settled=_settled,
    tui="qwenmem_tui.tui.features.mcp.extension:mcp_extension",
    api=("permissions",),  # what a face that asks the user answers with (ACP)
)
