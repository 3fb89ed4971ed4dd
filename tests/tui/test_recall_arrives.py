"""Recall that arrives, and receipts that tell the truth (issue 39), in the real app.

The TUI never waits for recall: it warms it as the prompt's text settles, so a quick
typist's Enter 200 ms after the last key (or a paste) finds it ready. The 200 ms pause
below is the user's, the scenario under test, not a wait for the app: everything the
app does is awaited by condition.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual import events

from qwenmem_tui.config import Settings
from qwenmem_tui.features.memory.feature import MEMORY_SESSION
from qwenmem_tui.features.memory.receipts import RECEIPT_ITEM
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.features.memory.receipt import MemoryReceipt
from qwenmem_tui.tui.screens import chat as chat_screen
from qwenmem_tui.tui.widgets.plain_items import ErrorItem
from qwenmem_tui.memory.model import WriteRequest

from .conftest import FakeClock, settle, started, wait_until

SIZE = (100, 30)
FACT = "The staging database runs on port 6543"
QUESTION = "Which port does the staging database use?"
USERS_PAUSE_S = 0.2
"""Enter this long after the last key or the paste: a quick typist."""


@pytest.fixture
async def remembered(settings: Settings, paths: Paths, project: Path, clock: FakeClock) -> None:
    service = await MemoryService.open(settings, paths, clock=clock)
    try:
        await service.save(
            WriteRequest(
                "project",
                "staging_db_port",
                FACT,
                origin="user",
                project=project_id(project),
            )
        )
    finally:
        await service.close()


def first_chat_request(fake: FakeOpenAI) -> dict:
    return [body for body in fake.chat_requests if body["model"] == "test-model"][0]


def carries_the_fact(request: dict) -> bool:
    user = request["messages"][-1]
    return user["role"] == "user" and FACT in user["content"]


async def open_app(pilot_app: QwenmemApp, pilot) -> object:  # type: ignore[no-untyped-def]
    await started(pilot)
    prefetch = pilot_app.session_features.handle(MEMORY_SESSION).prefetch
    await wait_until(pilot, lambda: not prefetch.memory_opening)
    return prefetch


async def test_a_message_typed_and_sent_200ms_after_its_last_key_carries_its_memory(
    remembered: None, fake: FakeOpenAI, settings: Settings, make_app: Callable[..., QwenmemApp]
) -> None:
    assert settings.memory.initial_wait_ms == 0  # the TUI's rule: recall is never awaited
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        prefetch = await open_app(app, pilot)
        await pilot.press(*QUESTION)  # key by key, as typed
        await pilot.pause(USERS_PAUSE_S)
        await pilot.press("enter")
        await settle(pilot)
    assert carries_the_fact(first_chat_request(fake))
    assert prefetch.stats.warm_adopted == 1


async def test_a_paste_starts_recall_at_once_and_sent_200ms_later_carries_its_memory(
    remembered: None, fake: FakeOpenAI, make_app: Callable[..., QwenmemApp],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Typing would wait a minute to settle: only the paste itself can start recall here.
    monkeypatch.setattr(chat_screen, "WARM_DELAY", 60.0)
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        prefetch = await open_app(app, pilot)
        app.post_message(events.Paste(QUESTION))
        await wait_until(pilot, lambda: prefetch.warm_handle is not None)
        assert prefetch.warm_handle.text == QUESTION
        await pilot.pause(USERS_PAUSE_S)
        await pilot.press("enter")
        await settle(pilot)
    assert carries_the_fact(first_chat_request(fake))


UPSTREAM_DOWN = HTTPError(500, {"error": {"message": "upstream down", "type": "server_error"}})


@pytest.mark.parametrize(
    "replies",
    [
        pytest.param([UPSTREAM_DOWN], id="failed"),
        # e2e9: the first request (memory in it) was answered with a tool call, the next
        # one failed: "✗ … HTTP 500" then "⌁ 1 memory" read as memory that served a reply.
        pytest.param(
            [Reply(tool_calls=[ToolCallSpec("list_directory", {"path": "."})]), UPSTREAM_DOWN],
            id="failed_after_a_tool_call",
        ),
    ],
)
async def test_a_reply_that_failed_shows_no_receipt(
    replies: list[Reply | HTTPError],
    remembered: None,
    fake: FakeOpenAI,
    settings: Settings,
    make_app: Callable[..., QwenmemApp],
) -> None:
    """The memory was in the request, but no model answered the reply: no `⌁ 1 memory`."""
    settings.memory.initial_wait_ms = 30_000  # recall surely in the first request
    fake.script(*replies)
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        await open_app(app, pilot)
        app.screen.prompt.insert(QUESTION)
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(app.screen.query(ErrorItem)))
        await settle(pilot)
        assert carries_the_fact(first_chat_request(fake))
        assert len([b for b in fake.chat_requests if b["model"] == "test-model"]) == len(replies)
        assert not app.screen.query(MemoryReceipt)
        assert not [item for item in app.session.items if item.type == RECEIPT_ITEM]
