"""The recap in the app: /recap, the away timer end to end, the resume recap, the widget."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from textual import events
from textual.pilot import Pilot

from qwenmem_tui.config import Settings
from qwenmem_tui.features.recap.session_recap import RECAP_SYSTEM_PROMPT
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.recap.controller import (
    RECAP_BUSY,
    RECAP_NONE,
    RECAP_NOTHING,
    RECAP_PROGRESS,
    recap_extension,
)
from qwenmem_tui.tui.features.recap.item import RecapItem
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

RECAP = "Fixing the flaky upload test. Next: add the 429 case."


def is_recap_request(body: dict) -> bool:
    return body["messages"][0]["content"] == RECAP_SYSTEM_PROMPT


def recap_responder(text: str = f"<recap>{RECAP}</recap>") -> Callable[[dict], Reply]:
    """Answer recap requests with `text` and chat requests with a short reply."""
    return lambda body: Reply(text) if is_recap_request(body) else Reply("Sure.")


def recap_requests(fake: FakeOpenAI) -> list[dict]:
    return [body for body in fake.chat_requests if is_recap_request(body)]


def info_texts(app: QwenmemApp) -> list[str]:
    return [str(widget.render()) for widget in app.screen.query(InfoItem)]


def recap_texts(app: QwenmemApp) -> list[str]:
    return [widget.text for widget in app.screen.query(RecapItem)]


@pytest.fixture
def away_settings(settings: Settings) -> Settings:
    settings.general.show_session_recap = True
    settings.general.session_recap_away_threshold_minutes = 0.05  # three seconds
    return settings


@pytest.fixture
def make_recap_app(make_app: Callable[..., QwenmemApp]) -> Callable[..., QwenmemApp]:
    return lambda **kw: make_app(extensions=[recap_extension], **kw)


async def chat(pilot: Pilot, *texts: str) -> None:
    for text in texts:
        await send(pilot, text)
        await settle(pilot)


async def be_away(pilot: Pilot, clock: FakeClock, seconds: float) -> None:
    pilot.app.post_message(events.AppBlur())
    await pilot.pause()
    clock.advance(seconds)
    pilot.app.post_message(events.AppFocus())
    await pilot.pause()
    await settle(pilot)


# --- /recap -----------------------------------------------------------------------


async def test_recap_command_adds_a_dim_recap_item(
    fake: FakeOpenAI, make_recap_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = recap_responder()
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "fix the flaky upload test", "/recap")
        assert recap_texts(app) == [RECAP]
        assert RECAP_PROGRESS not in info_texts(app)  # the progress line is gone
        assert app.state == "idle"
        stored = [item for item in app.session.items if item.type == "away_recap"]
        assert [item.content for item in stored] == [RECAP]
        assert stored[0].message is None  # a display item, never part of the history
        [request] = recap_requests(fake)
        assert request["model"] == "test-fast"
        # The next turn does not show the recap to the model.
        await chat(pilot, "and now?")
        assert RECAP not in json.dumps(fake.chat_requests[-1]["messages"])


async def test_recap_command_ignores_the_setting_and_the_dedupe_gate(
    fake: FakeOpenAI, make_recap_app: Callable[..., QwenmemApp], settings: Settings
) -> None:
    assert settings.general.show_session_recap is False
    fake.responder = recap_responder()
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "one turn only", "/recap", "/recap")
        assert recap_texts(app) == [RECAP, RECAP]


async def test_recap_command_with_nothing_to_recap(
    fake: FakeOpenAI, make_recap_app: Callable[..., QwenmemApp]
) -> None:
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "/recap")
        assert info_texts(app) == [RECAP_NOTHING]
    assert fake.chat_requests == []


async def test_recap_command_refused_while_a_reply_streams(
    fake: FakeOpenAI, make_recap_app: Callable[..., QwenmemApp]
) -> None:
    gate = threading.Event()
    fake.script(Reply("first"), Reply("a slow reply", gate=gate))
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "hello")
        await send(pilot, "tell me more")
        await wait_until(pilot, lambda: app.state == "responding")
        await send(pilot, "/recap")
        await wait_until(pilot, lambda: RECAP_BUSY in info_texts(app))
        gate.set()
        await settle(pilot)
    assert recap_requests(fake) == []


async def test_recap_command_refused_while_another_recap_runs(
    fake: FakeOpenAI, make_recap_app: Callable[..., QwenmemApp]
) -> None:
    gate = threading.Event()
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "hello")
        fake.script(Reply(f"<recap>{RECAP}</recap>", gate=gate))
        await send(pilot, "/recap")
        await wait_until(pilot, lambda: app.state == "recap")
        assert RECAP_PROGRESS in info_texts(app)
        await send(pilot, "/recap")
        await wait_until(pilot, lambda: RECAP_BUSY in info_texts(app))
        gate.set()
        await settle(pilot)
        assert recap_texts(app) == [RECAP]
    assert len(recap_requests(fake)) == 1


async def test_recap_command_with_a_failing_model_shows_no_recap(
    fake: FakeOpenAI, make_recap_app: Callable[..., QwenmemApp]
) -> None:
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "hello")
        fake.script(HTTPError(500, {"error": {"message": "boom"}}))
        await chat(pilot, "/recap")
        assert recap_texts(app) == []
        assert info_texts(app)[-1] == RECAP_NONE
        assert app.state == "idle"


# --- the away timer ---------------------------------------------------------------


async def test_away_recap_shows_once_after_three_turns(
    fake: FakeOpenAI,
    make_recap_app: Callable[..., QwenmemApp],
    away_settings: Settings,
    clock: FakeClock,
) -> None:
    fake.responder = recap_responder()
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "fix the flaky upload test", "inject a fake clock", "good, and?")
        await be_away(pilot, clock, 10)
        assert recap_texts(app) == [RECAP]
        stored = [item for item in app.session.items if item.type == "away_recap"]
        assert [item.content for item in stored] == [RECAP]  # survives a resume
        # Switching away again: the dedupe gate wants two new turns first.
        await be_away(pilot, clock, 10)
        assert recap_texts(app) == [RECAP]
        assert len(recap_requests(fake)) == 1
        await chat(pilot, "next", "and next")
        await be_away(pilot, clock, 10)
        assert recap_texts(app) == [RECAP, RECAP]


async def test_away_recap_off_by_default(
    fake: FakeOpenAI, make_recap_app: Callable[..., QwenmemApp], clock: FakeClock
) -> None:
    fake.responder = recap_responder()
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "one", "two", "three")
        await be_away(pilot, clock, 3600)
        assert recap_texts(app) == []
    assert recap_requests(fake) == []


async def test_brief_absence_shows_nothing(
    fake: FakeOpenAI,
    make_recap_app: Callable[..., QwenmemApp],
    away_settings: Settings,
    clock: FakeClock,
) -> None:
    fake.responder = recap_responder()
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "one", "two", "three")
        await be_away(pilot, clock, 2)
        assert recap_texts(app) == []
    assert recap_requests(fake) == []


async def test_coming_back_mid_turn_recaps_when_the_turn_ends(
    fake: FakeOpenAI,
    make_recap_app: Callable[..., QwenmemApp],
    away_settings: Settings,
    clock: FakeClock,
) -> None:
    gate = threading.Event()
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        fake.responder = recap_responder()
        await chat(pilot, "one", "two")
        fake.script(Reply("a slow third reply", gate=gate))
        await send(pilot, "three")
        await wait_until(pilot, lambda: app.state == "responding")
        app.post_message(events.AppBlur())
        await pilot.pause()
        clock.advance(10)
        app.post_message(events.AppFocus())
        await pilot.pause()
        assert recap_requests(fake) == []  # not while the reply streams
        gate.set()
        await settle(pilot)
        await settle(pilot)
        assert recap_texts(app) == [RECAP]


async def test_failing_away_recap_shows_nothing(
    fake: FakeOpenAI,
    make_recap_app: Callable[..., QwenmemApp],
    away_settings: Settings,
    clock: FakeClock,
) -> None:
    fake.responder = recap_responder("The user is fixing tests (no tags).")
    app = make_recap_app()
    async with app.run_test(size=SIZE) as pilot:
        await chat(pilot, "one", "two", "three")
        await be_away(pilot, clock, 10)
        assert len(recap_requests(fake)) == 1
        assert recap_texts(app) == []
        assert info_texts(app) == []


async def test_quitting_with_a_recap_in_flight_aborts_it(
    fake: FakeOpenAI,
    make_recap_app: Callable[..., QwenmemApp],
    away_settings: Settings,
    clock: FakeClock,
) -> None:
    gate = threading.Event()
    fake.responder = lambda body: (
        Reply(f"<recap>{RECAP}</recap>", gate=gate) if is_recap_request(body) else Reply("Sure.")
    )
    app = make_recap_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await chat(pilot, "one", "two", "three")
            app.post_message(events.AppBlur())
            await pilot.pause()
            clock.advance(10)
            app.post_message(events.AppFocus())
            await asyncio.to_thread(fake.wait_for_requests, 4)
            assert len(recap_requests(fake)) == 1
            await pilot.press("ctrl+q")
    finally:
        gate.set()
    assert app.return_code == 0


# --- resume -----------------------------------------------------------------------


async def test_resume_days_later_recaps_once(
    fake: FakeOpenAI,
    make_recap_app: Callable[..., QwenmemApp],
    away_settings: Settings,
    paths: Paths,
    project: Path,
    clock: FakeClock,
) -> None:
    await seed_session(
        paths, project, "upload test",
        conversation("fix the flaky upload test", "The retry sleeps on the real clock.")
        + conversation("where does it sleep?", "In upload_retry().")
        + conversation("make the clock injectable", "Done: retry(clock=...)."),
        clock=clock,
    )
    clock.advance(3 * 86400)
    fake.responder = recap_responder()
    app = make_recap_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(recap_texts(app)))
        await settle(pilot)
        assert recap_texts(app) == [RECAP]
    # Opened again right away: the recap is stored and shown, not generated again.
    app = make_recap_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert recap_texts(app) == [RECAP]
    assert len(recap_requests(fake)) == 1


async def test_resume_of_a_one_message_session_days_later_does_not_recap(
    fake: FakeOpenAI,
    make_recap_app: Callable[..., QwenmemApp],
    away_settings: Settings,
    paths: Paths,
    project: Path,
    clock: FakeClock,
) -> None:
    # A recap needs three user messages, on resume as after an absence: one "hello"
    # got "※ recap: You started with: hello Latest: hello".
    await seed_session(
        paths, project, "hello", conversation("hello", "Hi!"), clock=clock
    )
    clock.advance(3 * 86400)
    fake.responder = recap_responder()
    app = make_recap_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert recap_texts(app) == []
    assert recap_requests(fake) == []


async def test_resume_without_the_setting_does_not_recap(
    fake: FakeOpenAI,
    make_recap_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
    clock: FakeClock,
) -> None:
    await seed_session(paths, project, "old", conversation("old question", "old answer"), clock=clock)
    clock.advance(3 * 86400)
    app = make_recap_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert recap_texts(app) == []
    assert fake.chat_requests == []


# --- the widget -------------------------------------------------------------------


def test_snapshot_conversation_with_a_recap(
    snap_compare: Callable[..., bool],
    make_recap_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
    clock: FakeClock,
) -> None:
    items = conversation("Fix the flaky upload test", "The retry loop sleeps on the real clock.")
    items += conversation("Inject a fake clock then", "Done: `Uploader(clock=...)`.")
    items.append(("away_recap", RECAP + " It wraps onto a second line when long enough.", None, {}))
    asyncio.run(seed_session(paths, project, "upload test", items, clock=clock))

    async def steady(pilot: Pilot) -> None:
        pilot.app.screen.query_one(PromptInput).cursor_blink = False
        await settle(pilot)

    assert snap_compare(make_recap_app(resume=True), terminal_size=(60, 20), run_before=steady)
