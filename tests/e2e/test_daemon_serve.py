"""`qwenmem serve` as a user runs it: a child process on a free port, driven by the SDK.

The issue's "done when": a script creates a session, prompts it twice and gets a recap
back using only the SDK.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path

import httpx
import pytest

from qwenmem_tui.daemon import DaemonClient, DaemonError
from qwenmem_tui.features.memory.extract import EXTRACTION_SYSTEM_PROMPT
from qwenmem_tui.features.recap.session_recap import RECAP_SYSTEM_PROMPT
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from tests.chat_support import TEST_API_KEY

TOKEN = "e2e-token-5678"


@contextmanager
def serve_process(
    project: Path, *flags: str, env: dict[str, str] | None = None, max_files: int | None = None
) -> Iterator[tuple[str, str]]:
    """`qwenmem serve --port 0 FLAGS` in `project`; yields (URL, its first line).

    `max_files` lowers the child's RLIMIT_NOFILE, as a user's `ulimit -n` would.
    """

    def limit_files() -> None:
        if max_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max_files, max_files))

    proc = subprocess.Popen(
        [sys.executable, "-m", "qwenmem_tui", "serve", "--port", "0", *flags],
        cwd=project,
        env=env or dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit_files,
    )
    try:
        line = proc.stdout.readline()  # blocks until the socket is listening (or exit)
        assert "listening on http://" in line, proc.stderr.read()
        yield line.split("listening on ", 1)[1].split()[0], line
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl+C: graceful shutdown, then the usual 130
        try:
            assert proc.wait(timeout=15) == 130
            assert "Traceback" not in proc.stderr.read()
        finally:
            proc.kill()
            proc.stdout.close()
            proc.stderr.close()


@pytest.fixture
def served(home: Path, project: Path) -> Iterator[str]:
    """`qwenmem serve --port 0` in `project` with a token; yields its URL."""
    env = {**os.environ, "QWENMEM_SERVER_TOKEN": TOKEN}
    with serve_process(project, env=env) as (url, line):
        assert str(project) in line and "token required" in line
        yield url


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


def test_rebinding_hosts_and_half_open_floods_do_not_reach_the_sessions(
    home: Path, project: Path
) -> None:
    """Issue #17 against the real process: a foreign Host gets 403 (an --allow-host name
    and the bound address do not); 400 half-open connections to 127.0.0.1, more than
    the daemon's 256 file descriptors, leave /health answering."""
    with serve_process(project, "--allow-host", "dev.box.lan", max_files=256) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        with httpx.Client(base_url=url, timeout=10) as client:
            client.post("/session", json={"title": "private plans"})
            refused = client.get("/sessions", headers={"Host": f"attacker.example:{port}"})
            assert (refused.status_code, refused.json()["code"]) == (403, "host_not_allowed")
            assert "private plans" not in refused.text
            listed = client.get("/sessions", headers={"Host": "dev.box.lan"})
            assert "private plans" in listed.text
            assert "private plans" in client.get("/sessions").text  # Host: 127.0.0.1:port
        with ExitStack() as flood:
            for _ in range(400):
                conn = socket.create_connection(("127.0.0.1", port), timeout=10)
                flood.enter_context(closing(conn))
                conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            health = httpx.get(f"{url}/health", timeout=10)
            assert health.json() == {"status": "ok"}


def test_an_openai_client_gets_memory_through_the_real_proxy(
    home: Path, project: Path, fake: FakeOpenAI
) -> None:
    """`qwenmem serve` as a user runs it, the official SDK pointed at its /v1: the memory
    added with `qwenmem memory import` reaches the upstream, the upstream key is the
    configured one and never the client's token, and the answer comes back as sent."""
    import openai

    with (home / "config.toml").open("a", encoding="utf-8") as config:
        config.write("\n[memory]\ninitial_wait_ms = 5000\n")
    fact = '{"category": "project", "key": "deploy", "value": "Deploy with make ship"}\n'
    imported = subprocess.run(
        [sys.executable, "-m", "qwenmem_tui", "memory", "import", "/dev/stdin"],
        input=fact, text=True, capture_output=True, cwd=project, timeout=60,
    )
    assert imported.returncode == 0, imported.stderr
    fake.responder = lambda body: Reply("Run make ship.", prompt_tokens=11, completion_tokens=3)
    env = {**os.environ, "QWENMEM_SERVER_TOKEN": TOKEN}
    with serve_process(project, env=env) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="test-model", messages=[{"role": "user", "content": "How do I deploy?"}]
        )
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).models.list()
    completion = raw.parse()
    assert completion.choices[0].message.content == "Run make ship."
    assert completion.usage.completion_tokens == 3
    assert raw.headers["x-qwenmem-memories"] != ""
    sent = fake.chat_requests[-1]["messages"][-1]["content"]
    assert "Deploy with make ship" in sent and sent.endswith("How do I deploy?")
    assert {r.headers.get("authorization") for r in fake.requests} == {f"Bearer {TEST_API_KEY}"}
