"""Selecting a message in the log (Alt+Up/Down, a click) and pinning it: the pin is
stored on that item, its widget shows the 📌 marker (live and after /resume), and
compaction carries that message verbatim."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Markdown

from qwenmem_tui.config import Settings
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import Item, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.compaction.extension import (
    PIN_UNAVAILABLE,
    compaction_extension,
)
from qwenmem_tui.tui.widgets.chat_log import PAGE_SIZE, ChatLog
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.plain_items import (
    PIN_LABEL,
    InfoItem,
    MessageView,
    UserItem,
)
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
from .test_compaction_tui import (
    WINDOW,
    answer,
    ask,
    chat_requests,
    question,
    responder,
    run,
    sent_texts,
    texts,
)


@pytest.fixture
def make_pin_app(
    make_app: Callable[..., QwenmemApp], settings: Settings
) -> Callable[..., QwenmemApp]:
    settings.llm.context_window = WINDOW
    settings.compaction.keep_recent_turns = 2
    return lambda **kw: make_app(extensions=[compaction_extension], **kw)


def log_of(app: QwenmemApp) -> ChatLog:
    return app.screen.query_one(ChatLog)


def text_of(view: MessageView) -> str:
    if isinstance(view, AssistantItem):
        return view.query_one(Markdown).source
    return str(view.render())


def pinned_views(app: QwenmemApp) -> list[str]:
    """The text of every message widget showing the pin marker."""
    views = app.screen.query(MessageView)
    shown = [v for v in views if v.has_class("-pinned") and v.border_title == PIN_LABEL]
    return [text_of(v) for v in shown]


async def stored_items(paths: Paths, session_id: str) -> list[Item]:
    db = await Database.open(paths.db_file)
    try:
        return await SessionStore(db).load_items(session_id)
    finally:
        await db.close()


async def select(pilot: Pilot, *keys: str) -> MessageView | None:
    await pilot.press(*keys)
    await pilot.pause()
    return log_of(pilot.app).selected  # type: ignore[arg-type]


async def test_select_an_older_message_and_toggle_its_pin(
    fake: FakeOpenAI, make_pin_app: Callable[..., QwenmemApp], paths: Paths
) -> None:
    fake.responder = responder()
    app = make_pin_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 3)
        # Up from the prompt starts at the newest message, then walks back.
        selected = await select(pilot, "alt+up")
        assert selected is not None and text_of(selected) == answer(3)
        selected = await select(pilot, "alt+up", "alt+up", "alt+up")
        assert isinstance(selected, UserItem) and text_of(selected) == question(2)
        assert selected.has_class("-selected")
        assert [v for v in app.screen.query(MessageView) if v.has_class("-selected")] == [selected]
        assert app.screen.query_one(PromptInput).has_focus
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert pinned_views(app) == [question(2)]
        assert texts(app, InfoItem)[-1].startswith(f"📌 Pinned (user): “{question(2)}”")
        items = await stored_items(paths, app.session.info.id)
        assert [i.content for i in items if i.meta.get("pinned")] == [question(2)]
        # A streamed reply is linked to its stored item: it can be pinned too.
        selected = await select(pilot, "alt+up")
        assert isinstance(selected, AssistantItem) and text_of(selected) == answer(1)
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert pinned_views(app) == [answer(1), question(2)]
        # The key toggles: pressed again on the same message, it unpins.
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert pinned_views(app) == [question(2)]
        assert texts(app, InfoItem)[-1] == f"Unpinned: “{answer(1)}”"
        items = await stored_items(paths, app.session.info.id)
        assert [i.content for i in items if i.meta.get("pinned")] == [question(2)]
        # Esc ends the selection; the key then acts on the last message again.
        await pilot.press("escape")
        await pilot.pause()
        assert log_of(app).selected is None
        assert not any(v.has_class("-selected") for v in app.screen.query(MessageView))
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert pinned_views(app) == [question(2), answer(3)]


async def test_typing_clicking_and_moving_past_the_newest(
    fake: FakeOpenAI, make_pin_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder()
    app = make_pin_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 2)
        assert (await select(pilot, "alt+up", "alt+up")) is not None
        await pilot.press("x")  # typing goes to the prompt and ends the selection
        await pilot.pause()
        assert log_of(app).selected is None
        assert app.screen.query_one(PromptInput).text == "x"
        selected = await select(pilot, "alt+up", "alt+up", "alt+down")
        assert selected is not None and text_of(selected) == answer(2)
        assert (await select(pilot, "alt+down")) is None  # past the newest: the prompt
        # A click selects a message, and the prompt keeps the keys.
        first = app.screen.query(UserItem).first()
        await pilot.click(first)
        await pilot.pause()
        assert log_of(app).selected is first
        assert app.screen.query_one(PromptInput).has_focus
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert pinned_views(app) == [question(1)]


async def test_unpin_and_pin_commands_update_the_marker(
    fake: FakeOpenAI, make_pin_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder()
    app = make_pin_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 1)
        await run(pilot, "/pin")
        assert pinned_views(app) == [answer(1)]
        await run(pilot, "/unpin")
        assert pinned_views(app) == []


async def test_marker_restored_on_resume(
    fake: FakeOpenAI, make_pin_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder()
    app = make_pin_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 2)
        await select(pilot, *["alt+up"] * 4)
        await pilot.press("ctrl+p")
        await settle(pilot)
    app = make_pin_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert pinned_views(app) == [question(1)]
        # Resumed widgets are linked too: the key unpins the stored item.
        await select(pilot, *["alt+up"] * 4)
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert pinned_views(app) == []
        assert not any(i.meta.get("pinned") for i in app.session.items)


async def test_selection_loads_earlier_pages(
    make_pin_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    items: list[tuple[str, str, dict | None, dict]] = []
    for n in range(PAGE_SIZE):
        items += conversation(question(n), answer(n))
    await seed_session(paths, project, "Long", items, clock=clock)
    app = make_pin_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert len(app.screen.query(MessageView)) == PAGE_SIZE
        log = log_of(app)
        await select(pilot, *["alt+up"] * (PAGE_SIZE + 1))
        # The last Alt+Up reads the earlier page from the database before it selects:
        # a key press's idle wait can end while that read is under way.
        await wait_until(
            pilot,
            lambda: len(app.screen.query(MessageView)) == 2 * PAGE_SIZE
            and log.selected is not None
            and text_of(log.selected) == answer(PAGE_SIZE // 2 - 1),
        )
        selected = log.selected
        assert selected is not None
        await wait_until(pilot, lambda: log.scroll_y < log.max_scroll_y)
        top, bottom = selected.region.y, selected.region.bottom
        assert log.region.y <= top and bottom <= log.region.bottom  # scrolled into view
        # Esc: back at the prompt, the log at the bottom again.
        await pilot.press("escape")
        await wait_until(pilot, lambda: log.scroll_y == log.max_scroll_y)


async def test_a_message_from_before_clear_cannot_be_pinned(
    fake: FakeOpenAI, make_pin_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder()
    app = make_pin_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 1)
        await run(pilot, "/clear")
    app = make_pin_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert (await select(pilot, "alt+up")) is not None
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert texts(app, InfoItem)[-1] == PIN_UNAVAILABLE
        assert pinned_views(app) == []


async def test_selected_pinned_message_survives_compaction_verbatim(
    fake: FakeOpenAI, make_pin_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder()
    app = make_pin_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 4)
        selected = await select(pilot, *["alt+up"] * 6)
        assert selected is not None and text_of(selected) == question(2)
        await pilot.press("ctrl+p")
        await settle(pilot)
        await pilot.press("escape")
        await run(pilot, "/compact", question(5))
        sent = chat_requests(fake)[-1]["messages"]
        assert {"role": "user", "content": question(2)} in sent
        # Its neighbours were summarised away; the marker stays on screen.
        assert answer(2) not in sent_texts(chat_requests(fake)[-1])
        assert question(1) not in sent_texts(chat_requests(fake)[-1])
        assert pinned_views(app) == [question(2)]


async def test_selection_keys_are_listed_and_remappable(
    fake: FakeOpenAI, make_pin_app: Callable[..., QwenmemApp], settings: Settings
) -> None:
    settings.keys["chat.select_up"] = "f3"
    fake.responder = responder()
    app = make_pin_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 1)
        keys = list(app.describe_keys())
        assert ("f3", "Select older") in keys and ("alt+↓", "Select newer") in keys
        selected = await select(pilot, "f3")
        assert selected is not None and text_of(selected) == answer(1)
        await send(pilot, "/help")
        await settle(pilot)
        assert "Select older" in texts(app, InfoItem)[-1]


def test_snapshot_pinned_messages_and_a_selection(
    snap_compare: Callable[..., bool],
    make_pin_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
    clock: FakeClock,
) -> None:
    items = conversation("Why is the upload test flaky?", "The retry loop uses the real clock.")
    items += conversation("Use a fake clock, never sleeps.", "Done: `Uploader(clock=...)`.")
    items += conversation("Now add the 429 case.", "Added `test_upload_retries_on_429`.")
    items[2] = (*items[2][:3], {"pinned": True})  # a decision, pinned by the user
    items[3] = (*items[3][:3], {"pinned": True})
    asyncio.run(seed_session(paths, project, "upload test", items, clock=clock))

    async def select_reply(pilot: Pilot) -> None:
        pilot.app.screen.query_one(PromptInput).cursor_blink = False
        await settle(pilot)
        await pilot.press("alt+up", "alt+up", "alt+up")
        await settle(pilot)

    app = make_pin_app(resume=True)
    assert snap_compare(app, terminal_size=(80, 30), run_before=select_reply)
