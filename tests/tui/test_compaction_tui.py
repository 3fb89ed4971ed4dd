"""Compaction in the app: the threshold, /compact, /pin, the marker across /resume,
summariser failures, and the hand-over to memory extraction.

A small `llm.context_window` makes a dozen short turns cross 70 %. Chat replies carry
no usage, so the hook counts with the local estimate alone and the tests can tell
exactly which request crossed the threshold.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from qwenmem_tui.config import Settings
from qwenmem_tui.features.compaction.gauge import estimate_tokens
from qwenmem_tui.features.compaction.hook import CompactionHook
from qwenmem_tui.features.compaction.summariser import SUMMARY_SYSTEM_PROMPT
from qwenmem_tui.features.memory.extract import EXTRACTION_SYSTEM_PROMPT
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import Item, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, Response
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.default_extensions import default_extensions
from qwenmem_tui.tui.features.compaction.extension import (
    COMPACT_BUSY,
    PIN_NOTHING,
    UNPIN_NOTHING,
    compaction_extension,
)
from qwenmem_tui.tui.features.compaction.marker import CompactionMarker
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.widgets.plain_items import ErrorItem, InfoItem
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import (
    SIZE,
    FakeClock,
    conversation,
    seed_session,
    send,
    settle,
    started,
    wait_until,
)

SUMMARY = "The user asked about the upload retry loop; it sleeps on the real clock."
SUMMARY_JSON = json.dumps({"summary": SUMMARY, "decisions": [], "pinned_turns": []})
WINDOW = 800  # threshold 560 tokens; a turn below is ~36 tokens


def question(n: int) -> str:
    return f"Question {n:02d}: how does the upload retry loop behave here?"


def answer(n: int) -> str:
    return f"Answer {n:02d}: it retries three times, then it gives up quietly."


def is_summary_request(body: dict) -> bool:
    return body["messages"][0]["content"] == SUMMARY_SYSTEM_PROMPT


def is_extraction_request(body: dict) -> bool:
    return body["messages"][0]["content"] == EXTRACTION_SYSTEM_PROMPT


def chat_requests(fake: FakeOpenAI) -> list[dict]:
    return [b for b in fake.chat_requests if b["model"] == "test-model"]


def summary_requests(fake: FakeOpenAI) -> list[dict]:
    return [b for b in fake.chat_requests if is_summary_request(b)]


def responder(summariser: Response | None = None) -> Callable[[dict], Response]:
    """Chat requests get `answer(n)` for `question(n)`, without usage; summaries JSON."""

    def respond(body: dict) -> Response:
        if is_summary_request(body):
            return summariser or Reply(SUMMARY_JSON)
        if is_extraction_request(body):
            return Reply('{"memories": []}')
        last = str(body["messages"][-1]["content"])
        number = int(last.split(":")[0].split()[-1]) if last.startswith("Question") else 0
        return Reply(answer(number), usage=False, chunk_size=200)

    return respond


def texts(app: QwenmemApp, kind: type[Static]) -> list[str]:
    return [str(widget.render()) for widget in app.screen.query(kind)]


def markers(app: QwenmemApp) -> list[CompactionMarker]:
    return list(app.screen.query(CompactionMarker))


def sent_texts(body: dict) -> list[str]:
    return [str(m.get("content")) for m in body["messages"]]


@pytest.fixture
def small_window(settings: Settings) -> Settings:
    settings.llm.context_window = WINDOW
    settings.compaction.keep_recent_turns = 2
    return settings


@pytest.fixture
def make_compaction_app(
    make_app: Callable[..., QwenmemApp], small_window: Settings
) -> Callable[..., QwenmemApp]:
    return lambda **kw: make_app(extensions=[compaction_extension], **kw)


async def run(pilot: Pilot, *lines: str) -> None:
    for line in lines:
        await send(pilot, line)
        await settle(pilot)


async def ask(pilot: Pilot, first: int, last: int) -> None:
    await run(pilot, *(question(n) for n in range(first, last + 1)))


# --- the threshold --------------------------------------------------------------------


async def test_crossing_the_threshold_compacts_and_shows_the_marker(
    fake: FakeOpenAI, make_compaction_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder()
    app = make_compaction_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 16)
        [summarised] = summary_requests(fake)
        assert summarised["model"] == "test-fast"
        requests = chat_requests(fake)
        # The first request carrying the summary is the first that would have passed 70 %.
        k = next(i for i, body in enumerate(requests) if SUMMARY in json.dumps(body))
        previous = requests[k - 1]["messages"]
        before = previous + [
            {"role": "assistant", "content": answer(k)},
            {"role": "user", "content": question(k + 1)},
        ]
        threshold = int(WINDOW * 0.7)
        assert estimate_tokens(previous) <= threshold < estimate_tokens(before)
        # Everything but the last two turns (the latest user message included) went.
        count = 2 * (k + 1 - 2)
        sent = sent_texts(requests[k])
        assert question(k + 1) in sent and question(k) in sent and answer(k) in sent
        assert question(k - 1) not in sent and question(1) not in sent
        assert estimate_tokens(requests[k]["messages"]) < threshold
        # One marker, in the conversation and in the database, with that count.
        [marker] = markers(app)
        assert f"⋯ {count} older messages summarized" in str(marker.title)
        assert marker.collapsed
        [stored] = [item for item in app.session.items if item.type == "compaction"]
        assert stored.meta["count"] == count and stored.meta["summary"] == SUMMARY
        # The scrollback keeps every message; only the model's view changed.
        assert len([i for i in app.session.items if i.type == "user"]) == 16


async def test_compact_command_summarises_on_demand(
    fake: FakeOpenAI, make_compaction_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder()
    app = make_compaction_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 4)
        assert summary_requests(fake) == []  # far below the threshold
        await run(pilot, "/compact")
        [marker] = markers(app)
        assert "⋯ 4 older messages summarized" in str(marker.title)
        [summarised] = summary_requests(fake)
        prompt = summarised["messages"][1]["content"]
        assert question(1) in prompt and answer(2) in prompt and question(3) not in prompt
        await ask(pilot, 5, 5)
        sent = sent_texts(chat_requests(fake)[-1])
        assert any(SUMMARY in text for text in sent)
        assert question(2) not in sent and question(3) in sent
        # Once more: the turn before the kept two goes, folded into the summary.
        await run(pilot, "/compact")
        assert "⋯ 2 older messages summarized" in str(markers(app)[-1].title)
        assert SUMMARY in summary_requests(fake)[-1]["messages"][1]["content"]
        # Nothing older than the kept turns is left: says so, adds no marker.
        await run(pilot, "/compact")
        assert texts(app, InfoItem)[-1] == (
            "Nothing to compact yet: the latest 2 turns always stay word for word "
            "(compaction.keep_recent_turns), and there are 2 so far."
        )
        assert len(markers(app)) == 2
        assert app.state == "idle"


async def test_compact_refused_while_a_reply_streams(
    fake: FakeOpenAI, make_compaction_app: Callable[..., QwenmemApp]
) -> None:
    gate = threading.Event()
    fake.responder = responder()
    app = make_compaction_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 3)
        fake.script(Reply("a slow reply", gate=gate))
        await send(pilot, question(4))
        await wait_until(pilot, lambda: app.state == "responding")
        await send(pilot, "/compact")
        await wait_until(pilot, lambda: COMPACT_BUSY in texts(app, InfoItem))
        gate.set()
        await settle(pilot)
        assert summary_requests(fake) == []
        assert markers(app) == []


# --- pinning --------------------------------------------------------------------------


async def test_pinned_message_is_sent_verbatim_after_compaction(
    fake: FakeOpenAI, make_compaction_app: Callable[..., QwenmemApp], paths: Paths
) -> None:
    fake.responder = responder()
    app = make_compaction_app()
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, "/pin")
        assert texts(app, InfoItem)[-1] == PIN_NOTHING
        await ask(pilot, 1, 1)
        await run(pilot, "/pin")
        assert texts(app, InfoItem)[-1].startswith(f"📌 Pinned (assistant): “{answer(1)}”")
        await ask(pilot, 2, 4)
        await run(pilot, "/compact", question(5))
        sent = chat_requests(fake)[-1]["messages"]
        # The pinned reply, as it was; its question and the other old turns summarised.
        assert {"role": "assistant", "content": answer(1)} in sent
        assert question(1) not in sent_texts(chat_requests(fake)[-1])
        assert answer(2) not in sent_texts(chat_requests(fake)[-1])
        session_id = app.session.info.id
    # The pin is stored, so a resumed session carries it too.
    db = await Database.open(paths.db_file)
    try:
        items = await SessionStore(db).load_items(session_id)
    finally:
        await db.close()
    assert [i.content for i in items if i.meta.get("pinned")] == [answer(1)]


async def test_pin_key_and_unpin(
    fake: FakeOpenAI, make_compaction_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder()
    app = make_compaction_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 1)
        assert ("^p", "Pin") in list(app.describe_keys())
        await pilot.press("ctrl+p")
        await settle(pilot)
        pinned = [i for i in app.session.items if i.meta.get("pinned")]
        assert [i.content for i in pinned] == [answer(1)]
        await run(pilot, "/unpin")
        assert texts(app, InfoItem)[-1] == f"Unpinned: “{answer(1)}”"
        assert not any(i.meta.get("pinned") for i in app.session.items)
        await run(pilot, "/unpin")
        assert texts(app, InfoItem)[-1] == UNPIN_NOTHING


async def test_pin_key_can_be_remapped(
    fake: FakeOpenAI, make_compaction_app: Callable[..., QwenmemApp], small_window: Settings
) -> None:
    small_window.keys["compaction.pin"] = "f2"
    fake.responder = responder()
    app = make_compaction_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 1)
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert not any(i.meta.get("pinned") for i in app.session.items)
        await pilot.press("f2")
        await settle(pilot)
        assert [i.content for i in app.session.items if i.meta.get("pinned")] == [answer(1)]


# --- resume ---------------------------------------------------------------------------


async def test_marker_survives_resume_and_expands(
    fake: FakeOpenAI, make_compaction_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder()
    app = make_compaction_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 4)
        await run(pilot, "/compact")
    app = make_compaction_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        [marker] = markers(app)
        assert "⋯ 4 older messages summarized" in str(marker.title)
        assert marker.collapsed
        await pilot.click(marker.query_one("CollapsibleTitle"))
        await settle(pilot)
        assert not marker.collapsed
        assert SUMMARY in str(marker.query_one(".compaction-summary", Static).render())
        # The resumed model view is the compacted one.
        await ask(pilot, 5, 5)
        sent = sent_texts(chat_requests(fake)[-1])
        assert any(SUMMARY in text for text in sent) and question(1) not in sent


# --- failures -------------------------------------------------------------------------


async def test_failing_summariser_on_compact_leaves_history_untouched(
    fake: FakeOpenAI, make_compaction_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder(HTTPError(500, {"error": {"message": "fast model down"}}))
    app = make_compaction_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, 1, 4)
        await run(pilot, "/compact")
        [error] = texts(app, ErrorItem)
        assert error.startswith("✗ Compaction failed, history left as is:")
        assert "\n" not in error
        assert markers(app) == []
        assert not any(i.type == "compaction" for i in app.session.items)
        await ask(pilot, 5, 5)
        sent = sent_texts(chat_requests(fake)[-1])
        assert all(question(n) in sent for n in range(1, 6))
        assert app.state == "idle"


async def test_failing_summariser_at_the_threshold_warns_once(
    fake: FakeOpenAI, make_compaction_app: Callable[..., QwenmemApp]
) -> None:
    fake.responder = responder(HTTPError(500, {"error": {"message": "fast model down"}}))
    app = make_compaction_app()
    warnings: list[str] = []
    notify = app.notify

    def record(message: str, **kwargs: object) -> None:
        if kwargs.get("severity") == "warning":
            warnings.append(message)
        notify(message, **kwargs)  # type: ignore[arg-type]

    app.notify = record  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        turns = 0
        while not summary_requests(fake):
            turns += 1
            await ask(pilot, turns, turns)
        [warning] = warnings
        assert warning.startswith("Compaction failed, history left as is:") and "\n" not in warning
        assert not any(i.type == "compaction" for i in app.session.items)
        # The request that crossed the threshold still carried the whole history.
        sent = sent_texts(chat_requests(fake)[-1])
        assert all(question(n) in sent for n in range(1, turns + 1))


# --- memory ---------------------------------------------------------------------------


async def test_compaction_hands_the_block_to_memory_extraction_first(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], small_window: Settings
) -> None:
    fake.responder = responder()
    app = make_app(extensions=default_extensions(small_window))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert isinstance(app.session.hooks[0], CompactionHook)  # before memory prefetch
        await ask(pilot, 1, 3)
        await run(pilot, "/compact")
        await wait_until(pilot, lambda: bool(summary_requests(fake)))
        side = [b for b in fake.chat_requests if b["model"] == "test-fast"]
        handover = next(
            i
            for i, body in enumerate(side)
            if is_extraction_request(body) and question(1) in body["messages"][1]["content"]
        )
        assert handover < side.index(summary_requests(fake)[0])
        assert markers(app)


def test_compaction_follows_the_setting(settings: Settings) -> None:
    assert default_extensions(settings)[:2] == [memory_extension, compaction_extension]
    settings.compaction.enabled = False
    assert compaction_extension not in default_extensions(settings)
    assert memory_extension in default_extensions(settings)


# --- snapshot -------------------------------------------------------------------------


async def _seed_compacted(paths: Paths, project: Path, clock: FakeClock) -> None:
    """A session whose first two turns were compacted, with two turns after the marker."""
    old = conversation("Why is the upload test flaky?", "The retry loop sleeps on the real clock.")
    old += conversation("Use a fake clock, not sleeps.", "Done: `Uploader(clock=...)`.")
    info = await seed_session(paths, project, "upload test", old, clock=clock)
    db = await Database.open(paths.db_file)
    try:
        store = SessionStore(db, clock=clock)
        cut = (await store.load_items(info.id))[-1].id
        marker = {
            "summary": "The upload test was flaky: the retry loop slept on the real clock. "
            "The Uploader now takes an injected clock.",
            "decisions": ["Use a fake clock in tests, never sleeps."],
            "count": 4,
            "total": 4,
            "cut_item_id": cut,
            "pinned_ids": [],
        }
        recent = [("compaction", "⋯ 4 older messages summarized", None, marker)]
        recent += conversation("Now add the 429 case.", "Added `test_upload_retries_on_429`.")
        for type_, content, message, meta in recent:
            await store.add_item(Item(None, info.id, type_, content, message, meta, clock()))
    finally:
        await db.close()


def test_snapshot_conversation_with_an_expanded_marker(
    snap_compare: Callable[..., bool],
    make_compaction_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
    clock: FakeClock,
) -> None:
    asyncio.run(_seed_compacted(paths, project, clock))

    async def expand(pilot: Pilot) -> None:
        pilot.app.screen.query_one(PromptInput).cursor_blink = False
        await settle(pilot)
        await pilot.click("CompactionMarker CollapsibleTitle")
        pilot.app.screen.query_one(PromptInput).focus()
        await settle(pilot)

    assert snap_compare(make_compaction_app(resume=True), terminal_size=(80, 34), run_before=expand)
