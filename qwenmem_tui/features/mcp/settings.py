"""MCP's settings: the `[mcp.servers.NAME]` tables (contract §10)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from qwenmem_tui.config import Section, SettingsSection, blank_to_none

MCP_SERVER_NAME = re.compile(r"[a-z0-9_-]+")
"""A server's name: it becomes part of its tools' names (`mcp__NAME__TOOL`)."""


class McpServerSettings(Section):
    """One `[mcp.servers.NAME]` table: a stdio command or a streamable-HTTP url."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    enabled: bool = True
    trust: bool = False  # true: its tools run without asking
    trust_read_only_hint: bool = False  # true: its tools marked read-only run without asking
    timeout: float = Field(default=30.0, gt=0)  # seconds per call (and to start)

    _blank = field_validator("command", "cwd", "url", mode="before")(blank_to_none)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("one of command (stdio) or url (streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("an http:// or https:// url")
        return self


class McpSettings(Section):
    servers: dict[str, McpServerSettings] = Field(default_factory=dict)

    @field_validator("servers", mode="after")
    @classmethod
    def _names(cls, servers: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in servers:
            if not MCP_SERVER_NAME.fullmatch(name):
                raise ValueError(f"server names of lowercase letters, digits, _ and -, got {name!r}")
        return servers


MCP_SETTINGS = SettingsSection("mcp", McpSettings)
