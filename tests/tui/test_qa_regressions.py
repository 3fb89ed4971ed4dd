"""Regressions found using qwenmem in a real terminal (tmux with focus events).

Each test names what a user saw: typing lag, PageUp doing nothing, /compact failing
against the demo server.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore
from qwenmem_tui.testing.demo import demo_responder
from qwenmem_tui.testing.fake_openai import FakeOpenAI
from qwenmem_tui.tui.app import NOTHING_TO_RESUME, QwenmemApp
from qwenmem_tui.tui.features.compaction.extension import compaction_extension
from qwenmem_tui.tui.features.compaction.marker import CompactionMarker
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.features.memory.screen import MemoryScreen
from qwenmem_tui.tui.screens.chat import ChatScreen
from qwenmem_tui.tui.screens.resume import ResumeScreen
from qwenmem_tui.tui.widgets.chat_log import ChatLog
from qwenmem_tui.tui.widgets.plain_items import InfoItem
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


async def test_typing_text_does_not_rebuild_the_footer(
    make_app: Callable[..., QwenmemApp],
) -> None:
    # Every key used to refresh the bindings, rebuilding the footer: ~15 ms a key, so a
    # paste or a fast typist lagged seconds behind. Only the suggestions' state matters.
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        refreshes: list[None] = []
        original = screen.refresh_bindings

        def counting() -> None:
            refreshes.append(None)
            original()

        screen.refresh_bindings = counting  # type: ignore[method-assign]
        await pilot.press(*"hello there")
        assert app.screen.query_one(PromptInput).text == "hello there"
        assert refreshes == []
        app.screen.query_one(PromptInput).clear()
        await pilot.press("slash")  # the suggestions appear: Esc now hides them
        assert refreshes


async def test_page_up_scrolls_the_conversation_from_the_prompt(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    items = []
    for n in range(12):
        items += conversation(f"question {n}\n" * 4, f"answer {n}\n\n" * 4)
    await seed_session(paths, project, "long", items, clock=clock)
    app = make_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        log_view = app.screen.query_one(ChatLog)
        await wait_until(pilot, lambda: log_view.max_scroll_y > 0)
        log_view.scroll_end(animate=False)
        await pilot.pause()
        bottom = log_view.scroll_y
        await pilot.press("pageup")
        await wait_until(pilot, lambda: log_view.scroll_y < bottom)
        assert app.focused is app.screen.query_one(PromptInput)  # typing still works
        await pilot.press("pagedown")
        await wait_until(pilot, lambda: log_view.scroll_y == bottom)


async def test_demo_server_answers_compact(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
    clock: FakeClock,
) -> None:
    # README sends people to the demo echo server; /compact there used to fail with
    # "the summariser answered without JSON".
    fake.responder = demo_responder()
    items = []
    for n in range(10):
        items += conversation(f"question {n}", f"answer {n}")
    await seed_session(paths, project, "chatty", items, clock=clock)
    app = make_app(resume=True, extensions=[compaction_extension])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "/compact")
        await wait_until(pilot, lambda: bool(app.screen.query(CompactionMarker)))
        await settle(pilot)
        [marker] = app.screen.query(CompactionMarker)
        assert "older messages summarized" in str(marker.title)


async def test_resume_from_the_memory_screen_shows_the_chosen_session(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    # Ctrl+R on /memory, Enter on a session: the switch happened under the memory
    # screen, which stayed up, so the chosen session seemed not to open.
    other = await seed_session(
        paths, project, "Other", conversation("Other question", "Other answer"), clock=clock
    )
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/memory")
        await wait_until(pilot, lambda: isinstance(app.screen, MemoryScreen))
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, ResumeScreen))
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ChatScreen)
        assert app.session.info.id == other.id


async def test_resume_with_nothing_to_resume_says_so(
    make_app: Callable[..., QwenmemApp],
) -> None:
    # `qwenmem --resume` in a project without sessions looked like a lost history.
    app = make_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert NOTHING_TO_RESUME in [str(w.render()) for w in app.screen.query(InfoItem)]


async def test_pin_key_is_off_on_the_memory_screen(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    # Ctrl+P on /memory pinned a chat message out of sight; the footer offered it there.
    await seed_session(paths, project, "Chat", conversation("A question", "An answer"), clock=clock)
    app = make_app(resume=True, extensions=[memory_extension, compaction_extension])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "Pin" in footer_keys(app)
        await send(pilot, "/memory")
        await wait_until(pilot, lambda: isinstance(app.screen, MemoryScreen))
        await pilot.pause()
        assert "Pin" not in footer_keys(app)
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert not any(item.meta.get("pinned") for item in app.session.items)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert any("Pinned" in str(w.render()) for w in app.screen.query(InfoItem))
        assert any(item.meta.get("pinned") for item in app.session.items)


def footer_keys(app: QwenmemApp) -> list[str]:
    return [
        active.binding.description
        for active in app.screen.active_bindings.values()
        if active.binding.show and active.enabled
    ]


async def test_leaving_without_a_word_leaves_no_empty_session(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], paths: Paths
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        empty_id = app.session.info.id
    second = make_app()
    async with second.run_test(size=SIZE) as pilot:
        await send(pilot, "hello")
        await settle(pilot)
        kept_id = second.session.info.id
    db = await Database.open(paths.db_file)
    try:
        ids = [s.id for s in await SessionStore(db).list_sessions()]
    finally:
        await db.close()
    assert empty_id not in ids and ids == [kept_id]
