"""Issue 25 item 4: a message holding a secret asks first — send redacted, edit, or
cancel — and the raw secret reaches neither the model nor the session history."""

from __future__ import annotations

import json
from collections.abc import Callable

from qwenmem_tui.paths import Paths
from qwenmem_tui.prompt_history import HISTORY_FILE_NAME
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.screens.secret_confirm import SecretConfirm
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import SIZE, send, settle, wait_until

TOKEN = "ghp_R2d4F6h8J0k2L4m6N8p0Q2r4S6t8V0w2X4y6"
MESSAGE = f"deploy with token {TOKEN} to staging"


async def ask(pilot, text: str) -> SecretConfirm:  # type: ignore[no-untyped-def]
    await send(pilot, text)
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, SecretConfirm))
    return pilot.app.screen


async def test_send_redacted_edit_and_cancel(make_app: Callable[..., QwenmemApp], fake: FakeOpenAI, paths: Paths) -> None:
    fake.responder = lambda body: Reply("ok")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # Edit: the text comes back to the prompt, nothing is sent.
        confirm = await ask(pilot, MESSAGE)
        assert TOKEN not in app.export_screenshot() and "[REDACTED]" in confirm.redacted
        await pilot.press("e")
        await settle(pilot)
        prompt = app.screen.query_one(PromptInput)
        assert prompt.text == MESSAGE and fake.chat_requests == []
        prompt.load_text("")
        # Cancel: nothing is sent.
        await ask(pilot, MESSAGE)
        await pilot.press("escape")
        await settle(pilot)
        assert fake.chat_requests == []
        # Send redacted: the model and the history get the redacted text only.
        await ask(pilot, MESSAGE)
        await pilot.press("r")
        await settle(pilot)
        items = [i.content for i in app.session.items if i.type == "user"]
        # An ordinary message goes straight through.
        await send(pilot, "thanks")
        await settle(pilot)
    assert items == ["deploy with token [REDACTED] to staging"]
    sent = json.dumps(fake.chat_requests)
    assert TOKEN not in sent and "deploy with token [REDACTED] to staging" in sent and "thanks" in sent
    db = b"".join(p.read_bytes() for p in paths.home.glob("qwenmem.db*"))
    assert TOKEN.encode() not in db
    history = paths.home / HISTORY_FILE_NAME
    assert TOKEN not in history.read_text()
