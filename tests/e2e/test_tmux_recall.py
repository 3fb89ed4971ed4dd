"""Issue 39 in a real terminal (tmux): messages typed quickly and sent 0.2 s after their
last key, and a paste sent 0.2 s after it lands, carry their memory in the first
request the model gets.

The 0.2 s is the user's timing, the scenario under test; the checks are what the fake
model received and what the debug log says, never a time. `memory.initial_wait_ms`
lets the first request wait for a recall still running (10 s at most), so a machine too
loaded to finish a hash-embedder recall in 0.2 s still gives one answer; the paste's
recall must have been warmed before Enter and adopted by the query (the TUI starts it
as the paste lands), which is what makes the first request carry it without a wait.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from tests.e2e.test_tmux_smoke import QWENMEM, Terminal, terminal  # noqa: F401 (the fixture)
from tests.process_support import checkout_env

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed"),
]

FACTS = {
    "home_city": ("I live in Lisbon", "which city do I live in?"),
    "editor": ("I write code in Helix", "which editor do I write code in?"),
    "staging_db_port": ("The staging database listens on port 6543", "what port does staging db use?"),
}
PASTED = ("deploy_target", "We deploy the API to Fly.io from the main branch", "where do we deploy the API to?")
USERS_PAUSE_S = 0.2


def seed(project: Path) -> None:
    source = project.parent / "seed.jsonl"
    rows = [
        {"category": "project" if key.startswith(("staging", "deploy")) else "user", "key": key, "value": value}
        for key, (value, _) in [*FACTS.items(), (PASTED[0], PASTED[1:])]
    ]
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = subprocess.run(
        [sys.executable, "-m", "qwenmem_tui", "memory", "import", "--trust", str(source)],
        cwd=project, capture_output=True, text=True, timeout=120, env=checkout_env(os.environ),
    )
    assert done.returncode == 0, done.stderr


def debug_lines(home: Path, tag: str) -> list[str]:
    log = home / "debug" / "latest.txt"
    return [line for line in log.read_text(encoding="utf-8").splitlines() if tag in line]


def wait_for_replies(terminal: Terminal, fake: FakeOpenAI, home: Path, n: int) -> None:  # noqa: F811
    """Until the model got the n-th message, its reply is shown (the prompt is idle)
    and its extraction is done (the debug log says so): the next message is typed at a
    quiet moment, as a person reading would."""
    deadline = time.monotonic() + 90
    while (
        sum(1 for body in fake.chat_requests if body["model"] == "test-model") < n
        or len(debug_lines(home, "[MEMORY_EXTRACT]")) < n
        or " idle " not in terminal.screen("chat")
    ):
        assert time.monotonic() < deadline, terminal.screen("chat")
        time.sleep(0.05)  # a bounded poll of another process's screen and log


def first_request(fake: FakeOpenAI, question: str) -> dict[str, Any]:
    """The first request of the main model that carries ``question``."""
    return next(
        body for body in fake.chat_requests
        if body["model"] == "test-model" and question in json.dumps(body["messages"])
    )


def test_quick_sends_and_a_paste_carry_their_memory_in_the_first_request(
    terminal: Terminal, fake: FakeOpenAI, home: Path, project: Path  # noqa: F811
) -> None:
    # The hash embedder: the subject is when recall starts, not how fast a model embeds.
    with (home / "config.toml").open("a") as config:
        config.write('\n[memory]\nembedding = "hash"\ninitial_wait_ms = 10000\n')
    seed(project)
    fake.responder = lambda body: Reply("Noted.")
    env = checkout_env({
        "QWENMEM_HOME": str(home),
        "TERM": "xterm-256color",
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(home)),
    })
    terminal.start("chat", [str(QWENMEM)], cwd=project, env=env)
    terminal.wait_for("chat", "idle", timeout=60)
    # The first message of a launch has its own rule (it waits while memory opens).
    terminal.type("chat", "hi")
    wait_for_replies(terminal, fake, home, 1)
    for n, (value, question) in enumerate(FACTS.values(), start=2):
        terminal.tmux("send-keys", "-t", "chat", "-l", question)  # a burst of keys
        time.sleep(USERS_PAUSE_S)  # the user's timing, not a wait for anything
        terminal.tmux("send-keys", "-t", "chat", "Enter")
        wait_for_replies(terminal, fake, home, n)
        assert value in first_request(fake, question)["messages"][-1]["content"], question
        assert "delivered point=initial" in debug_lines(home, "[MEMORY_PREFETCH] delivered")[-1]
    _, value, question = PASTED
    terminal.tmux("set-buffer", "--", question)
    terminal.tmux("paste-buffer", "-p", "-t", "chat")  # a bracketed paste, as a terminal sends it
    time.sleep(USERS_PAUSE_S)
    terminal.tmux("send-keys", "-t", "chat", "Enter")
    wait_for_replies(terminal, fake, home, len(FACTS) + 2)
    assert value in first_request(fake, question)["messages"][-1]["content"]
    # Warmed as it landed and adopted by the query: not a recall started on Enter.
    assert "delivered point=initial strategy=warm" in debug_lines(home, "[MEMORY_PREFETCH] delivered")[-1]
    terminal.tmux("send-keys", "-t", "chat", "C-q")
    terminal.wait_for("chat", exited=True)
