"""One current truth (issue 35, "Done when") as a user runs it in a real terminal: the
real `qwenmem` processes, on the default multilingual embedder, against the loopback
fake server, in a fresh home per language, with no fast model reachable (it answers
404). Three languages of three scripts (Latin, CJK, Cyrillic); all eleven run the same
commands and assertions in process (tests/unit/memory/test_identity_cli.py), with a
judging fast model too.

In each: in tmux, three `/remember`s — a fact, a distinct fact about the same person,
the first restated in other words — then the question in that language. The distinct
fact stays active, `qwenmem memory search` for the question — run from another
project — puts the newer version first, the request the chat model received never
carries the older version unmarked, and no key holds a value word (every key is ASCII
snake_case). The search runs as a real process; the listing, which reads rows only, in
this one (`cli_run`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import CliRunner
from identity_support import (
    ANSWER,
    CASES,
    by_id,
    fresh_home,
    never_older_unmarked,
    newer_first,
    offline_rows_hold,
    project_dir,
    unreachable_fast_model,
)
from process_support import checkout_env
from test_tmux_smoke import QWENMEM, Terminal, terminal  # noqa: F401 (the fixture)

from qwenmem_tui.testing.fake_openai import FakeOpenAI

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed"),
]

IN_A_TERMINAL = ("de", "zh", "ru")  # one language per script; all eleven run in process


def env_for(home: Path) -> dict[str, str]:
    # QWENMEM_EMBEDDING named explicitly: the suite's "hash" would reach the child.
    return checkout_env({
        "QWENMEM_HOME": str(home), "QWENMEM_EMBEDDING": "auto", "QWENMEM_DEBUG_LOG_FILE": "0",
        "TERM": "xterm-256color", "PATH": os.environ.get("PATH", ""), "HOME": str(home),
    })  # fmt: skip


def qwenmem(home: Path, cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "qwenmem_tui", *args], capture_output=True,
                          text=True, cwd=cwd, env=env_for(home), timeout=120)  # fmt: skip
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def remember_in_a_terminal(terminal: Terminal, home: Path, project: Path, case: tuple[str, ...]) -> None:  # noqa: F811
    """/remember the three notes and ask the question in the real app, then quit."""
    terminal.start("chat", [str(QWENMEM)], cwd=project, env=env_for(home))
    terminal.wait_for("chat", "idle", timeout=120)
    for n, text in enumerate(case[:3], start=1):
        terminal.type("chat", f"/remember {text}")
        terminal.wait_for("chat", f"Remembered #{n} ", timeout=60)
    terminal.type("chat", case[3])
    screen = terminal.wait_for("chat", ANSWER, timeout=60)
    assert "Traceback" not in screen
    terminal.tmux("send-keys", "-t", "chat", "C-q")
    terminal.wait_for("chat", exited=True, timeout=60)


@pytest.mark.parametrize("lang", IN_A_TERMINAL)
def test_with_no_model_the_newer_version_comes_first_in_a_real_terminal(
    lang: str, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner,
    terminal: Terminal,  # noqa: F811
) -> None:
    case = CASES[lang]
    fake.responder = unreachable_fast_model
    home = fresh_home(tmp_path / "offline", fake)
    project = project_dir(tmp_path / "project")
    remember_in_a_terminal(terminal, home, project, case)

    # The rows as `memory list` gives them, in this process (it reads rows only).
    listed = cli_run("memory", "list", "--all", "--json", home=home, cwd=project)
    assert listed.returncode == 0, listed.stderr
    first, newer = offline_rows_hold(by_id(listed.stdout), case[4])
    # The person's facts are theirs in every project: searched from another one.
    elsewhere = project_dir(tmp_path / "another-project")
    newer_first([m["id"] for m in json.loads(qwenmem(home, elsewhere, "memory", "search", case[3], "--json"))],
                first, newer)  # fmt: skip
    never_older_unmarked(fake, case)
