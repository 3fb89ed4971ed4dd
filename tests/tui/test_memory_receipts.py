"""Memory receipts under replies (issue 29): what reached the model, and fixing it there."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from qwenmem_tui.config import Settings
from qwenmem_tui.features.export.formats import export_session
from qwenmem_tui.memory.model import DAY, AuditAction, Status
from qwenmem_tui.features.memory.receipts import RECEIPT_ITEM
from qwenmem_tui.memory.review import waiting_label
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.sqlite_store import SqliteMemoryStore
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.memory.edit import EditMemoryScreen
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.features.memory.receipt import MemoryReceipt, ReceiptEntries
from qwenmem_tui.tui.widgets.plain_items import ErrorItem, InfoItem
from qwenmem_tui.tui.widgets.prompt import PromptInput
from qwenmem_tui.tui.widgets.status_line import StatusLine

from .conftest import FakeClock, send, settle, wait_until
from .test_memory_tui import MemoryDetail, column, open_memory_screen, select_row

SIZE = (100, 30)


@pytest.fixture
def make_memory_app(
    make_app: Callable[..., QwenmemApp], settings: Settings
) -> Callable[..., QwenmemApp]:
    # Delivery at the UserQuery point every time: recall settles in milliseconds.
    settings.memory.initial_wait_ms = 30_000
    return lambda **kw: make_app(extensions=[memory_extension], **kw)


async def run(pilot: Pilot, *texts: str) -> None:
    for text in texts:
        await send(pilot, text)
        await settle(pilot)


def receipts(app: QwenmemApp) -> list[MemoryReceipt]:
    return list(app.screen.query(MemoryReceipt))


def one_memory(text: str) -> bool:
    """The count line of a receipt of one memory, with what its block cost."""
    return re.fullmatch(r"⌁ 1 memory · \d+ tokens", text) is not None


def line(receipt: MemoryReceipt) -> str:
    return "\n".join(receipt.receipt.lines())


def chat_requests(fake: FakeOpenAI) -> list[dict]:
    return [body for body in fake.chat_requests if body["model"] == "test-model"]


@asynccontextmanager
async def fresh_service(settings: Settings, paths: Paths, clock: FakeClock) -> AsyncIterator[MemoryService]:
    """The home's memory as another process (the CLI) reads it after the app."""
    service = await MemoryService.open(settings, paths, clock=clock)
    try:
        yield service
    finally:
        await service.close()


async def correct_first(pilot: Pilot, remembered: str, asked: str, key: str) -> MemoryReceipt:
    """Remember a fact, ask about it, open the reply's receipt and press `key` on it."""
    await run(pilot, f"/remember {remembered}", asked)
    [receipt] = receipts(pilot.app)
    await opened(pilot, receipt)
    await pilot.press(key)
    return receipt


async def opened(pilot: Pilot, receipt: MemoryReceipt) -> ReceiptEntries:
    await pilot.press("ctrl+o")
    entries = receipt.query_one(ReceiptEntries)
    await wait_until(pilot, lambda: receipt.is_open and pilot.app.focused is entries)
    return entries


async def test_a_reply_that_used_memory_shows_its_receipt_and_lists_it(
    make_memory_app: Callable[..., QwenmemApp],
) -> None:
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, "/remember I live in Lisbon", "hello there")
        assert receipts(app) == []  # nothing recalled for a greeting: no receipt
        await run(pilot, "where do I live?")
        [receipt] = receipts(app)
        assert one_memory(line(receipt))
        [memory] = receipt.receipt.memories
        assert (memory.key, memory.value, memory.origin) == ("home_city", "I live in Lisbon", "user")
        entries = await opened(pilot, receipt)
        shown = str(entries.get_option_at_index(0).prompt)
        assert "#1 user/home_city: I live in Lisbon" in shown
        assert "saved just now · origin user" in shown
        assert "recalled for this message" in shown and "score" in shown


async def test_memories_re_sent_with_later_requests_are_on_their_receipts(
    make_memory_app: Callable[..., QwenmemApp],
) -> None:
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, "/remember I live in Lisbon", "where do I live?", "thanks!")
        first, second = receipts(app)
        assert line(first) == line(second) and one_memory(line(first))
        assert second.receipt.memories[0].point == "in_view"
        assert "in view since an earlier message" in second.receipt.memories[0].why()


async def test_receipts_come_back_with_resume(
    make_memory_app: Callable[..., QwenmemApp],
) -> None:
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, "/remember I live in Lisbon", "where do I live?")
        assert len(receipts(app)) == 1
    app = make_memory_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        [receipt] = receipts(app)
        assert one_memory(line(receipt))
        assert receipt.receipt.memories[0].value == "I live in Lisbon"
        stored = [i for i in app.session.items if i.type == RECEIPT_ITEM]
        assert len(stored) == 1 and stored[0].message is None  # never sent to the model
        # And in exports (/export, `qwenmem sessions export`): the line, then the memory.
        exported = export_session(app.session.info, app.session.items, now=app.clock())
        assert re.search(r"\*⌁ 1 memory · \d+ tokens\*\n", exported)
        assert "\n- #1 `user/home_city`: I live in Lisbon (saved just now, origin user;" in exported
        assert "recalled for this message" in exported
        data = json.loads(export_session(app.session.info, app.session.items, "json"))
        [item] = [i for i in data["items"] if i["type"] == RECEIPT_ITEM]
        assert item["meta"]["memories"][0]["value"] == "I live in Lisbon"


async def test_a_save_during_the_reply_shows_on_the_receipt(
    fake: FakeOpenAI, make_memory_app: Callable[..., QwenmemApp]
) -> None:
    save = {"category": "user", "key": "home_city", "value": "The user lives in Porto"}
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, "/remember I live in Lisbon")
        fake.script(
            Reply(tool_calls=[ToolCallSpec("save_memory", save, id="call_s")]), Reply("Noted.")
        )
        await run(pilot, "I moved to Porto, remember that")
        [receipt] = receipts(app)
        assert "⌁ saved user/home_city (replaces the previous value)" in line(receipt)


async def test_forget_from_the_receipt_in_two_keys_leaves_the_running_session(
    fake: FakeOpenAI,
    make_memory_app: Callable[..., QwenmemApp],
    settings: Settings,
    paths: Paths,
    clock: FakeClock,
) -> None:
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        receipt = await correct_first(pilot, "I live in Lisbon", "where do I live?", "f")
        await wait_until(pilot, lambda: 1 in receipt.receipt.corrections)
        assert "forgotten" in str(receipt.query_one(ReceiptEntries).get_option_at_index(0).prompt)
        await run(pilot, "and now?")
        assert "Lisbon" not in json.dumps(chat_requests(fake)[-1]["messages"])
    async with fresh_service(settings, paths, clock) as service:
        [memory] = await service.list(statuses=None)
        assert memory.status is Status.DELETED
        assert [e.action for e in await service.audit(memory.id)][-1] is AuditAction.FORGET


async def test_edit_from_the_receipt_supersedes_and_is_live_at_once(
    fake: FakeOpenAI, make_memory_app: Callable[..., QwenmemApp]
) -> None:
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        receipt = await correct_first(pilot, "I live in Lisbon", "where do I live?", "e")
        await wait_until(pilot, lambda: isinstance(app.screen, EditMemoryScreen))
        field = app.screen.query_one(Input)
        field.value = "I live in Porto"
        await pilot.press("enter")
        await wait_until(pilot, lambda: 1 in receipt.receipt.corrections)
        await run(pilot, "and now?")
        request = json.dumps(chat_requests(fake)[-1]["messages"])
        assert "I live in Porto" in request and "Lisbon" not in request
        assert one_memory(line(receipts(app)[-1]))
        assert receipts(app)[-1].receipt.memories[0].value == "I live in Porto"


async def test_not_relevant_here_stays_out_for_similar_messages_in_the_project(
    fake: FakeOpenAI,
    make_memory_app: Callable[..., QwenmemApp],
    settings: Settings,
    paths: Paths,
    clock: FakeClock,
) -> None:
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        receipt = await correct_first(
            pilot, "the deploy script is deploy.sh", "how do I deploy the app?", "n"
        )
        await wait_until(pilot, lambda: 1 in receipt.receipt.corrections)
        # Out of this session's requests at once, and no new receipt lists it.
        await run(pilot, "ok and then?")
        assert "deploy.sh" not in json.dumps(chat_requests(fake)[-1]["messages"])
        assert len(receipts(app)) == 1
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, "how do I deploy the app?")  # alike: left out
        assert "deploy.sh" not in json.dumps(chat_requests(fake)[-1]["messages"])
        assert receipts(app) == []
        await run(pilot, "/clear", "where is the deploy script?")  # another question finds it
        assert "deploy.sh" in json.dumps(chat_requests(fake)[-1]["messages"])
    async with fresh_service(settings, paths, clock) as service:
        trail = await service.audit(1)
        assert trail[-1].action is AuditAction.DISMISS
        assert trail[-1].new_value == "how do I deploy the app?"


async def test_the_receipt_keys_are_in_help_and_the_footer(
    make_memory_app: Callable[..., QwenmemApp],
) -> None:
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, "/help")
        shown = str(app.screen.query(InfoItem).last().render())
        assert "Memories used" in shown, shown
        assert "On a listed memory: forget it" in shown and "not relevant here" in shown
        await run(pilot, "/remember I live in Lisbon", "where do I live?")
        entries = await opened(pilot, receipts(app)[-1])
        keys = {b.key: b.description for b in entries.BINDINGS}
        assert keys == {"f": "Forget", "e": "Edit value", "n": "Not relevant here"}
        footer = {binding.binding.key for binding in app.screen.active_bindings.values() if binding.binding.show}
        assert {"f", "e", "n"} <= footer


async def test_the_receipt_key_is_remapped_from_settings(
    make_memory_app: Callable[..., QwenmemApp], settings: Settings
) -> None:
    """An extension's key joins the app after it is built and still follows [keys]
    (it was refused as an unknown id before)."""
    settings.keys = {"memory.receipt": "f4"}
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, "/remember I live in Lisbon", "where do I live?")
        [receipt] = receipts(app)
        await pilot.press("ctrl+o")
        await settle(pilot)
        assert not receipt.is_open
        await pilot.press("f4")
        await wait_until(pilot, lambda: receipt.is_open)
        shown = dict(app.describe_keys())
        assert shown.get("f4") == "Memories used" and "ctrl+o" not in shown, shown


def test_snapshot_a_reply_with_its_receipt_open(
    snap_compare: Callable[..., bool],
    fake: FakeOpenAI,
    make_memory_app: Callable[..., QwenmemApp],
) -> None:
    async def chat(pilot: Pilot) -> None:
        await run(pilot, "/remember I live in Lisbon", "/remember I prefer tabs over spaces")
        fake.script(Reply("You live in **Lisbon**, and you like tabs."))
        await run(pilot, "where do I live and how do I indent?")
        await opened(pilot, receipts(pilot.app)[-1])
        pilot.app.screen.query_one(PromptInput).cursor_blink = False
        await settle(pilot)

    assert snap_compare(make_memory_app(), terminal_size=SIZE, run_before=chat)


async def test_edit_on_the_memory_screen_is_live_in_the_running_session(
    fake: FakeOpenAI, make_memory_app: Callable[..., QwenmemApp]
) -> None:
    app = make_memory_app()
    async with app.run_test(size=(120, 34)) as pilot:
        await run(pilot, "/remember I live in Lisbon", "where do I live?")
        screen = await open_memory_screen(pilot)
        await select_row(pilot, screen, 1)
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, EditMemoryScreen))
        app.screen.query_one(Input).value = "I live in Porto"
        await pilot.press("enter")
        await wait_until(pilot, lambda: column(screen, "id") == ["2"])
        await select_row(pilot, screen, 2)
        await wait_until(
            pilot,
            lambda: "edited by the user (was #1)"
            in str(screen.query_one(MemoryDetail).query_one("#memory-detail-text").render()),
        )
        await pilot.press("escape")
        await run(pilot, "and now?")
        request = json.dumps(chat_requests(fake)[-1]["messages"])
        assert "I live in Porto" in request and "Lisbon" not in request


async def test_the_weekly_review_is_offered_on_memory_and_kept_rows_are_audited(
    make_memory_app: Callable[..., QwenmemApp],
    settings: Settings,
    paths: Paths,
    clock: FakeClock,
) -> None:
    app = make_memory_app()
    async with app.run_test(size=(120, 34)) as pilot:
        await run(pilot, "/remember I live in Lisbon", "/remember I prefer tabs over spaces")
        badges = app.screen.query_one(StatusLine).badges
        assert waiting_label(2) not in badges.values()  # written today: nothing is due
    clock.advance(8 * DAY)
    app = make_memory_app()
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        status = app.screen.query_one(StatusLine)
        await wait_until(pilot, lambda: waiting_label(2) in status.badges.values())
        screen = await open_memory_screen(pilot)
        assert "review 2 memories: w shows them, v keeps" in str(
            screen.query_one("#memory-title").render()
        )
        await pilot.press("w")
        await select_row(pilot, screen, 1)
        await pilot.press("v")
        await wait_until(pilot, lambda: column(screen, "id") == ["2"])  # the sample left
        await pilot.press("escape")
        await wait_until(pilot, lambda: waiting_label(1) in status.badges.values())
    async with fresh_service(settings, paths, clock) as service:
        trail = await service.audit(1)
        assert (trail[-1].action, trail[-1].reason) == (AuditAction.REVIEW, "kept in the sampled review")
        stats = await service.stats()  # what `memory stats` prints
        assert (stats.reviewed, stats.reviewed_of, stats.to_json()["reviewed_share"]) == (1, 2, 0.5)
        assert "reviewed              50.0%  (1/2 active memories" in stats.to_text()


async def test_a_correction_the_store_cannot_make_is_one_line_not_a_crash(
    make_memory_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unsupported(self: object, *args: object, **kwargs: object) -> None:
        raise NotImplementedError("'not relevant here' needs the SQLite memory store")

    monkeypatch.setattr(SqliteMemoryStore, "dismiss", unsupported)
    app = make_memory_app()
    async with app.run_test(size=SIZE) as pilot:
        receipt = await correct_first(pilot, "I live in Lisbon", "where do I live?", "n")
        await settle(pilot)
        assert [str(e.render()) for e in app.screen.query(ErrorItem)] == [
            "✗ Not done: 'not relevant here' needs the SQLite memory store."
        ]
        assert receipt.receipt.corrections == {}
        assert app.is_running
