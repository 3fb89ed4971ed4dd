"""`qwenmem acp` as an editor runs it: a child process on stdio, driven by the official
`agent-client-protocol` SDK's own client (`spawn_agent_process`), the model the fake
OpenAI server (contract §16)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ClientCapabilities,
    DeniedOutcome,
    Implementation,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    UserMessageChunk,
)
from mcp_support import PYTHON, write_servers

from qwenmem_tui.memory.model import Origin, WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage import Database, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, ToolCallSpec
from tests.process_support import checkout_env

FACT = "The integration tests of this project run with make itest"
RECEIPT = re.compile(r"^⌁ 1 memory\b[^\n]*: project/test_command$", re.MULTILINE)
"""The receipt's line: its count (and whatever the receipt adds), then the names."""


class RecordingClient:
    """An ACP client that records every session update and answers permission
    requests as told (`answer`: an option id, or None to cancel the prompt)."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.permissions: list[Any] = []
        self.answer: str | None = "once"
        self._changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self._changed.set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permissions.append((session_id, tool_call, options, len(self.updates)))
        if self.answer is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(option_id=self.answer, outcome="selected"))

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        """Until `condition` holds over the updates (bounded: a hang fails the test)."""
        async with asyncio.timeout(60):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    def text(self, session_id: str, since: int = 0) -> str:
        """The agent's message text sent to `session_id` since update `since`; the
        replies to different user messages (a replay) on lines of their own."""
        return "".join(
            u.content.text if isinstance(u, AgentMessageChunk) else "\n"
            for sid, u in self.updates[since:]
            if sid == session_id and isinstance(u, (AgentMessageChunk, UserMessageChunk))
        ).lstrip("\n")

    def of(self, kind: type, since: int = 0) -> list[Any]:
        return [u for _, u in self.updates[since:] if isinstance(u, kind)]


@asynccontextmanager
async def acp_agent(cwd: Path, client: RecordingClient, stderr: Path) -> AsyncIterator[tuple[Any, Any]]:
    """`qwenmem acp` started in `cwd`, initialized: its connection and process."""
    with stderr.open("ab") as errors:
        async with spawn_agent_process(
            client,
            sys.executable,
            "-m",
            "qwenmem_tui",
            "acp",
            env=checkout_env(os.environ),
            cwd=cwd,
            transport_kwargs={"stderr": errors, "shutdown_timeout": 60},
        ) as (conn, process):
            answer = await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=Implementation(name="test-editor", version="1.0"),
            )
            assert answer.protocol_version == PROTOCOL_VERSION
            assert answer.agent_capabilities.load_session is True
            assert answer.agent_info.name == "qwenmem"
            yield conn, process
        assert process.returncode == 0  # a SIGTERM too ends it cleanly


def _configure(home: Path, tmp_path: Path) -> Path:
    """Memory without extraction side calls, the notes MCP server; the notes file."""
    notes = tmp_path / "notes.txt"
    script, _ = write_servers(tmp_path)
    with (home / "config.toml").open("a", encoding="utf-8") as config:
        config.write(
            '\n[memory]\nembedding = "hash"\nextraction = false\n'
            "\n[compaction]\nkeep_recent_turns = 2\n"
            f"\n[mcp.servers.notes]\ncommand = {json.dumps(PYTHON)}\n"
            f"args = [{json.dumps(str(script))}, {json.dumps(str(notes))}]\n"
        )
    return notes


async def _seed_memory(settings: Any, paths: Paths, project: Path) -> int:
    service = await MemoryService.open(settings, paths)
    try:
        saved = await service.save(
            WriteRequest(
                "project", "test_command", FACT, origin=Origin.USER, project=project_id(project)
            )
        )
    finally:
        await service.close()
    return saved.memory.id


async def _qwenmem(cwd: Path, *args: str) -> str:
    """`qwenmem ARGS` as a user runs it in `cwd` (its output; it must succeed)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "qwenmem_tui", *args,
        cwd=cwd, env=checkout_env(os.environ), stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0
    return out.decode()


def _prompt(text: str) -> list[Any]:
    return [text_block(text)]


async def test_conversation_with_memory_tools_and_cancel_then_resume(
    fake: FakeOpenAI,
    home: Path,
    paths: Paths,
    project: Path,
    tmp_path: Path,
) -> None:
    notes = _configure(home, tmp_path)
    from qwenmem_tui.config import load_settings

    memory_id = await _seed_memory(load_settings(paths.config_file), paths, project)
    stall = threading.Event()
    fake.script(
        Reply("Run make itest."),
        Reply(tool_calls=[ToolCallSpec("mcp__notes__add_note", {"text": "buy milk"}, id="call_1")]),
        Reply("Noted."),
        Reply(tool_calls=[ToolCallSpec("mcp__notes__add_note", {"text": "buy eggs"}, id="call_2")]),
        Reply("A long answer that stops half way", chunk_size=4, stall_after=2, stall_gate=stall),
    )
    client = RecordingClient()
    stderr = tmp_path / "acp-stderr.txt"
    try:
        async with acp_agent(project, client, stderr) as (conn, process):
            session_id = (await conn.new_session(cwd=str(project))).session_id
            await client.wait_for(lambda: bool(client.of(AvailableCommandsUpdate)))
            assert {c.name for c in client.of(AvailableCommandsUpdate)[0].available_commands} == {"compact", "recap"}

            # 1. A question whose answer is in memory: recalled into the request, the
            # receipt one plain line under the reply.
            answer = await conn.prompt(session_id=session_id, prompt=_prompt("How do I run the tests?"))
            assert answer.stop_reason == "end_turn"
            first = fake.chat_requests[0]["messages"][-1]["content"]
            assert "make itest" in first and "<system-reminder>" in first
            assert client.text(session_id).startswith("Run make itest.")
            assert RECEIPT.search(client.text(session_id).rsplit("\n\n", 1)[-1])

            # 2. An untrusted MCP tool: shown as a tool call, asked with
            # session/request_permission, run once allowed, its result an update.
            seen = len(client.updates)
            answer = await conn.prompt(session_id=session_id, prompt=_prompt("note: buy milk"))
            assert answer.stop_reason == "end_turn"
            (asked,) = client.permissions
            (started,) = client.of(ToolCallStart, seen)
            assert asked[0] == session_id and asked[1].tool_call_id == started.tool_call_id
            assert asked[3] > client.updates.index((session_id, started))  # the call came first
            assert {o.option_id for o in asked[2]} == {"once", "always", "deny"}
            assert started.title == 'mcp__notes__add_note(text="buy milk")'
            (finished,) = client.of(ToolCallProgress, seen)
            assert finished.tool_call_id == started.tool_call_id and finished.status == "completed"
            assert finished.content[0].content.text == "added: buy milk"
            assert notes.read_text() == "buy milk\n"
            assert client.text(session_id, seen).startswith("Noted.")

            # The editor cancels the prompt at the question: the tool does not run,
            # the prompt ends cancelled.
            client.answer = None
            answer = await conn.prompt(session_id=session_id, prompt=_prompt("note: buy eggs"))
            assert answer.stop_reason == "cancelled" and len(client.permissions) == 2
            assert notes.read_text() == "buy milk\n"
            client.answer = "once"

            # 3. A cancel mid-stream: the partial reply kept, marked interrupted.
            seen = len(client.updates)
            prompting = asyncio.create_task(
                conn.prompt(session_id=session_id, prompt=_prompt("Tell me a long story"))
            )
            await client.wait_for(lambda: "A long" in client.text(session_id, seen))
            await conn.cancel(session_id=session_id)
            answer = await prompting
            stall.set()
            assert answer.stop_reason == "cancelled"
            assert client.text(session_id, seen).startswith("A long")
            assert "\n\n⏹ interrupted" in client.text(session_id, seen)
    finally:
        stall.set()
    assert "Traceback" not in stderr.read_text(encoding="utf-8", errors="replace")

    # An ordinary qwenmem session: listed, its partial reply stored as interrupted.
    listed = json.loads(await _qwenmem(project, "sessions", "--json"))
    assert [s["id"] for s in listed] == [session_id]
    db = await Database.open(paths.db_file)
    try:
        items = await SessionStore(db).load_items(session_id)
    finally:
        await db.close()
    replies = [i for i in items if i.type == "assistant"]
    assert replies[-1].meta.get("interrupted") is True
    assert replies[-1].content.startswith("A long")
    assert memory_id in [m["id"] for i in items if i.type == "memory_receipt" for m in i.meta["memories"]]

    # session/load resumes it: the history replayed, the conversation goes on.
    await _load_and_go_on(fake, project, tmp_path, session_id, stderr)


async def _load_and_go_on(
    fake: FakeOpenAI, project: Path, tmp_path: Path, session_id: str, stderr: Path
) -> None:
    client = RecordingClient()
    fake.script(Reply("Welcome back."))
    async with acp_agent(project, client, stderr) as (conn, process):
        await conn.load_session(cwd=str(project), session_id=session_id)
        said = [u.content.text for u in client.of(UserMessageChunk)]
        assert said == ["How do I run the tests?", "note: buy milk", "note: buy eggs", "Tell me a long story"]
        replayed = client.text(session_id)
        assert "Run make itest." in replayed and RECEIPT.search(replayed)
        assert "⏹ interrupted" in replayed
        calls = client.of(ToolCallStart)
        results = client.of(ToolCallProgress)
        assert [c.tool_call_id for c in calls] == [r.tool_call_id for r in results]
        assert [r.status for r in results] == ["completed", "failed"]  # the cancelled one
        answer = await conn.prompt(session_id=session_id, prompt=_prompt("Still there?"))
        assert answer.stop_reason == "end_turn"
        history = fake.chat_requests[-1]["messages"]
        said_before = [m["content"] for m in history if m["role"] == "user"]
        assert "note: buy milk" in said_before and said_before[-1].endswith("Still there?")
        assert any(m.get("content") == "Noted." for m in history)

        # The session's commands: a recap stored as the TUI's, a compaction's marker.
        fake.script(
            Reply("<recap>You asked how to run the tests and noted milk.</recap>"),
            Reply(json.dumps({"summary": "Tests and notes.", "decisions": [], "pinned_turns": []})),
        )
        seen = len(client.updates)
        assert (await conn.prompt(session_id=session_id, prompt=_prompt("/recap"))).stop_reason == "end_turn"
        assert client.text(session_id, seen) == "※ recap: You asked how to run the tests and noted milk."
        seen = len(client.updates)
        assert (await conn.prompt(session_id=session_id, prompt=_prompt("/compact"))).stop_reason == "end_turn"
        assert client.text(session_id, seen).startswith("⟲ ⋯ ") and "older messages summarized" in client.text(session_id, seen)
        # session/list: the project's sessions, this one with its title.
        (listed,) = (await conn.list_sessions(cwd=str(project))).sessions
        assert listed.session_id == session_id and listed.title == "How do I run the tests?"
        assert listed.cwd == str(project)

        # The endpoint fails: one line in a JSON-RPC error, no traceback.
        fake.script(HTTPError(400, {"error": {"message": "the model exploded", "type": "invalid_request_error"}}))
        with pytest.raises(RequestError) as failed:
            await conn.prompt(session_id=session_id, prompt=_prompt("Break, please"))
        assert failed.value.code == -32603 and "the model exploded" in str(failed.value)
        assert "\n" not in str(failed.value) and "Traceback" not in str(failed.value)
        with pytest.raises(RequestError) as missing:
            await conn.load_session(cwd=str(project), session_id="no-such-session")
        assert "No session with id" in str(missing.value)
    assert "Traceback" not in stderr.read_text(encoding="utf-8", errors="replace")


async def test_the_editor_stopping_the_agent_mid_reply_keeps_it(
    fake: FakeOpenAI, home: Path, paths: Paths, project: Path, tmp_path: Path
) -> None:
    """Editors end their agent with SIGTERM (a closed window, a quit): the reply so far
    is stored, marked interrupted, as a cancel would leave it."""
    _configure(home, tmp_path)
    stall = threading.Event()
    fake.script(Reply("The first words and then", chunk_size=4, stall_after=2, stall_gate=stall))
    client = RecordingClient()
    stderr = tmp_path / "acp-stderr.txt"
    try:
        async with acp_agent(project, client, stderr) as (conn, process):
            session_id = (await conn.new_session(cwd=str(project))).session_id
            prompting = asyncio.create_task(conn.prompt(session_id=session_id, prompt=_prompt("Go on")))
            await client.wait_for(lambda: "The fir" in client.text(session_id))
            process.terminate()
            await process.wait()
            try:  # answered "cancelled" if the answer left before the pipe closed
                assert (await prompting).stop_reason == "cancelled"
            except ConnectionError:
                pass
    finally:
        stall.set()
    db = await Database.open(paths.db_file)
    try:
        items = await SessionStore(db).load_items(session_id)
    finally:
        await db.close()
    (reply,) = [i for i in items if i.type == "assistant"]
    assert reply.content.startswith("The fir") and reply.meta.get("interrupted") is True
    assert "Traceback" not in stderr.read_text(encoding="utf-8", errors="replace")
