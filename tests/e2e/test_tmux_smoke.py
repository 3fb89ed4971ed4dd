"""The installed `qwenmem` in a real terminal (tmux) against the fake server.

Type a message, read the streamed reply off the screen, /quit, then `qwenmem --resume`
shows the conversation again.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_support import checkout_env

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec

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


def _env(fake: FakeOpenAI, home: Path) -> dict[str, str]:
    return checkout_env({
        "QWENMEM_HOME": str(home),
        "QWENMEM_BASE_URL": fake.base_url,
        "QWENMEM_API_KEY": "sk-test",
        "QWENMEM_MODEL": "fake-model",
        "TERM": "xterm-256color",
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(home)),
    })


_SOCKETS = itertools.count()
"""A socket per test, not per worker: a killed server can still hold its socket while the
next test's client connects to it ("server exited unexpectedly" under load)."""


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal(f"qwenmem-test-{os.getpid()}-{next(_SOCKETS)}")
    yield term
    subprocess.run(["tmux", "-L", term.socket, "kill-server"], capture_output=True, timeout=10)


@pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed in this venv")
def test_chat_quit_and_resume_in_a_real_terminal(
    terminal: Terminal, fake: FakeOpenAI, home: Path, project: Path
) -> None:
    fake.script(Reply("The answer is **forty-two**.", chunk_size=4))
    env = _env(fake, home)
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


def _raw(terminal: Terminal, name: str, data: str) -> None:
    """Write `data` to the program's terminal in one piece, byte for byte (-H: hex)."""
    terminal.tmux("send-keys", "-t", name, "-H", *(f"{b:02x}" for b in data.encode()))


def _click_report(screen: str, text: str) -> str:
    """A left press and release on the first cell of `text`, as one SGR mouse report."""
    for row, line in enumerate(screen.splitlines()):
        col = line.find(text)
        if col >= 0:
            return f"\x1b[<0;{col + 1};{row + 1}M\x1b[<0;{col + 1};{row + 1}m"
    raise AssertionError(f"{text!r} is not on screen:\n{screen}")


@pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed in this venv")
def test_keys_after_a_click_alt_enter_and_mouse_reports_in_a_real_terminal(
    terminal: Terminal, fake: FakeOpenAI, home: Path, project: Path
) -> None:
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})]),
        Reply("The README says hello."),
    )
    sent: list[str] = []

    def echo(body: dict) -> Reply:
        # Side calls (the title) ask too: only the user's messages are recorded.
        text = body["messages"][-1]["content"]
        if body["messages"][-1]["role"] == "user" and body.get("tools"):
            sent.append(text)
        return Reply(f"Got {len(text.splitlines())} line(s).")

    fake.responder = echo
    terminal.start("keys", [str(QWENMEM)], cwd=project, env=_env(fake, home))
    terminal.wait_for("keys", "fake-model")
    terminal.type("keys", "what is in the readme?")
    terminal.wait_for("keys", "README says hello")
    screen = terminal.wait_for("keys", "idle")
    # A click on the tool call (it folds open and takes the focus), then a sentence
    # typed at once and Enter, as tmux delivers them: every key reaches the prompt.
    _raw(terminal, "keys", _click_report(screen, "read_file("))
    terminal.wait_for("keys", "# Demo project")  # the result shows: the click landed
    terminal.type("keys", "typed after the click")
    terminal.wait_for("keys", "Got 1 line(s).")
    terminal.wait_for("keys", "idle")
    assert sent == ["typed after the click"]
    # Alt+Enter (tmux sends ESC CR) is a newline; a press and release arriving in one
    # read are a click, never text in the prompt.
    terminal.tmux("send-keys", "-t", "keys", "-l", "alpha")
    terminal.tmux("send-keys", "-t", "keys", "M-Enter")
    _raw(terminal, "keys", _click_report(terminal.screen("keys"), "Got 1 line(s)."))
    terminal.tmux("send-keys", "-t", "keys", "-l", "beta")
    terminal.tmux("send-keys", "-t", "keys", "Enter")
    terminal.wait_for("keys", "Got 2 line(s).")
    assert sent == ["typed after the click", "alpha\nbeta"]
    terminal.tmux("send-keys", "-t", "keys", "C-q")
    terminal.wait_for("keys", exited=True)


MCP_SERVER_TIME = Path(sys.executable).with_name("mcp-server-time")


@pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed in this venv")
@pytest.mark.skipif(not MCP_SERVER_TIME.exists(), reason="mcp-server-time is not installed")
def test_mcp_model_copy_export_in_a_real_terminal(
    terminal: Terminal, fake: FakeOpenAI, home: Path, project: Path
) -> None:
    """By config alone: an MCP server from PyPI the model calls, once the user allows it
    (its read-only hint is shown, not obeyed: issue 36.9); then /model, /copy (OSC 52
    into tmux's clipboard), /export, the token count and the quit line."""
    with (home / "config.toml").open("a", encoding="utf-8") as config:
        config.write(f'\n[mcp.servers.time]\ncommand = "{MCP_SERVER_TIME}"\n')
    env = {k: v for k, v in _env(fake, home).items() if k != "QWENMEM_MODEL"}
    terminal.start("basics", [str(QWENMEM)], cwd=project, env=env)
    terminal.tmux("set-option", "-s", "set-clipboard", "on")  # OSC 52 fills a tmux buffer
    terminal.wait_for("basics", "test-model")
    deadline = time.monotonic() + 40
    while True:  # /mcp shows the state now; the server starts in the background
        terminal.type("basics", "/mcp")
        try:
            terminal.wait_for("basics", "mcp__time__get_current_time  (asks first", timeout=2)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise

    fake.script(
        Reply(tool_calls=[ToolCallSpec("mcp__time__get_current_time", {"timezone": "Asia/Tokyo"})]),
        Reply("In Tokyo it is **evening**."),
    )
    terminal.type("basics", "what time is it in Tokyo?")
    screen = terminal.wait_for("basics", "Allow once")  # the question, with the server's claim
    assert "Run get_current_time of MCP server time?" in screen and "only reads (its word" in screen
    assert len(fake.chat_requests) == 1  # nothing ran before the answer
    terminal.tmux("send-keys", "-t", "basics", "1")  # allow once
    screen = terminal.wait_for("basics", "it is evening")
    assert "mcp__time__get_current_time(" in screen  # inline, like a built-in tool
    tool_result = fake.chat_requests[1]["messages"][-1]
    assert tool_result["role"] == "tool" and '"timezone": "Asia/Tokyo"' in tool_result["content"]
    screen = terminal.wait_for("basics", "idle")
    assert " in / " in screen and " out" in screen  # the session's tokens

    terminal.type("basics", "/model test-fast")
    terminal.wait_for("basics", "Model: test-fast")
    fake.script(Reply("Fast *and* brief."))
    terminal.type("basics", "hello")
    terminal.wait_for("basics", "Fast and brief.")
    assert fake.chat_requests[-1]["model"] == "test-fast"
    terminal.wait_for("basics", "idle")

    terminal.type("basics", "/copy")
    terminal.wait_for("basics", "Copied the last reply")
    assert terminal.tmux("show-buffer").strip() == "Fast *and* brief."

    terminal.type("basics", "/export chat.md")
    terminal.wait_for("basics", "Exported this session to chat.md")
    exported = (project / "chat.md").read_text()
    assert "## You\n\nwhat time is it in Tokyo?" in exported
    assert "<code>mcp__time__get_current_time" in exported
    assert "Fast *and* brief." in exported

    terminal.tmux("send-keys", "-t", "basics", "C-q")
    terminal.wait_for("basics", exited=True)
    # The line may have scrolled above the pane by the time it is dead: read the history.
    screen = terminal.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "basics")
    # Plain `qwenmem` when that name runs this one, else its full path (issue 38).
    assert re.search(r"saved\. Resume it with: \S*qwenmem --resume \S+", screen), screen
    assert "Traceback" not in screen


def _exited(pid: int) -> bool:
    """Whether `pid` has ended: gone, or a zombie its parent (the tmux server, busy
    with the window that closed) has not reaped yet — `kill(pid, 0)` still succeeds
    on one, and that was read as "did not exit" in about half the runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


def _gone(pid: int, timeout: float = 20.0) -> None:
    """Wait until process `pid` has exited (a bounded poll of another process)."""
    deadline = time.monotonic() + timeout
    while True:
        if _exited(pid):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not exit")
        time.sleep(0.05)


@pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed in this venv")
@pytest.mark.parametrize("how", ["SIGTERM", "terminal closed"])
def test_a_signal_mid_stream_keeps_the_partial_reply_marked_interrupted(
    how: str, terminal: Terminal, fake: FakeOpenAI, home: Path, project: Path
) -> None:
    import sqlite3
    import threading

    partial = "Half of the reply made it through "
    gate = threading.Event()
    fake.script(Reply(partial + "and the rest never did.", chunk_size=2,
                      stall_after=len(partial) // 2, stall_gate=gate))  # fmt: skip
    env = _env(fake, home)
    try:
        terminal.start("sig", [str(QWENMEM)], cwd=project, env=env)
        terminal.wait_for("sig", "fake-model")
        terminal.type("sig", "tell me")
        terminal.wait_for("sig", partial.strip())
        pid = int(terminal.tmux("display-message", "-p", "-t", "sig", "#{pane_pid}"))
        if how == "SIGTERM":
            os.kill(pid, 15)
        else:  # tmux hangs up on the program, as a closed terminal window does
            terminal.tmux("kill-window", "-t", "sig")
        _gone(pid)
    finally:
        gate.set()
    with sqlite3.connect(home / "qwenmem.db") as db:
        rows = db.execute("SELECT type, content, meta FROM items ORDER BY id").fetchall()
    assert [(kind, content) for kind, content, _ in rows] == [
        ("user", "tell me"),
        ("assistant", partial),
    ]
    assert '"interrupted":true' in rows[1][2].replace(" ", "")

    terminal.start("again", [str(QWENMEM), "--resume"], cwd=project, env=env)
    screen = terminal.wait_for("again", "interrupted")
    assert partial.strip() in screen
    terminal.tmux("send-keys", "-t", "again", "C-q")
    terminal.wait_for("again", exited=True)


@pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed in this venv")
def test_a_question_sent_before_qwenmem_has_the_terminal_is_sent(
    terminal: Terminal, fake: FakeOpenAI, home: Path, project: Path
) -> None:
    """A question typed and sent while qwenmem is still loading: before qwenmem takes
    the terminal it is in the shell's cooked mode, where Enter became a line feed the
    prompt read as Ctrl+J (a newline), and the question stayed unsent. The keys are
    typed before qwenmem has even started (the pane's shell waits for a file)."""
    fake.script(Reply("It is **early**."))
    env = _env(fake, home)
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
