"""Whether an MCP tool may run: trust, the read-only annotation, the user's answer.

A server's tools are code someone else wrote, run on the user's machine with the
user's rights. So a tool runs without asking only when the user trusts its server
(`trust = true`), or when the user answered "always for this project" before (kept
in `mcp_permissions.json` in qwenmem's home, per project, under the server's name and
the tool's own). A server's `readOnlyHint` is its own word: shown, and obeyed only
where the config says `trust_read_only_hint = true`. Otherwise the face asks; a face that cannot ask (the
daemon) runs trusted servers' tools only.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.paths import private_file

log = logging.getLogger("qwenmem.mcp")

PERMISSIONS_FILE = "mcp_permissions.json"


class Decision(StrEnum):
    ONCE = "once"  # run it this time
    ALWAYS = "always"  # run it from now on in this project (remembered)
    DENY = "deny"  # answer the model that the user refused


@dataclass(frozen=True)
class PermissionRequest:
    """What the user is asked about: one call of one tool."""

    server: str
    tool: str  # the server's own name for it
    name: str  # as the model knows it: mcp__server__tool
    description: str
    arguments: JSONObject = field(default_factory=dict)
    says_read_only: bool = False
    """The server marks it read-only: shown to the user as the server's claim."""


Approver = Callable[[PermissionRequest], Awaitable[Decision]]
"""Asks the user; cancellation (Esc) propagates out of it and cancels the turn."""


def needs_asking(*, trusted: bool, read_only: bool, remembered: bool) -> bool:
    """A tool asks first unless its server is trusted, it is read-only (by the server's
    word, taken only where the config says so) or was allowed."""
    return not (trusted or read_only or remembered)


def permission_key(server: str, tool: str) -> str:
    """What an "always" answer is kept under: the server and its tool's real name —
    not the model's mangled name, which another server's tool can share."""
    return f"{server}/{tool}"  # server names have no "/" ([a-z0-9_-]+)


class PermissionStore:
    """The "always for this project" answers, one JSON file in qwenmem's home.

    Read on every check (another qwenmem may have added one) and written atomically
    with mode 0600; an unreadable file counts as no answers and is left as it is.
    """

    def __init__(self, home: Path, project: str) -> None:
        self.path = home / PERMISSIONS_FILE
        self.project = project

    def _load(self) -> dict[str, list[str]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("[MCP] %s is unreadable (%s): no remembered permissions", self.path, exc)
            return {}
        projects = data.get("projects") if isinstance(data, dict) else None
        if not isinstance(projects, dict):
            return {}
        return {
            str(project): [str(name) for name in names]
            for project, names in projects.items()
            if isinstance(names, list)
        }

    def allowed(self, server: str, tool: str) -> bool:
        """Whether `tool` of `server` (the server's own name for it) was allowed always
        in this project."""
        return permission_key(server, tool) in self._load().get(self.project, ())

    def allow(self, server: str, tool: str) -> None:
        """Remember "always" for `tool` of `server` in this project."""
        name = permission_key(server, tool)
        projects = self._load()
        names = projects.setdefault(self.project, [])
        if name in names:
            return
        names.append(name)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".mcp_permissions.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"projects": projects}, handle, indent=2, ensure_ascii=False)
            private_file(Path(tmp))
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
