"""Helpers shared by the PostgreSQL tests (a module, so tests can import it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtest_support import make_settings

from qwenmem_tui.config import Settings
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths


@dataclass
class Backend:
    """One store backend under test; ``machine`` names a separate QWENMEM_HOME, as on
    another computer (for SQLite every machine shares one home: it has no server)."""

    name: str  # "sqlite" | "postgres"
    root: Path
    dsn: str | None = None

    def settings(self, user: str = "ana", **memory: Any) -> Settings:
        if self.name == "postgres":
            # The local FAISS cache unless a test asks for pgvector: these tests look
            # into that cache, and a server may or may not have the extension.
            memory = {"store": "postgres", "postgres_dsn": self.dsn, "postgres_vector_search": False, **memory}
        return make_settings(user, **memory)

    def paths(self, machine: str = "a") -> Paths:
        paths = Paths(self.root / (machine if self.name == "postgres" else "shared"))
        paths.ensure()
        return paths

    async def open(
        self, *, user: str = "ana", machine: str = "a", clock: Callable[[], float] | None = None, **memory: Any
    ) -> MemoryService:
        kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
        return await MemoryService.open(self.settings(user, **memory), self.paths(machine), **kwargs)


@dataclass
class Notices:
    """Collects ``on_notice`` lines and lets a test wait for one, bounded."""

    lines: list[str] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, text: str) -> None:
        self.lines.append(text)
        self._changed.set()

    async def wait_for(self, needle: str, timeout: float = 30.0) -> str:
        async def found() -> str:
            while True:
                for line in self.lines:
                    if needle in line:
                        return line
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(found(), timeout)


class GenerationWaiter:
    """Wait until a service's index reflects a store generation (via its change listener)."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self._changed = asyncio.Event()
        service.change_listeners.append(lambda _generation: self._changed.set())

    async def wait(self, generation: int, timeout: float) -> None:
        async def reached() -> None:
            while self.service.index.generation < generation:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(reached(), timeout)
