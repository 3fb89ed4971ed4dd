"""A memory receipt in a real terminal (tmux): the line under the reply, Ctrl+O lists
the memory, `f` forgets it there, and /resume shows the receipt with the fix."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from process_support import checkout_env
from test_tmux_smoke import QWENMEM, Terminal, terminal  # noqa: F401 (the fixture)

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed"),
]


def test_receipt_open_and_forget_in_a_real_terminal(
    terminal: Terminal, fake: FakeOpenAI, home: Path, project: Path  # noqa: F811
) -> None:
    with (home / "config.toml").open("a") as config:
        config.write("\n[memory]\ninitial_wait_ms = 30000\n")  # delivery at the UserQuery
    fake.script(Reply("You live in **Lisbon**."))
    env = checkout_env({
        "QWENMEM_HOME": str(home),
        "TERM": "xterm-256color",
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(home)),
    })
    terminal.start("chat", [str(QWENMEM)], cwd=project, env=env)
    terminal.wait_for("chat", "idle", timeout=60)
    terminal.type("chat", "/remember I live in Lisbon")
    terminal.wait_for("chat", "Remembered #1 user/home_city")
    terminal.type("chat", "where do I live?")
    screen = terminal.wait_for("chat", "⌁ 1 memory", timeout=30)
    assert "You live in Lisbon." in screen
    terminal.tmux("send-keys", "-t", "chat", "C-o")
    screen = terminal.wait_for("chat", "recalled for this message")
    assert "saved just now · origin user" in screen
    terminal.wait_for("chat", "f Forget")  # the footer has the focused list's keys
    terminal.tmux("send-keys", "-t", "chat", "f")
    terminal.wait_for("chat", "✗ forgotten")
    terminal.tmux("send-keys", "-t", "chat", "C-q")
    terminal.wait_for("chat", exited=True)

    terminal.start("again", [str(QWENMEM), "--resume"], cwd=project, env=env)
    terminal.wait_for("again", "⌁ 1 memory", timeout=60)
    terminal.tmux("send-keys", "-t", "again", "C-o")
    screen = terminal.wait_for("again", "✗ forgotten")
    assert "Traceback" not in screen
    terminal.tmux("send-keys", "-t", "again", "C-q")
    terminal.wait_for("again", exited=True)
