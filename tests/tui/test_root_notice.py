"""Issue #17: started below a home directory that is the project root (a dotfiles git
repo), the TUI says so once and its file tools keep to the directory it started in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.widgets.plain_items import InfoItem

from .conftest import SIZE, send, settle


async def test_a_home_project_root_is_announced_and_tools_stay_in_the_start_directory(
    make_app: Callable[..., QwenmemApp],
    fake: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user_home = tmp_path / "user"
    notes = user_home / "notes"
    notes.mkdir(parents=True)
    (user_home / ".git").mkdir()  # dotfiles: the git root above is the home
    (user_home / "diary.txt").write_text("PRIVATE DIARY\n")
    (notes / "todo.txt").write_text("buy milk\n")
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.chdir(notes)
    fake.script(
        Reply(
            tool_calls=[
                ToolCallSpec("read_file", {"path": "../diary.txt"}, id="call_1"),
                ToolCallSpec("read_file", {"path": "todo.txt"}, id="call_2"),
            ]
        ),
        Reply("Done."),
    )
    app = make_app(cwd=notes)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        infos = [str(w.render()) for w in app.screen.query(InfoItem)]
        notices = [text for text in infos if "file tools keep to" in text]
        assert len(notices) == 1, infos
        assert str(user_home.resolve()) in notices[0] and str(notes.resolve()) in notices[0]
        await send(pilot, "read my diary")
        await settle(pilot)
    # The turn after the tool calls (side queries such as the title may come between).
    [after_tools] = [
        body for body in fake.chat_requests if any(m["role"] == "tool" for m in body["messages"])
    ]
    tool_messages = [m for m in after_tools["messages"] if m["role"] == "tool"]
    assert "PRIVATE DIARY" not in tool_messages[0]["content"]
    assert "outside the project root" in tool_messages[0]["content"]
    assert tool_messages[1]["content"] == "buy milk\n"
