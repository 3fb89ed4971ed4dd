"""Memory for the faces that are not a chat, over an open runtime: one project's memory
(the MCP tools, the daemon's /memory routes) and the proxy's exchange memory. Here, not
in the runtime: the runtime names no feature."""

from __future__ import annotations

from pathlib import Path

from qwenmem_tui.features.feature import RuntimeView
from qwenmem_tui.features.memory.exchange import ExchangeMemory
from qwenmem_tui.features.memory.feature import MEMORY_STATE
from qwenmem_tui.features.memory.remote import Caller, ProjectMemory
from qwenmem_tui.memory.settings import MEMORY_SETTINGS
from qwenmem_tui.paths import project_id
from qwenmem_tui.reads import StartupError


def project_memory(runtime: RuntimeView, caller: Caller, root: Path | None = None) -> ProjectMemory:
    """One project's memory: search, remember as `caller`, forget, list
    (`memory.remote`). `root` (a project root) defaults to the runtime's project;
    every project's memories live in the one store, each view reads its own and the
    global ones. Raises StartupError when memory is not assembled."""
    access = runtime.state(MEMORY_STATE)
    if access is None:
        raise StartupError("Long-term memory is turned off (memory.enabled = false).")
    project = runtime.project if root is None else project_id(root)
    return ProjectMemory(access.service, project, caller, clock=runtime.clock)


def exchange_memory(runtime: RuntimeView, *, extract: bool = False) -> ExchangeMemory | None:
    """Memory for conversations qwenmem does not hold (the daemon's OpenAI-compatible
    proxy): recall into each proxied request, and, with `extract` (and
    `memory.extraction` on), extraction after each relayed reply — the chat's rules
    (`memory/exchange.py`). None when memory is not assembled. The face closes it."""
    access = runtime.state(MEMORY_STATE)
    if access is None:
        return None
    settings = MEMORY_SETTINGS.of(runtime.settings)
    return ExchangeMemory(
        access.service,
        api_wait_ms=max(settings.initial_wait_ms, settings.api_wait_ms),
        llm=runtime.model_client,
        extract=extract and settings.extraction,
    )
