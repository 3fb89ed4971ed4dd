"""The chat basics in the real app: /model (and its picker), /copy, /export, the
session's token count, the command palette and [ui] theme."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot

from qwenmem_tui.config import ConfigError, Settings
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.export.extension import export_extension
from qwenmem_tui.tui.features.model.extension import MODEL_ITEM, model_extension
from qwenmem_tui.tui.features.model.picker import ModelPicker
from qwenmem_tui.tui.widgets.plain_items import ErrorItem, InfoItem
from qwenmem_tui.tui.widgets.prompt import PromptInput
from qwenmem_tui.tui.widgets.status_line import StatusLine

from .conftest import SIZE, palette_highlight, send, settle, started, wait_until

BASICS = [model_extension, export_extension]


def _last_info(app: QwenmemApp) -> str:
    return str(app.screen.query(InfoItem).last().render())


async def test_model_by_name_is_used_shown_and_remembered(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("from fast"))
    app = make_app(extensions=BASICS)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/model test-fast")
        await settle(pilot)
        assert app.screen.query_one(StatusLine).model == "test-fast"
        await send(pilot, "hello")
        await settle(pilot)
        assert fake.chat_requests[-1]["model"] == "test-fast"
        assert [i.meta for i in app.session.items if i.type == MODEL_ITEM] == [{"model": "test-fast"}]
    # Resumed: the session goes on with the model it was left on.
    fake.script(Reply("again"))
    again = make_app(extensions=BASICS, resume=True)
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert again.screen.query_one(StatusLine).model == "test-fast"
        await send(pilot, "still there?")
        await settle(pilot)
        assert fake.chat_requests[-1]["model"] == "test-fast"
    # A new session starts on the configured model.
    fresh = make_app(extensions=BASICS)
    async with fresh.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert fresh.llm.model == "test-model"


async def _open_picker(pilot: Pilot) -> ModelPicker:
    await send(pilot, "/model")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, ModelPicker))
    picker = pilot.app.screen
    assert isinstance(picker, ModelPicker)
    # The list replaces the spinner once the endpoint answered (its worker may not
    # have started when the screen first shows).
    await wait_until(pilot, lambda: picker.query_one("#models").display)
    await pilot.pause()
    return picker


async def test_model_picker_lists_the_endpoints_models(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.models = ["qwen-max", "qwen-plus", "test-model"]
    app = make_app(extensions=BASICS)
    async with app.run_test(size=SIZE) as pilot:
        picker = await _open_picker(pilot)
        options = picker.query_one("#models")
        assert [options.get_option_at_index(i).id for i in range(options.option_count)] == fake.models
        await pilot.press("m", "a", "x")  # filter
        await pilot.press("enter")
        await settle(pilot)
        assert app.llm.model == "qwen-max"
        assert any(r.path.endswith("/models") for r in fake.requests)


async def test_model_picker_failure_is_one_line(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    app = make_app(extensions=BASICS)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        fake.api_key = "another-key"  # the endpoint now refuses ours
        await send(pilot, "/model")
        await wait_until(pilot, lambda: bool(app.screen.query(ErrorItem)))
        assert "Could not list the endpoint's models" in str(app.screen.query(ErrorItem).last().render())
        assert app.llm.model == "test-model"


def test_model_picker_snapshot(
    snap_compare: Callable[..., bool], fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.models = ["qwen-flash", "qwen-max", "qwen-plus", "test-model"]

    async def picker(pilot: Pilot) -> None:
        await started(pilot)
        pilot.app.screen.query_one(PromptInput).cursor_blink = False
        await _open_picker(pilot)

    assert snap_compare(make_app(extensions=BASICS), terminal_size=SIZE, run_before=picker)


async def test_copy_puts_the_reply_markdown_on_the_clipboard(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("first **one**"), Reply("second `two`"))
    app = make_app(extensions=BASICS)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/copy")
        await settle(pilot)
        assert _last_info(app) == "No reply to copy yet."
        await send(pilot, "a")
        await settle(pilot)
        await send(pilot, "b")
        await settle(pilot)
        await send(pilot, "/copy")
        await settle(pilot)
        assert app.clipboard == "second `two`"
        assert "Copied the last reply (12 characters, Markdown)" in _last_info(app)
        await send(pilot, "/copy 2")
        await settle(pilot)
        assert app.clipboard == "first **one**"
        await send(pilot, "/copy 5")
        await settle(pilot)
        assert "this session has 2 replies" in str(app.screen.query(ErrorItem).last().render())


async def test_export_writes_markdown_and_never_overwrites(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"}, id="c1")]),
        Reply("The README says **hello**."),
    )
    app = make_app(extensions=BASICS)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "what does the readme say?")
        await settle(pilot)
        await send(pilot, "/export")
        await settle(pilot)
        # Without a file name: in the home's exports folder, private, never the work tree.
        assert list(out.iterdir()) == []
        (written,) = app.paths.exports_dir.iterdir()
        assert written.name == f"qwenmem-{app.session.info.id[:8]}.md"
        assert (written.stat().st_mode & 0o777, app.paths.exports_dir.stat().st_mode & 0o777) == (0o600, 0o700)
        text = written.read_text()
        assert "## You\n\nwhat does the readme say?" in text
        assert '<details><summary>✓ tool <code>read_file({"path": "README.md"})</code></summary>' in text
        assert "## Assistant\n\nThe README says **hello**." in text
        assert str(written) in _last_info(app)
        await send(pilot, "/export notes.json")
        await settle(pilot)
        data = json.loads((out / "notes.json").read_text())
        assert data["id"] == app.session.info.id and len(data["items"]) == 4
        await send(pilot, "/export notes.json")
        await settle(pilot)
        assert "exists" in str(app.screen.query(ErrorItem).last().render())


async def test_tokens_in_the_status_line_and_help(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("hi", prompt_tokens=1200, completion_tokens=34))
    app = make_app(extensions=BASICS)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hello")
        await settle(pilot)
        status = app.screen.query_one(StatusLine)
        assert status.tokens == (1200, 34)
        assert "1,200 in / 34 out" in str(status.render())
        await send(pilot, "/help")
        await settle(pilot)
        assert "Tokens this session: 1,200 prompt, 34 completion" in _last_info(app)
    again = make_app(extensions=BASICS, resume=True)
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert again.screen.query_one(StatusLine).tokens == (1200, 34)


async def test_palette_on_its_key_runs_slash_commands(make_app: Callable[..., QwenmemApp]) -> None:
    app = make_app(extensions=BASICS)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        footer = " ".join(str(key.render()) for key in app.screen.query("FooterKey"))
        assert "^g" in footer and "palette" in footer
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"/help")
        # Enter runs the highlighted command, once the palette's search has listed it.
        await wait_until(pilot, lambda: "/help" in (palette_highlight(app) or ""))
        await pilot.press("enter")
        await settle(pilot)
        assert _last_info(app).startswith("Keys:")


def test_ui_theme_is_applied_and_checked(
    settings: Settings, paths: Paths, make_app: Callable[..., QwenmemApp]
) -> None:
    settings.ui.theme = "nord"
    assert make_app().theme == "nord"
    settings.ui.theme = "no-such-theme"
    with pytest.raises(ConfigError, match="ui.theme: expected one of: .*nord"):
        make_app()


async def test_a_theme_picked_in_the_palette_is_kept_for_the_next_start(
    settings: Settings, paths: Paths, make_app: Callable[..., QwenmemApp]
) -> None:
    """Issue 38: the palette's theme lasted only until quit."""
    app = make_app(extensions=BASICS)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+g")  # the palette's Theme command opens the theme search
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        first = app.screen
        await pilot.press(*"theme")
        await wait_until(pilot, lambda: first.query_one(CommandList).option_count > 0)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette) and app.screen is not first)
        await pilot.press(*"nord")
        await wait_until(pilot, lambda: app.screen.query_one(CommandList).option_count == 1)
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.theme == "nord")
        await app.workers.wait_for_complete()
    kept = paths.home / "tui-theme.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    assert make_app(extensions=BASICS).theme == "nord"
    settings.ui.theme = "gruvbox"  # the config, when it names one, still decides
    assert make_app(extensions=BASICS).theme == "gruvbox"


async def test_export_json_is_valid_json_with_no_secret_left(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/export x.json redacts each value before serialising (issue 36 item 4): secrets
    behind a newline, a quote or a backslash, in the reply and in a tool call's
    arguments, leave no tail, and the file is JSON."""
    monkeypatch.chdir(tmp_path)
    token = "ghp_R2d4F6h8J0k2L4m6N8p0Q2r4S6t8V0w2X4y6"
    aws = "AKIAQ3EGUXK7NZ4VB2TD"
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": f"notes\n{aws}.md"}, id="c1")]),
        Reply(f'Found it:\n{token}\n"quoted\\" {aws}'),
    )
    app = make_app(extensions=BASICS)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "find the token")
        await settle(pilot)
        await send(pilot, "/export x.json")
        await settle(pilot)
    text = (tmp_path / "x.json").read_text()
    data = json.loads(text)
    assert token not in text and aws not in text
    assert any("Found it:\n" in str(item["content"]) for item in data["items"])
