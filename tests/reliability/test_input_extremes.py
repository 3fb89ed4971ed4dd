"""Input extremes: huge pastes, many lines, control bytes, hostile files, pathological
markdown from the model. The app keeps working and stores exactly what was sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from app_support import started
from textual import events

from qwenmem_tui.chat.events import ToolCallFinished
from qwenmem_tui.chat.tools import READ_FILE_MAX_BYTES
from qwenmem_tui.config import Settings
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp, create_app
from qwenmem_tui.tui.terminal_text import terminal_safe
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.plain_items import UserItem
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import outcome, stored_items, wait_for

LOG_LINE = "2026-11-29T20:00:00Z INFO worker-3 request handled in 12ms path=/api/v1/items status=200\n"
ONE_MB = (LOG_LINE * (1_048_576 // len(LOG_LINE) + 1))[:1_048_576]
TEN_K_LINES = "".join(f"line {n}\n" for n in range(10_000))
CONTROL = "nul\x00 soh\x01 bs\x08 esc\x1b[31m red del\x7f c1\x85\x9b end\r\nnext"
DEEP_MARKDOWN = "\n\n".join(
    [
        "> " * 300 + "a deep quote",
        "\n".join("  " * depth + f"- level {depth}" for depth in range(200)),
        "[" * 5000 + "x" + "]" * 5000,
        "*" * 10_000,
        "`" * 3000 + "code" + "`" * 3000,
        "| " + " | ".join(f"c{n}" for n in range(150)) + " |\n|" + "---|" * 150,
        "<details>" * 500 + "html" + "</details>" * 500,
        "#" * 100 + " not a heading",
        "```python\n" + "x = (" * 2000 + "\n",  # an unclosed fence, ending the reply
    ]
)


@pytest.fixture
def app_factory(settings: Settings, paths: Paths, project: Path) -> Callable[[], QwenmemApp]:
    settings.memory.extraction = False
    return lambda: create_app(settings, paths, cwd=project)


async def send_paste(pilot: Any, text: str) -> None:
    """Paste `text` (bracketed paste, as a terminal delivers it) and press Enter."""
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.focus()
    pilot.app.post_message(events.Paste(text))  # as the driver delivers it
    await wait_for(lambda: len(prompt.text) == len(text.replace("\r\n", "\n")), timeout=60)
    assert "\x00" not in text or "\x00" in prompt.text
    await pilot.press("enter")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.slow
@pytest.mark.parametrize("text", [ONE_MB, TEN_K_LINES, CONTROL], ids=["1MB paste", "10k lines", "control bytes"])
async def test_extreme_paste_is_sent_stored_and_the_app_goes_on(
    fake: FakeOpenAI, app_factory: Callable[[], QwenmemApp], paths: Paths, text: str
) -> None:
    fake.script(Reply("got it"), Reply("still here"))
    app = app_factory()
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot)  # the session opens behind the drawn prompt
        await send_paste(pilot, text)
        sent = fake.chat_requests[0]["messages"][-1]["content"]
        # The editor reads "\r\n" and NEL (\x85) as line breaks; everything else is kept.
        pasted = text.replace("\r\n", "\n").replace("\x85", "\n")
        assert pasted in sent  # byte for byte (memory reminders may lead it)
        assert app.session.items[-1].content == "got it"
        await send_paste(pilot, "and a short one")
        assert app.session.items[-1].content == "still here"
        assert len(app.screen.query(UserItem)) == 2
        # The log shows the paste's beginning (each redraw wraps what it shows).
        shown = str(app.screen.query(UserItem).first().render())
        assert len(shown) <= 21_000 and shown.startswith(terminal_safe(pasted[:50]).rstrip("\n"))
        screen = app.export_screenshot()
        assert "\x1b" not in screen and "\x00" not in screen
        session_id = app.session.info.id
    items = await stored_items(paths, session_id)
    assert [i.content for i in items if i.type == "user"] == [pasted, "and a short one"]


async def test_deeply_nested_markdown_from_the_model(
    fake: FakeOpenAI, app_factory: Callable[[], QwenmemApp], paths: Paths
) -> None:
    fake.script(Reply(DEEP_MARKDOWN, chunk_size=512), Reply("plain again"))
    app = app_factory()
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot)  # the session opens behind the drawn prompt
        await send_paste(pilot, "show me something nasty")
        assert app.session.items[-1].content == DEEP_MARKDOWN
        await send_paste(pilot, "thanks")
        assert app.session.items[-1].content == "plain again"
        assert len(app.screen.query(AssistantItem)) == 2
        assert app.is_running and app.state == "idle"


async def test_hostile_files_through_read_file(
    fake: FakeOpenAI, project: Path, make_core: Callable[..., Any]
) -> None:
    (project / "latin1.txt").write_bytes("caf\xe9 na\xefve \xff\xfe end\n".encode("latin-1"))
    (project / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    with (project / "huge.log").open("wb") as handle:  # 50 MB, sparse: no disk spent
        handle.truncate(50 * 1024 * 1024)
    (project / "control.txt").write_text("ok\x1b]52;c;AAAA\x07 and\x01\x7f\n", encoding="utf-8")
    (project / "nul.txt").write_bytes(b"text with a NUL\x00 in it\n")
    calls = [ToolCallSpec("read_file", {"path": name}, id=f"call_{n}")
             for n, name in enumerate(["latin1.txt", "image.png", "huge.log", "control.txt", "../../etc/passwd", "nul.txt"])]
    fake.script(Reply(tool_calls=calls), Reply("read them all"), Reply("next works"))
    async with make_core() as core:
        events_ = await core.ask("read these files")
        assert outcome(events_).outcome.status == "ok"
        results = {e.call.id: e for e in events_ if isinstance(e, ToolCallFinished)}
        latin1, image, huge, control, outside, nul = (results[f"call_{n}"] for n in range(6))
        assert not latin1.is_error and "caf\ufffd na\ufffdve" in latin1.result
        assert image.is_error and "binary" in image.result
        assert huge.is_error and "too large" in huge.result and str(READ_FILE_MAX_BYTES // 1024) in huge.result
        assert not control.is_error  # the model may see it; the screen shows it inert
        assert outside.is_error and "outside the project" in outside.result
        assert nul.is_error and "binary" in nul.result
        # What the model got back is what was stored, and valid JSON on the wire.
        tool_messages = [m for m in fake.chat_requests[1]["messages"] if m["role"] == "tool"]
        assert len(tool_messages) == 6 and json.dumps(tool_messages)
        assert outcome(await core.ask("and now?")).outcome.status == "ok"
