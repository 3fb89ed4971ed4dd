"""Helpers for driving the real app against the fake server in a temp home."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from app_support import BOUND, send, settle, started, wait_until  # noqa: F401 (tests import them from here)

from textual.app import App
from textual.command import CommandList, CommandPalette

from qwenmem_tui.config import Settings
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import Item, SessionInfo, SessionStore
from qwenmem_tui.tui.app import QwenmemApp, create_app

SIZE = (100, 30)
START = 1_790_000_000.0  # a fixed "now" so ages and timestamps are reproducible


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_app(
    settings: Settings, paths: Paths, project: Path, clock: FakeClock
) -> Callable[..., QwenmemApp]:
    """`make_app(**overrides)` -> the app on the temp home, fake server and fake clock."""

    def make(**overrides: object) -> QwenmemApp:
        kwargs: dict[str, object] = {"cwd": project, "clock": clock, "extensions": ()}
        kwargs.update(overrides)
        return create_app(settings, paths, **kwargs)  # type: ignore[arg-type]

    return make


async def seed_session(
    paths: Paths,
    project: Path,
    title: str,
    items: list[tuple[str, str, dict | None, dict]],
    *,
    clock: Callable[[], float],
) -> SessionInfo:
    """Store a session with `(type, content, message, meta)` items, as if chatted before."""
    paths.ensure()
    db = await Database.open(paths.db_file)
    try:
        store = SessionStore(db, clock=clock)
        info = await store.create_session(project_id(project), title)
        for type_, content, message, meta in items:
            await store.add_item(
                Item(None, info.id, type_, content, message=message, meta=meta, created_at=clock())
            )
        found = await store.get_session(info.id)
        assert found is not None
        return found
    finally:
        await db.close()


def conversation(user: str, reply: str) -> list[tuple[str, str, dict | None, dict]]:
    """A user message and its reply, as stored items."""
    return [
        ("user", user, {"role": "user", "content": user}, {}),
        ("assistant", reply, {"role": "assistant", "content": reply}, {}),
    ]


def palette_highlight(app: App[object]) -> str | None:
    """The command the open command palette runs on Enter (None: no palette, or its
    search has not listed anything yet: Enter would only show the list)."""
    screen = app.screen
    if not isinstance(screen, CommandPalette):
        return None
    commands = screen.query_one(CommandList)
    if commands.highlighted is None:
        return None
    return str(commands.get_option_at_index(commands.highlighted).prompt)
