"""SVG snapshots of the main views (top-level snapshots/; `pytest --snapshot-update`).

Deterministic by construction: fixed terminal size, the fake server, a fake clock, a
temp home, and no cursor blink.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.command import CommandPalette
from textual.pilot import Pilot
from textual.widgets import DataTable, Input

from qwenmem_tui.config import Settings
from qwenmem_tui.memory.model import DAY, RememberRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.memory.edit import EditMemoryScreen
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.features.memory.screen import ConfirmForget, MemoryScreen
from qwenmem_tui.tui.screens.secret_confirm import SecretConfirm
from qwenmem_tui.tui.widgets.items import FrozenBlocks
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import (
    SIZE,
    FakeClock,
    conversation,
    palette_highlight,
    seed_session,
    send,
    settle,
    wait_until,
)
from .test_basics_tui import BASICS
from .test_memory_tui import open_memory_screen, select_row
from .test_secret_confirm import TOKEN as SECRET_TOKEN
from .test_streaming import long_reply

REPLY = """\
The project has **two** entry points:

1. `qwenmem` — the TUI
2. `python -m qwenmem_tui` — the same

```python
def main() -> None:
    print("hello")
```
"""


async def _steady(pilot: Pilot) -> None:
    pilot.app.screen.query_one(PromptInput).cursor_blink = False
    await settle(pilot)


def test_empty_chat(snap_compare: Callable[..., bool], make_app: Callable[..., QwenmemApp]) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=_steady)


def test_conversation_with_markdown_code_and_tool_call(
    snap_compare: Callable[..., bool], fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"}, id="call_1")]),
        Reply(REPLY, chunk_size=16),
    )

    async def chat(pilot: Pilot) -> None:
        await send(pilot, "How do I start the project?")
        await _steady(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=chat)


def test_resume_picker(
    snap_compare: Callable[..., bool],
    make_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
    clock: FakeClock,
) -> None:
    async def seed() -> None:
        await seed_session(
            paths,
            project,
            "Fix the flaky parser test",
            conversation("Fix the flaky parser test", "Done."),
            clock=clock,
        )
        clock.advance(2 * 86400)
        await seed_session(
            paths,
            project,
            "Explain the storage layer",
            conversation("Explain the storage layer", "It is SQLite."),
            clock=clock,
        )
        clock.advance(3 * 3600)

    asyncio.run(seed())

    async def open_picker(pilot: Pilot) -> None:
        await send(pilot, "/resume")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=open_picker)


def test_error_item(
    snap_compare: Callable[..., bool],
    make_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
    clock: FakeClock,
) -> None:
    asyncio.run(
        seed_session(
            paths,
            project,
            "Hello",
            [
                *conversation("Hello", "Hi! How can I help?"),
                ("user", "Are you there?", {"role": "user", "content": "Are you there?"}, {}),
                (
                    "error",
                    "Cannot connect to http://127.0.0.1:8000/v1 (model qwen-plus): connection refused",
                    None,
                    {},
                ),
            ],
            clock=clock,
        )
    )
    assert snap_compare(make_app(resume=True), terminal_size=SIZE, run_before=_steady)


def test_long_streamed_reply_with_code_table_and_list(
    snap_compare: Callable[..., bool], fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    # Streamed in small pieces, so the live Markdown froze several times on the way:
    # the last screen must look as the reply rendered at once would.
    fake.script(Reply(long_reply(10), chunk_size=5))

    async def chat(pilot: Pilot) -> None:
        await send(pilot, "Explain every part")
        await _steady(pilot)
        # Placeholders of finished blocks turn into their Markdown when shown: all of
        # them, so the scrollbar does not depend on which were estimated (how the
        # stream's flushes fell).
        await pilot.resize_terminal(SIZE[0], 400)
        await wait_until(pilot, lambda: not pilot.app.screen.query(FrozenBlocks))
        await pilot.resize_terminal(*SIZE)
        await _steady(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=chat)


# --- dialogs and modes (issue 41: each had no snapshot) ------------------------------


def test_secret_confirm_dialog(snap_compare: Callable[..., bool], make_app: Callable[..., QwenmemApp]) -> None:
    async def ask(pilot: Pilot) -> None:
        await _steady(pilot)
        await send(pilot, f"deploy with token {SECRET_TOKEN} to staging")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, SecretConfirm))
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=ask)


def test_command_palette(snap_compare: Callable[..., bool], make_app: Callable[..., QwenmemApp]) -> None:
    async def palette(pilot: Pilot) -> None:
        await _steady(pilot)
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, CommandPalette))
        await pilot.press(*"/he")
        await wait_until(pilot, lambda: palette_highlight(pilot.app) is not None)
        await settle(pilot)

    assert snap_compare(make_app(extensions=BASICS), terminal_size=SIZE, run_before=palette)


def _seeded_memories(settings: Settings, paths: Paths, project: Path, clock: FakeClock) -> None:
    """Two memories of this project, written a week and a day ago (a review is due)."""

    async def seed() -> None:
        here = project_id(project)
        service = await MemoryService.open(settings, paths, clock=clock)
        try:
            await service.remember(RememberRequest("I live in Lisbon", project=here))
            clock.advance(8 * DAY)
            await service.remember(RememberRequest("I prefer tabs over spaces", project=here))
            clock.advance(3600)
        finally:
            await service.close()

    asyncio.run(seed())


def _on_memory_screen(*keys: str, until: Callable[[Pilot], bool]) -> Callable[[Pilot], Any]:
    """Open /memory, select memory 1, press `keys`, and wait for `until`."""

    async def run_before(pilot: Pilot) -> None:
        await _steady(pilot)
        screen = await open_memory_screen(pilot)
        await select_row(pilot, screen, 1)
        await pilot.press(*keys)
        await wait_until(pilot, lambda: until(pilot))
        await settle(pilot)

    return run_before


MEMORY_SIZE = (120, 34)  # the memory table has nine columns


def test_memory_forget_dialog(
    snap_compare: Callable[..., bool], make_app: Callable[..., QwenmemApp],
    settings: Settings, paths: Paths, project: Path, clock: FakeClock,
) -> None:
    _seeded_memories(settings, paths, project, clock)
    run_before = _on_memory_screen("d", until=lambda pilot: isinstance(pilot.app.screen, ConfirmForget))
    assert snap_compare(make_app(extensions=[memory_extension]), terminal_size=MEMORY_SIZE, run_before=run_before)


def test_memory_edit_dialog(
    snap_compare: Callable[..., bool], make_app: Callable[..., QwenmemApp],
    settings: Settings, paths: Paths, project: Path, clock: FakeClock,
) -> None:
    _seeded_memories(settings, paths, project, clock)

    def editing(pilot: Pilot) -> bool:
        screen = pilot.app.screen
        return isinstance(screen, EditMemoryScreen) and screen.query_one(Input).has_focus

    async def run_before(pilot: Pilot) -> None:
        await _on_memory_screen("e", until=editing)(pilot)
        pilot.app.screen.query_one(Input).cursor_blink = False
        await settle(pilot)

    assert snap_compare(make_app(extensions=[memory_extension]), terminal_size=MEMORY_SIZE, run_before=run_before)


def test_memory_review_mode(
    snap_compare: Callable[..., bool], make_app: Callable[..., QwenmemApp],
    settings: Settings, paths: Paths, project: Path, clock: FakeClock,
) -> None:
    settings.memory.review_sample = 1  # of the two memories: the review shows one
    _seeded_memories(settings, paths, project, clock)

    def reviewing(pilot: Pilot) -> bool:
        screen = pilot.app.screen
        return isinstance(screen, MemoryScreen) and screen.query_one(DataTable).row_count == 1

    run_before = _on_memory_screen("w", until=reviewing)
    assert snap_compare(make_app(extensions=[memory_extension]), terminal_size=MEMORY_SIZE, run_before=run_before)
