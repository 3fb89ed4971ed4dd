"""`qwenmem serve` as a user runs it: a child process on a free port, driven by the SDK.

The issue's "done when": a script creates a session, prompts it twice and gets a recap
back using only the SDK.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwenmem_tui.daemon import DaemonClient, DaemonError
from qwenmem_tui.memory.extract import EXTRACTION_SYSTEM_PROMPT
from qwenmem_tui.recap import RECAP_SYSTEM_PROMPT
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

TOKEN = "e2e-token-5678"


@pytest.fixture
def served(home: Path, project: Path) -> Iterator[str]:
    """`qwenmem serve --port 0` in `project`; yields the URL its first line announces."""
    env = {**os.environ, "QWENMEM_SERVER_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "qwenmem_tui", "serve", "--port", "0"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # blocks until the socket is listening (or exit)
        assert "listening on http://" in line, proc.stderr.read()
        assert str(project) in line and "token required" in line
        yield line.split("listening on ", 1)[1].split()[0]
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl+C: graceful shutdown, then the usual 130
        try:
            assert proc.wait(timeout=15) == 130
            assert "Traceback" not in proc.stderr.read()
        finally:
            proc.kill()
            proc.stdout.close()
            proc.stderr.close()


def test_a_script_prompts_twice_and_gets_a_recap(served: str, fake: FakeOpenAI, home: Path) -> None:
    recap = "Exploring the demo project. Next: read its README."
    replies = iter([Reply("It is a demo."), Reply("Read the README."), Reply(f"<recap>{recap}</recap>")])

    def respond(body: dict) -> Reply:
        # Memory extraction runs in the background after each turn (nothing to keep).
        if body["messages"][0]["content"] == EXTRACTION_SYSTEM_PROMPT:
            return Reply('{"memories": []}')
        return next(replies)

    fake.responder = respond
    with DaemonClient(served, token=TOKEN, timeout=20.0) as client:
        session_id = client.create_session("e2e")
        assert client.prompt(session_id, "what is this project?").reply == "It is a demo."
        assert client.prompt(session_id, "what should I do first?").reply == "Read the README."
        result = client.recap_session(session_id, client_id="e2e-script")
        assert (result.session_id, result.recap) == (session_id, recap)
        assert any(r["messages"][0]["content"] == RECAP_SYSTEM_PROMPT for r in fake.chat_requests)
        with pytest.raises(DaemonError) as caught:
            client.recap_session("s/1")
        assert caught.value.body == {
            "error": 'No session with id "s/1"',
            "sessionId": "s/1",
            "code": "session_not_found",
        }
    with DaemonClient(served, timeout=20.0) as anonymous, pytest.raises(DaemonError) as caught:
        anonymous.list_sessions()
    assert caught.value.code == "unauthorized"

    debug_log = (home / "debug" / "daemon.txt").read_text()
    assert "client=e2e-script" in debug_log
    assert TOKEN not in debug_log
