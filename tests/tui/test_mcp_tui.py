"""MCP servers in the real app: tools the model calls inline, the permission prompt,
/mcp, and a server that fails to start (real server processes, the fake model)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp_support import MCP_SERVER_TIME, PYTHON, write_servers
from textual.pilot import Pilot

from qwenmem_tui.config import Settings
from qwenmem_tui.features.mcp.settings import McpServerSettings, McpSettings
from qwenmem_tui.features.mcp.permissions import PermissionStore
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.mcp.extension import mcp_extension
from qwenmem_tui.tui.features.mcp.permission import PermissionScreen
from qwenmem_tui.tui.widgets.plain_items import ErrorItem, InfoItem, ToolCallItem
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import SIZE, send, settle, started, wait_until


@pytest.fixture
def notes_file(tmp_path: Path) -> Path:
    return tmp_path / "notes.txt"


@pytest.fixture
def with_notes(settings: Settings, tmp_path: Path, notes_file: Path) -> Settings:
    script, _ = write_servers(tmp_path)
    settings.mcp = McpSettings(
        servers={"notes": McpServerSettings(command=PYTHON, args=[str(script), str(notes_file)])}
    )
    return settings


async def _tools_up(pilot: Pilot, name: str) -> None:
    await started(pilot)
    app = pilot.app
    assert isinstance(app, QwenmemApp)
    await wait_until(pilot, lambda: name in app.session.tools.names())


def _add_note(text: str) -> Reply:
    return Reply(tool_calls=[ToolCallSpec("mcp__notes__add_note", {"text": text}, id="call_1")])


async def test_untrusted_tool_asks_then_runs_inline(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], with_notes: Settings, notes_file: Path
) -> None:
    fake.script(_add_note("buy milk"), Reply("Noted."))
    app = make_app(extensions=[mcp_extension])
    async with app.run_test(size=SIZE) as pilot:
        await _tools_up(pilot, "mcp__notes__add_note")
        await send(pilot, "note: buy milk")
        await wait_until(pilot, lambda: isinstance(app.screen, PermissionScreen))
        assert not notes_file.exists()  # the turn waits for the answer
        await pilot.press("1")  # allow once
        await settle(pilot)
        (tool,) = app.screen.query(ToolCallItem)
        assert 'mcp__notes__add_note(text="buy milk")' in str(tool.title)
        assert "✓" in str(tool.title)
        assert notes_file.read_text() == "buy milk\n"
        tools = {tool["function"]["name"] for tool in fake.chat_requests[0]["tools"]}
        assert {"mcp__notes__add_note", "mcp__notes__read_notes", "read_file"} <= tools
        assert fake.chat_requests[1]["messages"][-1]["content"] == "added: buy milk"


async def test_always_is_remembered_for_the_project(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    with_notes: Settings,
    notes_file: Path,
    paths: Paths,
    project: Path,
) -> None:
    fake.script(_add_note("one"), Reply("ok"), _add_note("two"), Reply("ok"))
    app = make_app(extensions=[mcp_extension])
    async with app.run_test(size=SIZE) as pilot:
        await _tools_up(pilot, "mcp__notes__add_note")
        await send(pilot, "first")
        await wait_until(pilot, lambda: isinstance(app.screen, PermissionScreen))
        await pilot.press("2")  # always in this project
        await settle(pilot)
        await send(pilot, "second")
        await settle(pilot)  # not asked again
        assert notes_file.read_text().split() == ["one", "two"]
    assert PermissionStore(paths.home, project_id(project)).allowed("notes", "add_note")


@pytest.mark.parametrize(("key", "result"), [("3", "The user denied"), ("escape", "Cancelled")])
async def test_deny_or_escape_runs_nothing(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    with_notes: Settings,
    notes_file: Path,
    key: str,
    result: str,
) -> None:
    fake.script(_add_note("secret plan"), Reply("Understood."))
    app = make_app(extensions=[mcp_extension])
    async with app.run_test(size=SIZE) as pilot:
        await _tools_up(pilot, "mcp__notes__add_note")
        await send(pilot, "note it")
        await wait_until(pilot, lambda: isinstance(app.screen, PermissionScreen))
        await pilot.press(key)
        await settle(pilot)
        assert not isinstance(app.screen, PermissionScreen)
        (tool,) = app.screen.query(ToolCallItem)
        assert tool.has_class("-error")
        assert not notes_file.exists()
        tool_items = [item for item in app.session.items if item.type == "tool"]
        assert result in tool_items[-1].content
        assert app.idle and app.screen.query_one(PromptInput).disabled is False


async def test_server_that_fails_to_start_is_one_line_and_listed_on_mcp(
    make_app: Callable[..., QwenmemApp], settings: Settings
) -> None:
    settings.mcp = McpSettings(servers={"gone": McpServerSettings(command="/nonexistent/server")})
    app = make_app(extensions=[mcp_extension])
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await wait_until(pilot, lambda: bool(app.screen.query(ErrorItem)))
        (error,) = app.screen.query(ErrorItem)
        assert "MCP server gone could not start: command not found" in str(error.render())
        await send(pilot, "/mcp")
        await settle(pilot)
        listing = str(app.screen.query(InfoItem).last().render())
        assert "gone  failed: could not start: command not found" in listing


def _time_server(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    # By name, as a user writes it: the venv's bin directory on PATH.
    bin_dir = str(Path(MCP_SERVER_TIME).parent)
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", ""))
    settings.mcp = McpSettings(servers={"time": McpServerSettings(command="mcp-server-time")})


def test_mcp_listing_snapshot(
    snap_compare: Callable[..., bool],
    make_app: Callable[..., QwenmemApp],
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _time_server(settings, monkeypatch)

    async def listing(pilot: Pilot) -> None:
        await _tools_up(pilot, "mcp__time__get_current_time")
        await send(pilot, "/mcp")
        pilot.app.screen.query_one(PromptInput).cursor_blink = False
        await settle(pilot)

    assert snap_compare(make_app(extensions=[mcp_extension]), terminal_size=SIZE, run_before=listing)


def test_permission_prompt_snapshot(
    snap_compare: Callable[..., bool],
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    with_notes: Settings,
) -> None:
    fake.script(_add_note("call the plumber at 9"), Reply("Noted."))

    async def ask(pilot: Pilot) -> None:
        await _tools_up(pilot, "mcp__notes__add_note")
        pilot.app.screen.query_one(PromptInput).cursor_blink = False
        await send(pilot, "note: call the plumber at 9")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, PermissionScreen))
        await pilot.pause()

    assert snap_compare(make_app(extensions=[mcp_extension]), terminal_size=SIZE, run_before=ask)


async def test_a_read_only_claim_asks_and_is_shown_as_the_servers_word(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], with_notes: Settings, notes_file: Path
) -> None:
    """Issue 36 item 9 in the app: the untrusted server's read_notes says it only reads;
    it asks anyway, and the question says that is the server's claim."""
    notes_file.write_text("milk\n")
    fake.script(
        Reply(tool_calls=[ToolCallSpec("mcp__notes__read_notes", {}, id="call_1")]), Reply("You have milk.")
    )
    app = make_app(extensions=[mcp_extension])
    async with app.run_test(size=SIZE) as pilot:
        await _tools_up(pilot, "mcp__notes__read_notes")
        await send(pilot, "what are my notes?")
        await wait_until(pilot, lambda: isinstance(app.screen, PermissionScreen))
        screen = app.screen
        assert isinstance(screen, PermissionScreen)
        assert "only reads (its word, not checked)" in str(screen.detail_content())
        await pilot.press("1")
        await settle(pilot)
        assert fake.chat_requests[1]["messages"][-1]["content"].strip() == "milk"
