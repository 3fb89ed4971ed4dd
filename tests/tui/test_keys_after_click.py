"""Issue 23 item 3: every key typed after a click reaches the prompt, in order.

A click on a tool call or the compaction marker focuses its title. The keys typed
next arrive together (a typist during a busy frame, tmux send-keys), and Textual hands
each to the widget focused when it is read: the prompt must get every one of them.
"""

from __future__ import annotations

from collections.abc import Callable

from textual import events
from textual.widget import Widget

from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.compaction.marker import CompactionMarker
from qwenmem_tui.tui.widgets.chat_log import ChatLog
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.plain_items import InfoItem, ToolCallItem, UserItem
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import SIZE, send, settle, started, wait_until

MARKER = Item(
    id=None,
    session_id="s",
    type="compaction",
    content="⋯ 40 older messages summarized",
    message=None,
    meta={"summary": "Earlier talk.", "decisions": []},
    created_at=0.0,
)


def burst(app: QwenmemApp, text: str) -> None:
    """Post every key of `text` at once, as one terminal read of fast typing does."""
    for char in text:
        app.post_message(events.Key("space" if char == " " else char, char))


async def test_a_sentence_typed_right_after_clicking_any_item_is_sent_whole(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})]),
        Reply("The README says hello.\n\n" + "More lines.\n\n" * 20),
    )
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await send(pilot, "what is in the readme?")
        await settle(pilot)
        app.show(CompactionMarker(MARKER))
        app.show_info("a note from qwenmem")
        await pilot.pause()
        log = app.screen.query_one(ChatLog)
        assert log.max_scroll_y > 0  # the log scrolls: it has a scrollbar to click
        targets: list[tuple[str, type[Widget], tuple[int, int]]] = [
            ("tool call", ToolCallItem, (2, 0)),
            ("compaction marker", CompactionMarker, (2, 0)),
            ("message", UserItem, (2, 0)),
            ("reply", AssistantItem, (2, 0)),
            ("note", InfoItem, (2, 0)),
            ("log", ChatLog, (SIZE[0] // 2, 0)),
            ("scrollbar", ChatLog, (log.outer_size.width - 1, 3)),
        ]
        for number, (name, kind, offset) in enumerate(targets, start=3):
            await log.show_latest()
            widget = app.screen.query(kind).last()
            log.scroll_to_widget(widget, animate=False, immediate=True)
            await pilot.pause()
            await pilot.click(widget, offset=offset)
            await pilot.pause()
            if isinstance(widget, (ToolCallItem, CompactionMarker)):
                assert not widget.collapsed, name  # the click still folds it open
                assert app.focused is not app.screen.query_one(PromptInput), name
            sentence = f"typed after the click on the {name}, every key"
            burst(app, sentence)
            app.post_message(events.Key("enter", "\r"))
            await wait_until(pilot, lambda: len(fake.chat_requests) >= number)
            await settle(pilot)
            sent = fake.chat_requests[number - 1]["messages"][-1]["content"]
            assert sent == sentence, name
            assert app.focused is app.screen.query_one(PromptInput)


async def test_editing_keys_and_a_paste_after_a_click_edit_the_prompt_in_order(
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
        await pilot.click(ToolCallItem, offset=(2, 0))
        await pilot.pause()
        prompt = app.screen.query_one(PromptInput)
        assert app.focused is not prompt
        # Arriving together: a backspace first, a paste, arrows, a delete.
        keys = [("backspace", None), ("h", "h"), ("e", "e"), ("x", "x"), ("backspace", None)]
        for key, character in keys:
            app.post_message(events.Key(key, character))
        app.post_message(events.Paste("llo world"))
        for key, character in [("left", None)] * 6 + [("delete", None), ("_", "_")]:
            app.post_message(events.Key(key, character))
        await pilot.pause()
        await pilot.pause()
        assert prompt.text == "hello_world"
        assert app.focused is prompt
