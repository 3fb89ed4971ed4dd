"""SVG snapshots of the main views (top-level snapshots/; `pytest --snapshot-update`).

Deterministic by construction: fixed terminal size, the fake server, a fake clock, a
temp home, and no cursor blink.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot

from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.widgets.items import FrozenBlocks
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import (
    SIZE,
    FakeClock,
    conversation,
    seed_session,
    send,
    settle,
    wait_until,
)
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
        await wait_until(pilot, lambda: not pilot.app.screen.query(FrozenBlocks), timeout=60)
        await pilot.resize_terminal(*SIZE)
        await _steady(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=chat)
