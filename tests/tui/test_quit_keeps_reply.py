"""Issue 23 item 4: quitting while a reply streams keeps the part received, marked
interrupted, as Esc does; `--resume` shows it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.plain_items import InterruptedMark

from .conftest import SIZE, send, settle, started, wait_until

PARTIAL = "The first half of the answer arrives, "
REST = "and the second half never does."


async def stored_items(paths: Paths, project: Path) -> list[tuple[str, str, dict]]:
    db = await Database.open(paths.db_file)
    try:
        store = SessionStore(db)
        [info] = await store.list_sessions(project_id(project))
        return [(i.type, i.content, i.meta) for i in await store.load_items(info.id)]
    finally:
        await db.close()


@pytest.mark.parametrize("how", ["ctrl+q", "/quit"])
async def test_quitting_mid_stream_stores_the_partial_reply_marked_interrupted(
    how: str,
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
) -> None:
    gate = threading.Event()
    chunks = len(PARTIAL) // 2
    fake.script(Reply(PARTIAL + REST, chunk_size=2, stall_after=chunks, stall_gate=gate))
    app = make_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "tell me")
            await wait_until(
                pilot,
                lambda: any(w._markdown == PARTIAL for w in app.screen.query(AssistantItem)),
            )
            if how == "ctrl+q":
                await pilot.press("ctrl+q")
            else:
                await send(pilot, "/quit")
            await wait_until(pilot, lambda: not app.is_running)
    finally:
        gate.set()
    items = await stored_items(paths, project)
    assert [(kind, content) for kind, content, _ in items] == [
        ("user", "tell me"),
        ("assistant", PARTIAL),
    ]
    assert items[1][2].get("interrupted") is True

    resumed = make_app(resume=True)
    async with resumed.run_test(size=SIZE) as pilot:
        await settle(pilot)
        [reply] = resumed.screen.query(AssistantItem)
        assert reply._markdown == PARTIAL
        assert reply.query(InterruptedMark)


async def test_what_extensions_show_while_the_app_quits_goes_nowhere_quietly(
    make_app: Callable[..., QwenmemApp],
) -> None:
    """Work that finishes as the app exits (a recap, a review badge, a note) finds the
    chat screen gone: it must not raise, or a clean Ctrl+Q exits with status 1 (seen
    in the kill -9 test's last `--resume`)."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: not app.is_running)
    assert app.screen_stack == []
    app.show_info("late note")
    app.show_error("late error")
    app.set_badge("memory", "3 to review")
    app.model_changed()
    app.show(InterruptedMark())
    assert app.return_code in (0, None)
