"""A question typed and sent while `qwenmem` is still loading, in a real terminal (tmux).

Before qwenmem takes the terminal it is in the shell's cooked mode, where Enter is
turned into a line feed that the prompt reads as Ctrl+J (a newline): the question
stayed in the prompt, unsent. Here the keys are typed before qwenmem has even started
(the pane's shell waits for a file), as on a machine slow enough to load.
"""

from __future__ import annotations

import os
import shlex
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


def test_a_question_sent_before_qwenmem_has_the_terminal_is_sent(
    terminal: Terminal, fake: FakeOpenAI, home: Path, project: Path  # noqa: F811
) -> None:
    fake.script(Reply("It is **early**."))
    env = checkout_env({
        "QWENMEM_HOME": str(home),
        "TERM": "xterm-256color",
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(home)),
    })
    go = project / "go"
    # The shell keeps the cooked mode until qwenmem starts: when `go` exists.
    wait = f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.05; done; exec {shlex.quote(str(QWENMEM))}"
    terminal.start("chat", ["sh", "-c", wait], cwd=project, env=env)
    terminal.type("chat", "what time is it?")  # text, then Enter
    terminal.wait_for("chat", "what time is it?")  # echoed by the cooked terminal
    go.touch()
    screen = terminal.wait_for("chat", "It is early.", timeout=60)
    assert "what time is it?" in screen
    # The question went as one message, its Enter as "send" (not a newline in it).
    assert fake.chat_requests[0]["messages"][-1]["content"].endswith("what time is it?")
