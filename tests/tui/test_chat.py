"""The chat screen driven through Pilot against the fake server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from textual import events
from textual.widgets import Markdown

from qwenmem_tui.chat.session import RESET_NOTICE
from qwenmem_tui.chat.tools import Tool, ToolContext
from qwenmem_tui.config import Settings
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.host import SlashCommand
from qwenmem_tui.tui.screens.chat import ChatScreen, QueuedMessages
from qwenmem_tui.tui.screens.resume import ResumeScreen
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.plain_items import (
    ErrorItem,
    InfoItem,
    InterruptedMark,
    ToolCallItem,
    UserItem,
)
from qwenmem_tui.tui.widgets.prompt import CommandSuggestions, PromptInput
from qwenmem_tui.tui.widgets.status_line import StatusLine

from .conftest import BOUND, SIZE, send, settle, started, wait_until


def texts(app: QwenmemApp, widget_type: type) -> list[str]:
    """The plain text of every `widget_type` item in the log."""
    return [str(widget.render()) for widget in app.screen.query(widget_type)]


def markdown_sources(app: QwenmemApp) -> list[str]:
    # A reply just mounted may not have composed its Markdown yet: "" until it has.
    return [
        "".join(markdown.source for markdown in item.query(Markdown))
        for item in app.screen.query(AssistantItem)
    ]


async def test_message_streams_a_markdown_reply(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("hello **world**, this is a longer reply", chunk_size=4))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hi there")
        await settle(pilot)
        assert texts(app, UserItem) == ["hi there"]
        assert markdown_sources(app) == ["hello **world**, this is a longer reply"]
        assert app.state == "idle"
        assert [item.type for item in app.session.items if item.type in ("user", "assistant")] == [
            "user",
            "assistant",
        ]
        assert app.screen.query_one(StatusLine).title == "hi there"
        assert app.screen.query_one(PromptInput).text == ""


async def test_tool_call_is_shown_with_its_result(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})]),
        Reply("The README says hello."),
    )
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "what is in the readme?")
        await settle(pilot)
        (tool,) = app.screen.query(ToolCallItem)
        assert 'read_file(path="README.md")' in str(tool.title)
        assert "✓" in str(tool.title)
        assert not tool.has_class("-error")
        assert tool.collapsed
        assert markdown_sources(app) == ["The README says hello."]


async def test_failing_tool_call_has_error_styling(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "../outside.txt"})]),
        Reply("I cannot read that."),
    )
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "read a file outside")
        await settle(pilot)
        (tool,) = app.screen.query(ToolCallItem)
        assert tool.has_class("-error")
        assert "✗" in str(tool.title)


@pytest.mark.parametrize("key", ["escape", "ctrl+c"])
async def test_escape_or_ctrl_c_cancels_the_streaming_reply(
    key: str, fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    never = threading.Event()
    fake.script(
        Reply("partial answer that never ends", chunk_size=4, stall_after=3, stall_gate=never)
    )
    app = make_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "tell me everything")
            await wait_until(pilot, lambda: any(s for s in markdown_sources(app)))
            assert app.state == "responding"
            await pilot.press(key)
            await settle(pilot)
            assert app.state == "idle"
            assert len(app.screen.query(InterruptedMark)) == 1
            assert texts(app, InfoItem) == []  # the mark says it; no extra line
            stored = [item for item in app.session.items if item.type == "assistant"]
            assert stored and stored[-1].meta.get("interrupted")
            assert stored[-1].content.startswith("part")
    finally:
        never.set()


async def test_cancel_before_the_first_byte_says_cancelled(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    never = threading.Event()
    fake.script(Reply("too late", gate=never))
    app = make_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hello?")
            await asyncio.to_thread(fake.wait_for_requests, 1)
            await pilot.press("escape")
            await settle(pilot)
            assert texts(app, InfoItem) == ["Cancelled."]
            assert not app.screen.query(AssistantItem)
            assert app.state == "idle"
    finally:
        never.set()


async def test_escape_cancels_a_running_tool(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    started = asyncio.Event()

    async def slow(args: dict, ctx: ToolContext) -> str:
        started.set()
        await asyncio.Event().wait()  # until cancelled
        return "never"

    tool = Tool("slow_tool", "Waits forever.", {"type": "object", "properties": {}}, slow)
    fake.script(Reply(tool_calls=[ToolCallSpec("slow_tool", {})]))
    app = make_app(extra_tools=[tool])
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "run the slow tool")
        await asyncio.wait_for(started.wait(), BOUND)
        await pilot.pause()
        assert app.state == "running_tool"
        assert app.screen.query_one(StatusLine).state == "running_tool"
        await pilot.press("escape")
        await settle(pilot)
        assert app.state == "idle"
        (item,) = app.screen.query(ToolCallItem)
        assert item.has_class("-error")
        assert not item.has_class("-running")


async def test_status_says_thinking_while_reasoning_streams(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    stall = threading.Event()
    fake.script(
        Reply(
            "The answer.",
            reasoning="Let me think about this " * 4,
            chunk_size=4,
            stall_after=3,
            stall_gate=stall,
        )
    )
    app = make_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "think first")
            status = app.screen.query_one(StatusLine)
            await wait_until(pilot, lambda: status.thinking)
            assert "thinking…" in str(status.render())
            stall.set()
            await settle(pilot)
            assert not status.thinking
            assert markdown_sources(app) == ["The answer."]  # reasoning is never shown
    finally:
        stall.set()


async def test_message_typed_while_busy_is_queued_then_sent(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    gate = threading.Event()
    fake.script(Reply("first reply", gate=gate), Reply("second reply"))
    app = make_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "one")
            await wait_until(pilot, lambda: app.state == "responding")
            await send(pilot, "two")
            await pilot.pause()
            queue = app.screen.query_one(QueuedMessages)
            assert queue.display
            assert "two" in str(queue.render())
            assert app.screen.query_one(StatusLine).queued == 1
            assert texts(app, UserItem) == ["one"]
            gate.set()
            # Counted as widgets: a reply just mounted has not composed its Markdown yet.
            await wait_until(
                pilot, lambda: app.state == "idle" and len(app.screen.query(AssistantItem)) == 2
            )
            await settle(pilot)
            assert texts(app, UserItem) == ["one", "two"]
            assert markdown_sources(app) == ["first reply", "second reply"]
            assert not queue.display
            assert fake.chat_requests[-1]["messages"][-1] == {"role": "user", "content": "two"}
    finally:
        gate.set()


async def test_slash_command_runs_while_a_reply_streams(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    gate = threading.Event()
    fake.script(Reply("slow reply", gate=gate))
    app = make_app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hello")
            await wait_until(pilot, lambda: app.state == "responding")
            await send(pilot, "/help")
            await wait_until(pilot, lambda: any("/resume" in t for t in texts(app, InfoItem)))
            assert app.state == "responding"
            gate.set()
            await settle(pilot)
    finally:
        gate.set()


async def test_help_lists_commands_and_unknown_command_gets_a_hint(
    make_app: Callable[..., QwenmemApp],
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/help")
        await settle(pilot)
        (help_text,) = texts(app, InfoItem)
        for name in ("/help", "/clear", "/quit", "/resume"):
            assert name in help_text
        assert "esc " in help_text and "Cancel" in help_text
        await send(pilot, "/frobnicate now")
        await settle(pilot)
        hint = texts(app, InfoItem)[-1]
        assert hint == "Unknown command /frobnicate. Type /help for the list."


async def test_registered_command_is_suggested_and_runs(
    make_app: Callable[..., QwenmemApp],
) -> None:
    calls: list[str] = []

    async def remember(app: QwenmemApp, args: str) -> None:
        calls.append(args)
        app.show_info(f"remembered {args}")

    app = make_app()
    app.commands.register(SlashCommand("remember", "Save a memory", remember, "<text>"))
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.screen.query_one(PromptInput)
        prompt.insert("/rem")
        await pilot.pause()
        suggestions = app.screen.query_one(CommandSuggestions)
        assert suggestions.display
        assert "/remember <text>" in str(suggestions.get_option_at_index(0).prompt)
        assert prompt.suggestion == "ember"
        await pilot.press("tab")
        assert prompt.text == "/remember "
        prompt.insert("tea over coffee")
        await pilot.press("enter")
        await settle(pilot)
        assert calls == ["tea over coffee"]
        assert not suggestions.display


async def test_escape_hides_suggestions_before_cancelling(
    make_app: Callable[..., QwenmemApp],
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.screen.query_one(PromptInput)
        prompt.insert("/")
        await pilot.pause()
        suggestions = app.screen.query_one(CommandSuggestions)
        assert suggestions.display
        await pilot.press("escape")
        assert not suggestions.display


async def test_ctrl_j_inserts_a_newline_and_enter_sends_both_lines(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a", "ctrl+j", "b")
        assert app.screen.query_one(PromptInput).text == "a\nb"
        await pilot.press("enter")
        await settle(pilot)
        assert texts(app, UserItem) == ["a\nb"]


async def test_llm_error_is_one_line(fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]) -> None:
    fake.script(HTTPError(401, {"error": {"message": "bad key", "code": "invalid_api_key"}}))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hello")
        await settle(pilot)
        errors = texts(app, ErrorItem)
        assert len(errors) == 1
        assert "\n" not in errors[0]
        assert "Traceback" not in errors[0]
        assert app.state == "idle"


async def test_escape_sequences_from_the_model_are_neutralised(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("\x1b[2J\x1b]0;pwned\x07red\x9b31m"))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hi")
        await settle(pilot)
        (source,) = markdown_sources(app)
        assert "\x1b" not in source and "\x07" not in source and "\x9b" not in source
        assert "␛[2J" in source


async def test_clear_empties_the_log(fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hello")
        await settle(pilot)
        await send(pilot, "/clear")
        await settle(pilot)
        assert not app.screen.query(UserItem)
        assert texts(app, InfoItem) == [RESET_NOTICE]


async def test_terminal_focus_is_a_reactive(make_app: Callable[..., QwenmemApp]) -> None:
    app = make_app()
    seen: list[bool] = []
    async with app.run_test(size=SIZE) as pilot:
        app.watch(app, "terminal_focused", lambda focused: seen.append(focused), init=False)
        app.post_message(events.AppBlur())
        await pilot.pause()
        assert app.terminal_focused is False
        app.post_message(events.AppFocus())
        await pilot.pause()
        assert app.terminal_focused is True
        app.post_message(events.AppBlur())
        await pilot.pause()
        # tmux without focus-events never reports focus-in: a key press counts as focus.
        await pilot.press("x")
        assert app.terminal_focused is True
        assert seen == [False, True, False, True]


async def test_quit_command_exits(make_app: Callable[..., QwenmemApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/quit")
        await pilot.pause()
    assert app.return_code == 0


async def test_bindings_are_remapped_from_settings(
    settings: Settings, make_app: Callable[..., QwenmemApp]
) -> None:
    settings.keys = {"app.resume": "ctrl+o"}
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert isinstance(app.screen, ChatScreen)
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, ResumeScreen)


async def test_two_quick_enters_send_one_and_queue_the_other(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("first"), Reply("second"))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        screen.submit("one")
        screen.submit("two")  # before the first worker has run at all
        assert app.state == "responding"
        assert screen.query_one(StatusLine).queued == 1
        await wait_until(pilot, lambda: len(markdown_sources(app)) == 2 and app.state == "idle")
        await settle(pilot)
        assert texts(app, UserItem) == ["one", "two"]
        assert texts(app, ErrorItem) == []
