"""Issue 25 item 5: a 5 MB paste, then /remember, then quit — in the real app.

What is embedded is recorded at the embedder (the suite's hash embedder, real code):
nothing longer than one window ever reaches it, so the /remember right after the paste
is embedded at once, the query lane is free when the app quits, and the prompt history
keeps no 5 MB entry.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual import events

from qwenmem_tui.memory.embed import (
    LONG_QUERY_CHARS,
    PASSAGE_MAX_CHARS,
    HashEmbedder,
)
from qwenmem_tui.paths import Paths
from qwenmem_tui.prompt_history import HISTORY_FILE_NAME
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.widgets.plain_items import InfoItem
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import SIZE, send, settle

PASTE = "2026-12-01 12:00:01 INFO deploy step finished, build is green\n" * 85_000  # ~5.3 MB


async def test_a_huge_paste_then_remember_then_quit(
    make_app: Callable[..., QwenmemApp], fake: FakeOpenAI, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedded: list[int] = []
    real = HashEmbedder.embed_sync

    def recording(self: HashEmbedder, texts):  # type: ignore[no-untyped-def]
        embedded.extend(len(t) for t in texts)
        return real(self, texts)

    monkeypatch.setattr(HashEmbedder, "embed_sync", recording)
    assert len(PASTE) > 5_000_000
    fake.responder = lambda body: Reply("That is a deploy log.")
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        prompt = app.screen.query_one(PromptInput)
        prompt.focus()
        prompt.post_message(events.Paste(PASTE))
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot)
        await send(pilot, "/remember deploys go out on Tuesdays")
        await settle(pilot)
        remembered = [str(w.render()) for w in app.screen.query(InfoItem)]
        await pilot.press("ctrl+q")
    sent = [m["content"] for r in fake.chat_requests for m in r["messages"] if m["role"] == "user"]
    assert any(PASTE.strip() in text for text in sent)  # the whole paste went to the model
    assert any(line.startswith("Remembered #") and "Tuesdays" in line for line in remembered), remembered
    assert embedded and max(embedded) <= max(LONG_QUERY_CHARS, PASSAGE_MAX_CHARS)
    history = (paths.home / HISTORY_FILE_NAME).read_text()
    assert "Tuesdays" in history and len(history) < 100_000
