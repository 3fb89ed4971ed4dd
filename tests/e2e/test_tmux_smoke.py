"""The installed `qwenmem` in a real terminal (tmux) against the fake server.

Type a message, read the streamed reply off the screen, /quit, then `qwenmem --resume`
shows the conversation again.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_support import checkout_env

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

QWENMEM = Path(sys.executable).with_name("qwenmem")


class Terminal:
    """One tmux server on a private socket, so nothing leaks into the user's tmux."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def start(self, name: str, command: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        line = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        line += " " + " ".join(shlex.quote(part) for part in command)
        self.tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "-c", str(cwd), line)
        self.tmux("set-option", "-t", name, "remain-on-exit", "on")

    def screen(self, name: str) -> str:
        return self.tmux("capture-pane", "-p", "-t", name)

    def type(self, name: str, text: str) -> None:
        self.tmux("send-keys", "-t", name, "-l", text)
        self.tmux("send-keys", "-t", name, "Enter")

    def dead(self, name: str) -> bool:
        return self.tmux("display-message", "-p", "-t", name, "#{pane_dead}").strip() == "1"

    def wait_for(
        self,
        name: str,
        predicate: str | None = None,
        *,
        exited: bool = False,
        timeout: float = 20.0,
    ) -> str:
        """Poll the pane until `predicate` text shows (or the program exits)."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen(name)
            if exited and self.dead(name):
                return screen
            if predicate is not None and predicate in screen:
                return screen
            if time.monotonic() > deadline:
                what = "exit" if exited else repr(predicate)
                raise AssertionError(f"timed out waiting for {what}; screen:\n{screen}")
            time.sleep(0.1)  # a bounded poll of another process's screen


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal(f"qwenmem-test-{os.getpid()}")
    yield term
    subprocess.run(["tmux", "-L", term.socket, "kill-server"], capture_output=True, timeout=10)


@pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed in this venv")
def test_chat_quit_and_resume_in_a_real_terminal(
    terminal: Terminal, fake: FakeOpenAI, home: Path, project: Path
) -> None:
    fake.script(Reply("The answer is **forty-two**.", chunk_size=4))
    env = checkout_env({
        "QWENMEM_HOME": str(home),
        "QWENMEM_BASE_URL": fake.base_url,
        "QWENMEM_API_KEY": "sk-test",
        "QWENMEM_MODEL": "fake-model",
        "TERM": "xterm-256color",
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(home)),
    })
    terminal.start("first", [str(QWENMEM)], cwd=project, env=env)
    terminal.wait_for("first", "fake-model")
    terminal.type("first", "What is the answer?")
    screen = terminal.wait_for("first", "forty-two")
    assert "What is the answer?" in screen
    terminal.wait_for("first", "idle")
    terminal.type("first", "/quit")
    terminal.wait_for("first", exited=True)

    terminal.start("second", [str(QWENMEM), "--resume"], cwd=project, env=env)
    screen = terminal.wait_for("second", "forty-two")
    assert "What is the answer?" in screen
    assert "Traceback" not in screen
    terminal.tmux("send-keys", "-t", "second", "C-q")
    terminal.wait_for("second", exited=True)
