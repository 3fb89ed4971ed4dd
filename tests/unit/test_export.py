"""Session exports: the Markdown a person reads (tool calls folded, recaps, compaction
points and /clear marked, secrets redacted), the JSON a program reads, and
`qwenmem sessions export` on a real database."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from cli_support import CliRunner

from qwenmem_tui.features.export.formats import export_session
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import Item, SessionInfo, SessionStore

SECRET = "sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a"
CALL = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.md"}'}}


def _items() -> list[tuple[str, str, dict | None, dict]]:
    return [
        ("user", f"my key is {SECRET}, read a.md", {"role": "user", "content": f"my key is {SECRET}, read a.md"}, {}),
        ("assistant", "", {"role": "assistant", "content": "", "tool_calls": [CALL]}, {}),
        ("tool", "```\nfenced\n```", {"role": "tool", "tool_call_id": "c1", "content": "```\nfenced\n```"}, {"tool_name": "read_file", "arguments": '{"path": "a.md"}', "is_error": False}),
        ("assistant", "It holds a fence.", {"role": "assistant", "content": "It holds a fence."}, {"usage": {"prompt_tokens": 5, "completion_tokens": 3}}),
        ("away_recap", "You read a.md.", None, {}),
        ("compaction", "4 older messages compacted", None, {"summary": "Read a.md.", "cut_item_id": 3}),
        ("info", "Context cleared: the model no longer sees the messages above.", None, {"reset": True}),
        ("assistant", "Half a rep", {"role": "assistant", "content": "Half a rep"}, {"interrupted": True}),
    ]


async def _seed(paths: Paths, project: Path) -> SessionInfo:
    paths.ensure()
    db = await Database.open(paths.db_file)
    try:
        store = SessionStore(db)
        info = await store.create_session(project_id(project), "Reading a.md")
        for kind, content, message, meta in _items():
            await store.add_item(Item(None, info.id, kind, content, message, meta, 1_790_000_000.0))
        found = await store.get_session(info.id)
        assert found is not None
        return found
    finally:
        await db.close()


def _stored(info: SessionInfo) -> list[Item]:
    return [Item(i, info.id, k, c, m, meta, 0.0) for i, (k, c, m, meta) in enumerate(_items(), 1)]


def test_markdown_folds_tools_and_marks_what_is_not_dialog() -> None:
    info = SessionInfo("abcdef123456", "/p", "Reading a.md", 0.0, 0.0, 5)
    text = export_session(info, _stored(info), "md", now=0.0)
    assert text.startswith("# Reading a.md\n")
    assert SECRET not in text and "my key is" in text
    assert '<details><summary>✓ tool <code>read_file({"path": "a.md"})</code></summary>' in text
    assert "````\n```\nfenced\n```\n````" in text  # a longer fence around a fenced result
    assert "## Assistant\n\nIt holds a fence." in text
    assert "> ※ recap: You read a.md." in text
    assert "> ⟲ compacted: 4 older messages compacted\n>\n> Read a.md." in text
    assert "*(/clear: the model did not see the messages above)*" in text
    assert "Half a rep\n\n*(interrupted)*" in text
    assert text.count("## Assistant") == 2  # the tool-only reply adds no empty heading


def test_json_keeps_every_item_and_redacts() -> None:
    info = SessionInfo("abcdef123456", "/p", "Reading a.md", 0.0, 0.0, 5)
    data = json.loads(export_session(info, _stored(info), "json"))
    assert data["id"] == "abcdef123456" and len(data["items"]) == len(_items())
    assert data["items"][3]["meta"]["usage"] == {"prompt_tokens": 5, "completion_tokens": 3}
    assert SECRET not in json.dumps(data)


def test_sessions_export_cli(cli_run: CliRunner, paths: Paths, project: Path, tmp_path: Path) -> None:
    info = asyncio.run(_seed(paths, project))
    md = cli_run("sessions", "export", info.id[:6], home=paths.home, cwd=project)
    assert md.returncode == 0 and md.stdout.startswith("# Reading a.md")
    out = tmp_path / "s.json"
    js = cli_run("sessions", "export", info.id, "--format", "json", "-o", str(out), home=paths.home, cwd=project)
    assert js.returncode == 0 and js.stdout == ""
    assert json.loads(out.read_text())["id"] == info.id
    assert f"Exported session {info.id} to {out}" in js.stderr
    missing = cli_run("sessions", "export", "zzz", home=paths.home, cwd=project)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert 'No session with id "zzz"' in missing.stderr
    listed = cli_run("sessions", "--json", home=paths.home, cwd=project)
    assert json.loads(listed.stdout)[0]["id"] == info.id  # the listing still works
