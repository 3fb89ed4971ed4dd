"""kill -9 at each write point of a turn, one after another, on one session.

Each child is a real ChatSession process on the temp home; it prints every commit, so
the parent kills at a known point (waiting on the child's lines and the fake server's
gates, never on time). After every kill: `PRAGMA integrity_check` is ok, every item
the child reported committed is there, and the next child resumes the session and
sends the model a valid history that still holds every question asked so far.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec

from .conftest import child_env, integrity, run_in_pty, stored_items

DRIVER = Path(__file__).with_name("crash_driver.py")
MODES = ("before_first_byte", "mid_stream", "mid_tool", "mid_tool_call_stream")
# Each mode once: the write points are the modes. Repeating the first two (six kills,
# as before) killed at the same points again: 2 CPU-s and a third of the wall more.
KILLS = len(MODES)


class Child:
    def __init__(self, home: Path, project: Path, base_url: str, session: str, text: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), str(home), str(project), base_url, session, text],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(home),
        )
        self.lines: list[str] = []
        self._partial = b""

    def wait_for(self, prefix: str, timeout: float = 30.0) -> str:
        """Read the child's lines (bounded) until one starts with `prefix`.

        Raw `os.read` on the pipe, not a buffered reader: a line already sitting in a
        Python buffer would be invisible to `select` and wait out the timeout.
        """
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        end = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            data = os.read(fd, 65536) if ready else b""
            if not data:
                stderr = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else b""
                raise AssertionError(f"child never said {prefix!r}; said {self.lines}; stderr: {stderr!r}")
            *complete, self._partial = (self._partial + data).split(b"\n")
            self.lines += [line.decode().strip() for line in complete]

    def committed(self) -> list[tuple[int, str]]:
        return [
            (int(parts[1]), parts[2])
            for parts in (line.split() for line in self.lines)
            if parts[0] == "ITEM"
        ]

    def kill(self) -> int:
        """SIGKILL, reap; the exit status (-9 unless the child had died already)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.close()
        return self.proc.returncode

    def close(self) -> None:
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def assert_valid_history(messages: list[dict]) -> None:
    """What providers demand: each tool call answered right after it, no stray results."""
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        assert message["role"] != "tool", f"stray tool result {message}"
        for call in message.get("tool_calls") or []:
            assert index < len(messages) and messages[index]["role"] == "tool", messages
            assert messages[index]["tool_call_id"] == call["id"]
            index += 1


@pytest.mark.slow
def test_kill_9_at_every_write_point_loses_nothing(
    fake: FakeOpenAI, home: Path, paths: Paths, project: Path
) -> None:
    never = threading.Event()  # stalled replies wait on this; the server frees them at stop
    session = "new"
    committed: dict[int, str] = {}
    asked: list[str] = []
    kills = {mode: 0 for mode in MODES}
    for round_ in range(KILLS):
        mode = MODES[round_ % len(MODES)]
        text = f"question {round_} ({mode})"
        requests_before = len(fake.chat_requests)
        if mode == "before_first_byte":
            fake.script(Reply("never sent", gate=never))
        elif mode == "mid_stream":
            fake.script(Reply("a partial answer " * 20, chunk_size=4, stall_after=1 + round_ % 5, stall_gate=never))
        elif mode == "mid_tool":
            fake.script(Reply("let me wait", tool_calls=[ToolCallSpec("wait_forever", {}, id=f"call_{round_}")]))
        else:
            fake.script(Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md" * 8})],
                              chunk_size=4, stall_after=3, stall_gate=never))
        child = Child(home, project, fake.base_url, session, text)
        try:
            session = child.wait_for("SESSION").split()[1]
            if mode == "mid_stream":
                child.wait_for("DELTA")
            elif mode == "mid_tool":
                child.wait_for("TOOL_RUNNING")
            else:
                # The request is in, and the stream (if any) is stalled on its gate.
                fake.wait_for_requests(requests_before + 1)
            child.wait_for("ITEM")  # at least the user message was reported committed
        finally:
            status = child.kill()
        assert status == -signal.SIGKILL, child.lines
        kills[mode] += 1
        asked.append(text)
        committed.update(child.committed())

        # The first request of this child resumed everything before it, validly.
        first = fake.chat_requests[requests_before]["messages"]
        assert_valid_history(first)
        assert [m["content"] for m in first if m["role"] == "user"] == asked

        assert integrity(paths.db_file) == "ok"
        items = asyncio.run(stored_items(paths, session))
        by_id = {item.id: item.type for item in items}
        for item_id, kind in committed.items():
            assert by_id.get(item_id) == kind, (item_id, kind, round_)
        for item in items:
            if item.type == "assistant" and item.meta.get("interrupted"):
                assert item.content  # a partial is only stored with the text it had

    assert sum(kills.values()) == KILLS and all(kills.values())

    # One last child runs to the end on the resumed session.
    fake.script(Reply("every round is still here"))
    child = Child(home, project, fake.base_url, session, "are you still there?")
    try:
        assert child.wait_for("FINISHED") == "FINISHED ok"
    finally:
        child.close()
    assert_valid_history(fake.chat_requests[-1]["messages"])
    assert integrity(paths.db_file) == "ok"
    items = asyncio.run(stored_items(paths, session))
    assert [i.content for i in items if i.type == "user"] == [*asked, "are you still there?"]

    # The real `qwenmem --resume` opens it and shows the last reply.
    with run_in_pty(["--resume"], cwd=project, env=child_env(home)) as term:
        term.read_until(b"every round is still here")
        term.write(b"\x11")  # ctrl+q
        status = term.read_to_exit()
        assert status == 0, term.output[-20000:].decode(errors="replace")


@pytest.mark.slow
def test_kill_9_of_the_real_tui_mid_stream_then_resume(
    fake: FakeOpenAI, home: Path, paths: Paths, project: Path
) -> None:
    """The installed entry point itself, killed while a reply streams onto the screen."""
    never = threading.Event()
    fake.script(Reply("PARTIALWORD " * 40, chunk_size=12, stall_after=3, stall_gate=never))
    fake.responder = lambda body: Reply("side answer")  # titles, extraction
    with run_in_pty([], cwd=project, env=child_env(home)) as term:
        term.read_until(b"New session")
        term.write(b"a question before the crash")
        term.read_until(b"a question before the crash")
        term.write(b"\r")
        term.read_until(b"PARTIALWORD")  # the reply is on screen, the stream stalled
        os.kill(term.pid, signal.SIGKILL)
        assert term.read_to_exit() == -signal.SIGKILL
    assert integrity(paths.db_file) == "ok"

    fake.script(Reply("the answer after the crash"))
    with run_in_pty(["--resume"], cwd=project, env=child_env(home)) as term:
        term.read_until(b"a question before the crash")
        term.write(b"again please")
        term.read_until(b"again please")
        term.write(b"\r")
        term.read_until(b"the answer after the crash")
        term.write(b"\x11")
        assert term.read_to_exit() == 0
    main_requests = [r for r in fake.chat_requests if r["model"] == "test-model"]
    resumed = main_requests[-1]["messages"]
    assert_valid_history(resumed)
    users = [m["content"] for m in resumed if m["role"] == "user"]
    # (memory reminders, if any, lead a user message; the typed text ends it)
    assert users[-2].endswith("a question before the crash") and users[-1].endswith("again please")


def _checkpointed_reply(db_file: Path) -> str | None:
    """The content of an assistant checkpoint (marked interrupted) once one is saved."""
    conn = sqlite3.connect(db_file)
    try:
        row = conn.execute(
            "SELECT content FROM items WHERE type = 'assistant' "
            "AND json_extract(meta, '$.interrupted') = 1 ORDER BY id DESC LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else row[0]


@pytest.mark.slow
def test_kill_9_mid_stream_keeps_the_checkpointed_partial_reply(
    fake: FakeOpenAI, home: Path, paths: Paths, project: Path
) -> None:
    """A long reply killed mid-stream comes back on resume as an interrupted partial."""
    never = threading.Event()
    reply = "".join(f"word{i} " for i in range(400))  # ~3,000 characters
    # 80 chunks of 16 characters reach the client, past the first checkpoint, then stall.
    fake.script(Reply(reply, chunk_size=16, stall_after=80, stall_gate=never))
    child = Child(home, project, fake.base_url, "new", "tell me a long story")
    try:
        session = child.wait_for("SESSION").split()[1]
        child.wait_for("DELTA")
        deadline = time.monotonic() + 30
        partial = _checkpointed_reply(paths.db_file)
        while partial is None and time.monotonic() < deadline:
            select.select([], [], [], 0.05)  # bounded poll: the database is the only signal
            partial = _checkpointed_reply(paths.db_file)
    finally:
        status = child.kill()
    assert status == -signal.SIGKILL
    assert partial, "no checkpoint of the streaming reply was saved"
    assert integrity(paths.db_file) == "ok"

    items = asyncio.run(stored_items(paths, session))
    assert [item.type for item in items] == ["user", "assistant"]
    kept = items[-1]
    assert kept.meta.get("interrupted") is True
    assert reply.startswith(kept.content) and len(kept.content) >= 512
    assert kept.message == {"role": "assistant", "content": kept.content}
