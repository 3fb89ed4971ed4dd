"""Terminal escape injection: hostile bytes from the model or a file are shown, not run.

The real `qwenmem` runs on a pseudo-terminal against the fake server and we read the
raw bytes it writes to the terminal: the clipboard write (OSC 52), the title change
(OSC 0), the screen wipe (CSI 2J), 8-bit CSI and bidi overrides from the content must
never be among them, while the text around them is visible.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from app_support import send, settle, started
from textual.widgets import Collapsible

from qwenmem_tui.config import Settings
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, Response, ToolCallSpec
from qwenmem_tui.tui.app import QwenmemApp, create_app
from qwenmem_tui.tui.terminal_text import terminal_safe
from qwenmem_tui.tui.widgets.plain_items import ToolCallItem
from qwenmem_tui.memory.model import WriteRequest

from .conftest import child_env, run_in_pty

# Each payload carries a word that must still be visible once made inert.
PAYLOADS = {
    "osc52 clipboard": "\x1b]52;c;cm0gLXJmIH4=\x07CLIPWORD",
    "osc0 title": "\x1b]0;pwned-title\x07TITLEWORD",
    "osc0 title st": "\x1b]2;pwned-title2\x1b\\TITLETWO",
    "csi clear": "\x1b[2JWIPEWORD",
    "csi cursor home": "\x1b[HHOMEWORD",
    "8-bit csi": "\x9b2JCONEWORD",
    "dcs": "\x1bP+q544e\x1b\\DCSWORD",
    "bidi override": "\u202eDIBIWORD\u202c",
    "bidi isolate": "\u2067ISOLWORD\u2069",
    "bell and backspace": "\x07\x08\x08BELLWORD",
}
EVIL = " ".join(PAYLOADS.values())
# What must never reach the terminal from the content.
FORBIDDEN = [
    b"\x1b]52;",
    b"pwned-title\x07",
    b"\x1b]2;pwned",
    b"\x1b[2JWIPEWORD",
    b"\x1b[HHOMEWORD",
    "\u009b".encode(),
    b"\x1bP+q",
    "\u202e".encode(),
    "\u202c".encode(),
    "\u2067".encode(),
    "\u2069".encode(),
    b"\x07\x08",
]
VISIBLE_WORDS = ["CLIPWORD", "TITLEWORD", "TITLETWO", "WIPEWORD", "HOMEWORD", "CONEWORD",
                 "DCSWORD", "DIBIWORD", "ISOLWORD", "BELLWORD"]


def hostile_model(file_name: str) -> Callable[[dict[str, Any]], Response]:
    """Reads the hostile file, then repeats it and adds its own escapes."""

    def respond(body: dict[str, Any]) -> Response:
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if body.get("model") != "test-model":
            return Reply("ok")  # side queries (titles, memory extraction)
        if last.get("role") == "tool":
            return Reply(f"The file says: {last['content']}\n\nAnd I add: {EVIL}\n\nENDMARK", chunk_size=7)
        return Reply(tool_calls=[ToolCallSpec("read_file", {"path": file_name})])

    return respond


def assert_inert(output: bytes) -> None:
    for forbidden in FORBIDDEN:
        assert forbidden not in output, (forbidden, output[output.find(forbidden) - 80 :][:200])


@pytest.mark.slow
def test_real_terminal_never_receives_injected_escapes(
    fake: FakeOpenAI, home: Path, project: Path
) -> None:
    (project / "evil.txt").write_text(f"file start {EVIL} file end\n", encoding="utf-8")
    fake.responder = hostile_model("evil.txt")
    with run_in_pty([], cwd=project, env=child_env(home)) as term:
        term.read_until(b"New session")
        term.write(b"read evil.txt please")
        term.read_until(b"read evil.txt please")
        term.write(b"\r")
        term.read_until(b"ENDMARK")
        term.write(b"\x11")  # ctrl+q
        assert term.read_to_exit() == 0
    output = bytes(term.output)
    assert_inert(output)
    for word in VISIBLE_WORDS:
        assert word.encode() in output, word
    assert "␛".encode() in output  # the escapes are shown as control pictures


def test_terminal_safe_neutralises_every_payload() -> None:
    for name, payload in PAYLOADS.items():
        safe = terminal_safe(payload)
        assert not any(ord(ch) < 0x20 and ch not in "\n\t" for ch in safe), name
        assert not any(0x7F <= ord(ch) <= 0x9F for ch in safe), name
        assert not set(safe) & set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"), name


async def test_tool_results_user_text_and_errors_render_inert(
    fake: FakeOpenAI, make_pilot_app: Callable[[], QwenmemApp], project: Path
) -> None:
    """The places the pty run cannot open: an expanded tool result, the user's own
    pasted text, an error line — checked on the app's rendered screen."""
    (project / "evil.txt").write_text(f"file start {EVIL} file end\n", encoding="utf-8")
    fake.responder = hostile_model("evil.txt")
    app = make_pilot_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot)  # the session opens behind the drawn prompt
        await send(pilot, f"my paste: {EVIL}")
        await settle(pilot)
        for item in app.screen.query(ToolCallItem):
            item.collapsed = False
        app.show_error(f"boom {EVIL}")
        await pilot.pause()
        screen = app.export_screenshot().replace("&#160;", " ")
        assert "\x1b" not in screen and "\u009b" not in screen
        for bidi in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069":
            assert bidi not in screen
        assert "file start" in screen and "CLIPWORD" in screen
        assert len(app.screen.query(Collapsible)) >= 1


@pytest.fixture
def make_pilot_app(settings: Settings, paths: Paths, project: Path) -> Callable[[], QwenmemApp]:
    return lambda: create_app(settings, paths, cwd=project, extensions=())


# -- the CLI's listings ------------------------------------------------------------------

HYPERLINK = "\x1b]8;;https://evil.example/\x1b\\LINKWORD\x1b]8;;\x1b\\"


def test_cli_listings_print_hostile_titles_and_memories_inert(
    home: Path, paths: Paths, project: Path, monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    """`qwenmem sessions`, `memory list|search|stats|export` print titles (any local
    client's POST /session, a pasted first line) and memories (the model's words) through
    the TUI's terminal-safe rendering; JSON keeps the same value with escapes."""
    from qwenmem_tui import cli
    from qwenmem_tui.config import load_settings
    from qwenmem_tui.memory.service import MemoryService
    from qwenmem_tui.paths import project_id
    from qwenmem_tui.storage.database import Database
    from qwenmem_tui.storage.sessions import SessionStore

    config = home / "config.toml"
    config.write_text(config.read_text() + '[memory]\nembedding = "hash"\n')
    hostile = f"{EVIL} {HYPERLINK}"
    scope = project_id(project)

    async def seed() -> None:
        db = await Database.open(paths.db_file)
        try:
            await SessionStore(db).create_session(scope, f"title {hostile}")
        finally:
            await db.close()
        service = await MemoryService.open(load_settings(config), paths)
        try:
            await service.save(
                WriteRequest(
                    "project",
                    "deploy_notes",
                    "deploy notes here",
                    origin="user",
                    project=scope,
                )
            )
        finally:
            await service.close()
        # The guard refuses control characters today; a memory written by an older
        # qwenmem, or straight into a shared store, can still hold them.
        db = await Database.open(paths.db_file)
        try:
            await db.write(lambda conn: conn.execute(
                "UPDATE memories SET value = ?, key = ?", (f"deploy notes {hostile}", f"k{HYPERLINK}")
            ))
        finally:
            await db.close()

    asyncio.run(seed())
    monkeypatch.chdir(project)
    commands = [
        ["sessions"], ["sessions", "--json"],
        ["memory", "list", "--all"], ["memory", "list", "--all", "--json"],
        ["memory", "search", "deploy notes"], ["memory", "search", "deploy notes", "--json"],
        ["memory", "stats"], ["memory", "export"],
    ]
    for args in commands:
        assert cli.run(args) == 0, args
        captured = capsysbinary.readouterr()
        output = captured.out + captured.err
        assert_inert(output)
        assert b"\x1b]8;" not in output and b"\x1b" not in output, (args, output[:300])
        if args[-1] == "--json":
            assert json.loads(captured.out)  # still valid JSON
        elif args[0] != "memory" or args[1] in ("list", "search"):
            assert b"CLIPWORD" in captured.out, (args, captured)  # shown, made inert
    assert cli.run(["memory", "list", "--all", "--json"]) == 0
    values = {m["value"] for m in json.loads(capsysbinary.readouterr().out)}
    assert f"deploy notes {hostile}" in values  # the escapes, not a changed value
