"""Issue 16: the prompt as people use it — keys never lost, slash suggestions like
Claude Code, history on Up/Down, Esc and Ctrl+C, and what a busy app shows.

The real app against the fake server in a temp home, driven with Pilot.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path

from textual import events
from textual.widgets._collapsible import CollapsibleTitle

from qwenmem_tui.config import Settings
from qwenmem_tui.paths import Paths
from qwenmem_tui.prompt_history import HISTORY_FILE_NAME
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.host import SlashCommand
from qwenmem_tui.tui.screens.chat import QueuedMessages
from qwenmem_tui.tui.screens.secret_confirm import SecretConfirm
from qwenmem_tui.tui.widgets.plain_items import (
    ErrorItem,
    InfoItem,
    ToolCallItem,
    UserItem,
)
from qwenmem_tui.tui.widgets.prompt import CommandSuggestions, PromptInput
from qwenmem_tui.tui.widgets.status_line import SPINNER, StatusLine

from .conftest import (
    SIZE,
    conversation,
    seed_session,
    send,
    settle,
    started,
    wait_until,
)

SECRET = "sk-" + "A1b2C3d4E5f6G7h8J9k0L1m2"


def infos(app: QwenmemApp) -> list[str]:
    return [str(widget.render()) for widget in app.screen.query(InfoItem)]


def prompt_of(app: QwenmemApp) -> PromptInput:
    return app.screen.query_one(PromptInput)


# -- 1. focus: keys typed away from the prompt are not lost ----------------------------


async def test_typing_after_a_click_on_a_tool_call_goes_to_the_prompt(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})]),
        Reply("The README says hello."),
    )
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await send(pilot, "what is in the readme?")
        await settle(pilot)
        tool = app.screen.query_one(ToolCallItem)
        assert tool.collapsed
        await pilot.click(CollapsibleTitle)
        await pilot.pause()
        assert not tool.collapsed  # the click still expands
        assert app.focused is not prompt_of(app)
        await pilot.press("h", "i", "space", "t", "h", "e", "r", "e")
        assert prompt_of(app).text == "hi there"
        assert app.focused is prompt_of(app)
        # Esc brings the focus back from anywhere, too.
        await pilot.click(CollapsibleTitle)
        await pilot.pause()
        assert app.focused is not prompt_of(app)
        await pilot.press("escape")
        assert app.focused is prompt_of(app)
        await pilot.press("enter")
        await settle(pilot)
        assert [str(w.render()) for w in app.screen.query(UserItem)][-1] == "hi there"


async def test_a_paste_after_the_terminal_lost_focus_reaches_the_prompt(
    make_app: Callable[..., QwenmemApp],
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        # Switching windows to copy something blurs the app; no focus-in comes back
        # under tmux, so the paste is the first thing the app hears.
        app.post_message(events.AppBlur())
        await pilot.pause()
        assert app.focused is None
        app.post_message(events.Paste("pasted text"))
        await pilot.pause()
        assert prompt_of(app).text == "pasted text"
        assert app.focused is prompt_of(app)


# -- 2. slash suggestions -----------------------------------------------------------


async def test_a_burst_of_editing_keys_applies_in_the_order_typed(
    make_app: Callable[..., QwenmemApp],
) -> None:
    # Keys that arrive together (a fast typist while a stream is busy, tmux send-keys)
    # wait in the app's queue. Textual runs a widget's own bindings (backspace, the
    # arrows) only once the key has bubbled back up to the app: the characters queued
    # behind them reached the prompt first, and the backspaces then ate them.
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        prompt = prompt_of(app)
        prompt.focus()
        prompt.insert("helo")
        await pilot.pause()
        burst = [("backspace", None), ("backspace", None), ("l", "l"), ("o", "o")]
        burst += [("left", None), ("left", None), ("home", None), ("x", "x"), ("end", None)]
        burst += [("y", "y")]
        for key, character in burst:  # posted at once: they queue as a burst does
            app.post_message(events.Key(key, character))
        await pilot.pause()
        await pilot.pause()
        assert prompt.text == "xheloy"


async def test_enter_runs_the_highlighted_command(make_app: Callable[..., QwenmemApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("/", "h", "e", "enter")
        await settle(pilot)
        shown = infos(app)
        assert shown and shown[-1].startswith("Keys:")
        assert "Earlier / later messages" in shown[-1]  # /help tells about the history
        assert not any("Unknown command" in text for text in shown)
        assert prompt_of(app).text == ""
        # Typed ahead with nothing focused (the app still starting): the same.
        app.screen.set_focus(None)
        await pilot.press("/", "h", "e", "enter")
        await settle(pilot)
        assert [text for text in infos(app) if text.startswith("Keys:")][1:]
        assert prompt_of(app).text == ""


async def test_enter_completes_a_command_that_needs_an_argument(
    make_app: Callable[..., QwenmemApp],
) -> None:
    notes: list[str] = []
    app = make_app()
    app.commands.register(SlashCommand("note", "Take a note", lambda a, text: notes.append(text), "<text>"))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("/", "n", "o", "enter")
        assert prompt_of(app).text == "/note "
        assert notes == []
        await pilot.press("h", "i", "enter")
        await settle(pilot)
        assert notes == ["hi"]


async def test_the_suggestions_scroll_through_every_command(
    make_app: Callable[..., QwenmemApp],
) -> None:
    ran: list[str] = []
    app = make_app()
    for name in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "unpin"):
        app.commands.register(SlashCommand(name, f"The {name} command", lambda a, t, n=name: ran.append(n)))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("/")
        suggestions = app.screen.query_one(CommandSuggestions)
        names = [option.id for option in suggestions.options]
        assert len(names) == len(app.commands) > 10
        assert names[-1] == "unpin"
        await pilot.press("up")  # from the first, up wraps to the last
        assert suggestions.highlighted_option is not None
        assert suggestions.highlighted_option.id == "unpin"
        # Scrolled down to show it: the list scrolls after its next refresh, which a
        # key press's idle wait does not wait for.
        await wait_until(pilot, lambda: suggestions.scroll_offset.y > 0)
        await pilot.press("enter")
        await settle(pilot)
        assert ran == ["unpin"]


async def test_tab_completes_the_highlighted_command(make_app: Callable[..., QwenmemApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("/", "down", "tab")  # /clear, /help, ...: down highlights /help
        assert prompt_of(app).text == "/help "


async def test_a_lone_slash_and_enter_is_still_a_message(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("a slash?"))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("/", "enter")
        await settle(pilot)
        assert fake.chat_requests[-1]["messages"][-1] == {"role": "user", "content": "/"}


# -- 3. prompt history ----------------------------------------------------------------


async def test_up_recalls_earlier_messages_across_sessions_and_redacts_secrets(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], paths: Paths
) -> None:
    fake.script(Reply("one"), Reply("two"), Reply("three"))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await send(pilot, "first question")
        await settle(pilot)
        await send(pilot, "/help")  # a command in the history does not stop the walk
        await settle(pilot)
        await send(pilot, f"my key is {SECRET}")
        await wait_until(pilot, lambda: isinstance(app.screen, SecretConfirm))
        await pilot.press("r")  # the secret warning (issue 25): send it redacted
        await settle(pilot)
        await send(pilot, "second\nquestion")
        await settle(pilot)
    history_file = paths.home / HISTORY_FILE_NAME
    assert SECRET not in history_file.read_text()
    assert history_file.stat().st_mode & 0o777 == 0o600

    app = make_app()  # a new session in the same project
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        prompt = prompt_of(app)
        await pilot.press("d", "r", "a", "f", "t")
        await pilot.press("up")
        assert prompt.text == "second\nquestion"
        await pilot.press("up")  # on the last line of the recalled text: up a line
        assert prompt.text == "second\nquestion"
        await pilot.press("up")
        assert prompt.text.startswith("my key is ") and SECRET not in prompt.text
        await pilot.press("up")
        assert prompt.text == "/help"
        await pilot.press("up")
        assert prompt.text == "first question"
        await pilot.press("up")  # the oldest stays
        assert prompt.text == "first question"
        await pilot.press("down", "down", "down")
        assert prompt.text == "second\nquestion"
        await pilot.press("down", "down")
        assert prompt.text == "draft"  # past the newest: what was being typed
        await pilot.press("ctrl+r")  # Ctrl+R stays resume
        await pilot.pause()
        assert type(app.screen).__name__ == "ResumeScreen"


# -- 4. Esc with queued messages ------------------------------------------------------


async def test_escape_cancels_and_puts_the_queued_messages_back_for_editing(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    gate = threading.Event()
    fake.script(Reply("slow reply", gate=gate), Reply("must not be asked"))
    app = make_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            await send(pilot, "one")
            await wait_until(pilot, lambda: app.state == "responding")
            await send(pilot, "two")
            await send(pilot, "three")
            await pilot.pause()
            assert app.screen.query_one(StatusLine).queued == 2
            await pilot.press("escape")
            await settle(pilot)
            assert app.state == "idle"
            assert prompt_of(app).text == "two\nthree"
            assert not app.screen.query_one(QueuedMessages).display
            assert app.screen.query_one(StatusLine).queued == 0
            assert [str(w.render()) for w in app.screen.query(UserItem)] == ["one"]
            assert len(fake.chat_requests) == 1
    finally:
        gate.set()


# -- 7. smaller items -----------------------------------------------------------------


async def test_ctrl_c_clears_the_prompt_then_quits_when_pressed_twice(
    make_app: Callable[..., QwenmemApp],
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("h", "i")
        await pilot.press("ctrl+c")
        assert prompt_of(app).text == ""
        assert app.is_running
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running  # one press on an empty prompt only says how to quit
        await pilot.press("x", "backspace", "ctrl+c")  # typing disarms the quit
        await pilot.pause()
        assert app.is_running
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0


async def test_waiting_shows_a_spinner_with_elapsed_seconds(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    gate = threading.Event()
    fake.script(Reply("eventually", gate=gate))
    app = make_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            await send(pilot, "hello")
            await wait_until(pilot, lambda: app.state == "responding")
            status = app.screen.query_one(StatusLine)
            first = str(status.render())
            assert re.search(rf"[{SPINNER}] responding… \d+s", first)
            await wait_until(pilot, lambda: str(status.render()) != first)  # it turns
            gate.set()
            await settle(pilot)
            assert not re.search(rf"[{SPINNER}]", str(status.render()))
    finally:
        gate.set()


async def test_a_long_error_wraps_instead_of_being_cut(make_app: Callable[..., QwenmemApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        text = "The endpoint refused the request for model qwen-plus-latest: " + "reason " * 30
        app.show_error(text)
        await wait_until(pilot, lambda: bool(app.screen.query(ErrorItem)))
        error = app.screen.query_one(ErrorItem)
        await wait_until(pilot, lambda: error.size.height > 0)  # laid out
        assert error.size.width <= SIZE[0]
        assert error.size.height >= len(text) // SIZE[0]  # every word on screen


async def test_resume_accepts_a_unique_id_prefix(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
    clock: Callable[[], float],
) -> None:
    old = await seed_session(paths, project, "earlier", conversation("hi", "hello"), clock=clock)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await send(pilot, f"/resume {old.id[:6]}")
        await settle(pilot)
        assert app.session.info.id == old.id


async def test_an_untouched_session_is_not_stored_before_its_first_message(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], paths: Paths, project: Path
) -> None:
    """A kill -9 skips every cleanup: the session must not exist until it has content."""
    fake.script(Reply("hello"))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        db = await Database.open(paths.db_file)
        try:
            assert await SessionStore(db).list_sessions() == []  # killed here: nothing
            await send(pilot, "hi")
            await settle(pilot)
            [stored] = await SessionStore(db).list_sessions()
            assert stored.id == app.session.info.id and stored.title == "hi"
        finally:
            await db.close()


async def test_a_message_stops_a_running_recap_instead_of_waiting_behind_it(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], settings: Settings
) -> None:
    from qwenmem_tui.tui.features.recap.controller import recap_extension

    gate = threading.Event()
    fake.script(Reply("a"), Reply("b"), Reply("c"), Reply("<recap>never</recap>", gate=gate), Reply("answer"))
    app = make_app(extensions=(recap_extension,))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            for text in ("one", "two", "three"):
                await send(pilot, text)
                await settle(pilot)
            await send(pilot, "/recap")
            await wait_until(pilot, lambda: app.state == "recap")
            await send(pilot, "four")
            await wait_until(pilot, lambda: len(fake.chat_requests) == 5)
            await settle(pilot)
            assert fake.chat_requests[-1]["messages"][-1] == {"role": "user", "content": "four"}
            assert any("your message goes first" in text for text in infos(app))
    finally:
        gate.set()


def test_the_history_file_stays_bounded_and_per_project(tmp_path: Path) -> None:
    from qwenmem_tui.prompt_history import PromptHistory

    history = PromptHistory(tmp_path / HISTORY_FILE_NAME, "p1", max_entries=3)
    for n in range(7):
        history.add(f"message {n}")
    PromptHistory(tmp_path / HISTORY_FILE_NAME, "p2").add("other project")
    lines = (tmp_path / HISTORY_FILE_NAME).read_text().splitlines()
    assert len(lines) <= 2 * 3 + 1  # compacted when it reaches twice the bound
    assert all(json.loads(line)["text"] for line in lines)
    assert PromptHistory(tmp_path / HISTORY_FILE_NAME, "p1").entries[-1] == "message 6"
    assert PromptHistory(tmp_path / HISTORY_FILE_NAME, "p2").entries == ["other project"]



async def test_the_spinner_turns_slower_while_the_reply_streams() -> None:
    # The reply moving on screen shows the app is alive: at 10 frames a second the
    # spinner's own repaints were a tenth of a fast stream's CPU.
    from textual.app import App

    from qwenmem_tui.tui.widgets.status_line import STREAMING_SLOWER

    app = App()
    async with app.run_test() as pilot:
        status = StatusLine(clock=lambda: 100.0)
        await app.screen.mount(status)
        status.state = "responding"
        await pilot.pause()

        def glyphs_over(ticks: int) -> list[str]:
            shown = []
            for _ in range(ticks):
                status._tick()
                shown.append(re.findall(rf"[{SPINNER}]", str(status.render()))[0])
            return shown

        waiting = glyphs_over(10)
        assert all(a != b for a, b in zip(waiting, waiting[1:]))  # a turn a tick
        status.streaming = True
        streaming = glyphs_over(10 * STREAMING_SLOWER)
        turns = sum(a != b for a, b in zip(streaming, streaming[1:]))
        assert turns in (9, 10)  # a turn every STREAMING_SLOWER ticks
        status.state = "idle"
        assert not status.streaming


async def test_the_status_line_knows_while_reply_text_arrives(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    gate = threading.Event()
    fake.script(Reply("first words, then the rest", chunk_size=6, stall_after=1, stall_gate=gate))
    app = make_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            status = app.screen.query_one(StatusLine)
            await send(pilot, "hello")
            await wait_until(pilot, lambda: app.state == "responding")
            await wait_until(pilot, lambda: status.streaming)  # the first words came
            gate.set()
            await settle(pilot)
            assert not status.streaming
    finally:
        gate.set()
