"""Memory trust in the real app (issue 14): what is held shows in the status line, a
secret typed into /remember reaches neither the screen, the table nor the debug log,
and /forget cannot touch another user's memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trust_corpus import SECRETS

from qwenmem_tui.config import Settings
from qwenmem_tui.memory.model import Status, WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.widgets.plain_items import ErrorItem, InfoItem
from qwenmem_tui.tui.widgets.status_line import StatusLine

from .conftest import FakeClock, send, settle, wait_until
from .test_memory_tui import held_from_a_file

SIZE = (120, 34)


def infos(app: QwenmemApp) -> list[str]:
    return [str(widget.render()) for widget in app.screen.query(InfoItem)]


async def run(pilot, *texts: str) -> None:  # type: ignore[no-untyped-def]
    for text in texts:
        await send(pilot, text)
        await settle(pilot)


def status_text(app: QwenmemApp) -> str:
    return str(app.screen.query_one(StatusLine).render())


async def test_a_write_held_while_reading_a_file_shows_in_the_status_line(
    make_app: Callable[..., QwenmemApp], fake: FakeOpenAI, project: Path
) -> None:
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, "/memory")  # the service is open
        await pilot.press("escape")
        await settle(pilot)
        assert "await" not in status_text(app)
        await held_from_a_file(pilot, fake, project)
        await wait_until(pilot, lambda: "1 memory awaits review" in status_text(app))
        notices = [n.message for n in app._notifications]
        assert "1 memory awaits review: open /memory to approve or forget it." in notices
        # The model is told it was held, so it does not claim it saved it.
        tool_answer = fake.chat_requests[-1]["messages"][-1]["content"]
        assert tool_answer.startswith("Memory #1 was held for review (flags: untrusted_source")
        # Approving it on /memory clears the count.
        await run(pilot, "/memory")
        await pilot.press("a")
        await settle(pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: "await" not in status_text(app))


async def test_a_secret_typed_into_remember_stays_off_screen_table_and_log(
    make_app: Callable[..., QwenmemApp], settings: Settings, paths: Paths, clock: FakeClock
) -> None:
    formats = [s for s in SECRETS if s.name in ("anthropic", "stripe live", "password for admin", "slack webhook")]
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        for fmt in formats:
            await run(pilot, f"/remember {fmt.text}")
        lines = infos(app)
        errors = [str(widget.render()) for widget in app.screen.query(ErrorItem)]
        screen = app.export_screenshot()
    # "claude key … in prod" and "alerts go to …" keep words worth remembering; "stripe
    # secret …" and "the password for admin is …" are nothing but the secret: refused.
    assert len(lines) == 2 and all(line.startswith("Remembered #") for line in lines)
    assert len(errors) == 2 and all("Not remembered: it holds a secret" in e for e in errors)
    log_text = "".join(p.read_text() for p in paths.debug_dir.glob("*.txt"))
    db = b"".join(p.read_bytes() for p in paths.home.glob("qwenmem.db*")).decode("utf-8", "replace")
    for fmt in formats:
        for where, text in (("screen", screen), ("debug log", log_text), ("database", db)):
            assert fmt.secret not in text, (fmt.name, where)
    service = await MemoryService.open(settings, paths, clock=clock)
    try:
        rows = await service.list()
    finally:
        await service.close()
    assert [m.status for m in rows] == [Status.ACTIVE] * 2
    assert all("[REDACTED]" in m.value and "redacted" not in m.key for m in rows)


async def test_forget_cannot_touch_another_users_memory(
    make_app: Callable[..., QwenmemApp], settings: Settings, paths: Paths, clock: FakeClock
) -> None:
    alice_settings = settings.model_copy(deep=True)
    alice_settings.general.user = "alice"
    alice = await MemoryService.open(alice_settings, paths, clock=clock)
    try:
        mine = await alice.save(
            WriteRequest("user", "editor", "Alice edits with helix", origin="user", project="p")
        )
    finally:
        await alice.close()
    settings.general.user = "bob"
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        await run(pilot, f"/forget {mine.memory.id}", "/forget 99999999999999999999")
        assert infos(app) == [
            f"No memory with id {mine.memory.id}",
            "No memory with id 99999999999999999999",
        ]
    alice = await MemoryService.open(alice_settings, paths, clock=clock)
    try:
        assert (await alice.get(mine.memory.id)).status is Status.ACTIVE  # type: ignore[union-attr]
    finally:
        await alice.close()
