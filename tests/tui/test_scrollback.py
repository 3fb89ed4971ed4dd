"""Scrolling through a long session keeps a bounded number of items mounted, and Home /
End reach the first and the newest message at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from textual.pilot import Pilot

from qwenmem_tui.chat.session import RESET_NOTICE
from qwenmem_tui.chat.window import WINDOW_ITEMS
from qwenmem_tui.paths import Paths
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.widgets import chat_log
from qwenmem_tui.tui.widgets.chat_log import (
    MAX_PAGES,
    PAGE_SIZE,
    ChatLog,
    EarlierItems,
    LaterItems,
)
from qwenmem_tui.tui.widgets.plain_items import MessageView, UserItem
from qwenmem_tui.tui.widgets.prompt import PromptInput

from app_support import send

from .conftest import SIZE, FakeClock, conversation, seed_session, settle, wait_until

# 100 stored messages: 5 pages, MAX_PAGES + 2, so paging each way releases two pages
# (the bound is exercised twice per direction) without paging through seven.
EXCHANGES = (MAX_PAGES + 2) * PAGE_SIZE // 2


@asynccontextmanager
async def resumed_long_session(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> AsyncIterator[Pilot]:
    """The app resumed on a stored session of EXCHANGES questions and answers."""
    items = []
    for n in range(EXCHANGES):
        items += conversation(f"question {n}", f"answer {n}")
    await seed_session(paths, project, "Long", items, clock=clock)
    app = make_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        yield pilot


def mounted(pilot: Pilot) -> int:
    return len(pilot.app.screen.query(MessageView))


def shown_texts(pilot: Pilot) -> list[str]:
    """The texts of the user messages visible in the log's viewport now."""
    log = pilot.app.screen.query_one(ChatLog)
    view = log.scrollable_content_region
    return [
        str(item.render())
        for item in pilot.app.screen.query(UserItem)
        if item.region.overlaps(view)
    ]


async def press_until(pilot: Pilot, key: str, done: Callable[[], bool], bound: int) -> None:
    """Press `key` until `done()`, checking after every press that the log stays bounded."""
    for _ in range(500):
        if done():
            return
        await pilot.press(key)
        await pilot.pause()
        assert mounted(pilot) <= bound
    raise AssertionError(f"{key} never got there")


async def test_paging_to_the_top_and_back_keeps_few_items_mounted(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    async with resumed_long_session(make_app, paths, project, clock) as pilot:
        app = pilot.app
        assert mounted(pilot) == PAGE_SIZE
        screen = app.screen
        bound = MAX_PAGES * PAGE_SIZE
        # PageUp all the way: earlier pages come in, far-away ones are released.
        await press_until(pilot, "pageup", lambda: not screen.query(EarlierItems), bound)
        await press_until(pilot, "pageup", lambda: "question 0" in shown_texts(pilot), bound)
        assert screen.query(LaterItems)  # the newest ones were released on the way up
        # PageDown all the way back to the newest message.
        await press_until(pilot, "pagedown", lambda: not screen.query(LaterItems), bound)
        last = f"question {EXCHANGES - 1}"
        await press_until(pilot, "pagedown", lambda: last in shown_texts(pilot), bound)


async def test_home_and_end_jump_to_the_first_and_the_newest_message(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    async with resumed_long_session(make_app, paths, project, clock) as pilot:
        app = pilot.app
        await pilot.press("home")
        await wait_until(pilot, lambda: "question 0" in shown_texts(pilot))
        assert mounted(pilot) <= PAGE_SIZE
        later = app.screen.query_one(LaterItems)
        assert f"{2 * EXCHANGES - PAGE_SIZE} later items" in str(later.render())
        await pilot.press("end")
        last = f"question {EXCHANGES - 1}"
        await wait_until(pilot, lambda: last in shown_texts(pilot))
        assert not app.screen.query(LaterItems) and mounted(pilot) <= PAGE_SIZE


async def test_home_with_text_in_the_prompt_moves_the_cursor(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    async with resumed_long_session(make_app, paths, project, clock) as pilot:
        app = pilot.app
        prompt = app.screen.query_one(PromptInput)
        prompt.insert("draft")
        await pilot.press("home")
        await pilot.pause()
        assert prompt.cursor_location == (0, 0)
        assert "question 0" not in shown_texts(pilot) and app.screen.query(EarlierItems)


async def test_a_session_longer_than_its_window_in_memory_scrolls_back_to_its_start(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    """Issue 41: a resumed session past its /clear holds only its newest items in memory;
    the earlier ones are read from the database when the user scrolls back to them."""
    exchanges = WINDOW_ITEMS // 2 + 30
    items = [entry for n in range(exchanges) for entry in conversation(f"question {n}", f"answer {n}")]
    items.append(("info", RESET_NOTICE, None, {"reset": True}))
    items += conversation("after the clear", "fresh start")
    await seed_session(paths, project, "Longer than the window", items, clock=clock)
    app = make_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        session = app.session
        assert session.item_count == len(items) and len(session.items) == WINDOW_ITEMS
        earlier = app.screen.query_one(EarlierItems)
        assert f"{len(items) - PAGE_SIZE} earlier items" in str(earlier.render())
        await pilot.press("home")
        await wait_until(pilot, lambda: "question 0" in shown_texts(pilot))
        bound = MAX_PAGES * PAGE_SIZE
        await press_until(pilot, "pagedown", lambda: f"question {PAGE_SIZE}" in shown_texts(pilot), bound)
        assert len(session.items) == WINDOW_ITEMS  # reading back held nothing more


async def test_a_long_sitting_releases_the_oldest_widgets_and_reads_them_back(
    make_app: Callable[..., QwenmemApp], fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41: messages sent in one sitting do not pile up in the log; past a page
    more than MAX_PAGES the oldest are released after a reply, and scrolling back (Home)
    reads them from the database."""
    monkeypatch.setattr(chat_log, "PAGE_SIZE", 4)  # small pages: a few messages pass the bound
    monkeypatch.setattr(chat_log, "MAX_PAGES", 2)
    fake.responder = lambda body: Reply(f"answer to {body['messages'][-1]['content']}")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        for n in range(10):
            await send(pilot, f"question {n}")
            await settle(pilot)
            assert mounted(pilot) <= 3 * 4, n
        assert app.screen.query(EarlierItems) and "question 0" not in shown_texts(pilot)
        await pilot.press("home")
        await wait_until(pilot, lambda: "question 0" in shown_texts(pilot))
        await pilot.press("end")
        await wait_until(pilot, lambda: "question 9" in shown_texts(pilot))
        assert mounted(pilot) <= 3 * 4
        # After /clear the log starts empty, and stays bounded as it fills again.
        await send(pilot, "/clear")
        await settle(pilot)
        for n in range(10, 18):
            await send(pilot, f"question {n}")
            await settle(pilot)
            assert mounted(pilot) <= 3 * 4, n
