"""../shared/CONTRACT.md, clause by clause, from the outside: the installed commands in
subprocesses with a temp QWENMEM_HOME, the daemon over a real socket, the TUI in tmux.

Only clauses no other test exercises end to end are here (plus regressions found by
auditing the contract); unit-level behaviour lives beside each module's own tests.
"""

from __future__ import annotations

import http.client
import inspect
import itertools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import CliRunner
from process_support import checkout_env

from qwenmem_tui.daemon import DaemonClient
from qwenmem_tui.features.recap.session_recap import RECAP_SYSTEM_PROMPT
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec

REPO = Path(__file__).resolve().parents[2]
QWENMEM = Path(sys.executable).with_name("qwenmem")
DAY = 86400.0

CONTRACT_SAMPLE = """\
[llm]
base_url = "http://127.0.0.1:8000/v1"   # any OpenAI-compatible endpoint
api_key = "sk-..."                      # or api_key_env = "DASHSCOPE_API_KEY"
model = "qwen-plus"
fast_model = "qwen-flash"               # optional; side queries fall back to model
context_window = 32768                  # tokens; drives compaction

[general]
show_session_recap = false                    # auto recap after being away; opt-in
session_recap_away_threshold_minutes = 5      # > 0, fractions allowed

[memory]
enabled = true
embedding = "hash"            # "hash" (offline, default) | "openai" (the /embeddings endpoint)
embedding_model = "text-embedding-v4"
embedding_base_url = ""       # default: llm.base_url
top_k = 5
min_score = 0.0               # 0 = the embedder's calibrated default; negative = no threshold
"""


def qwenmem(
    *args: str, home: Path, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m qwenmem_tui ...` in a fresh interpreter, with none of the developer's env."""
    return subprocess.run(
        [sys.executable, "-m", "qwenmem_tui", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=cwd,
        timeout=60,
        env=checkout_env(
            {"QWENMEM_HOME": str(home), "PATH": os.environ.get("PATH", ""), **(env or {})}
        ),
    )


def write_config(home: Path, text: str) -> Path:
    """The home private, as qwenmem makes it (a loose one gets a one-line notice)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = home / "config.toml"
    config.write_text(text, encoding="utf-8")
    config.chmod(0o600)
    return config


# -- §1 install and run ---------------------------------------------------------------


def test_quick_start_is_exactly_make_run_and_make_test() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\w*\n(.*?)```", section, re.S)
    assert block is not None
    assert block.group(1).split("\n")[:-1] == ["make run", "make test"]
    assert re.search(r"^make test$", (REPO / ".ci" / "run").read_text(), re.M)


# -- §2 config --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        CONTRACT_SAMPLE,
        CONTRACT_SAMPLE.replace('api_key = "sk-..."', 'api_key_env = "DASHSCOPE_API_KEY"')
        .replace("minutes = 5 ", "minutes = 0.5")
        .replace("min_score = 0.0", "min_score = -0.5"),
    ],
    ids=["as-written", "api_key_env-fraction-negative"],
)
def test_every_key_of_the_contract_sample_is_accepted(tmp_path: Path, text: str) -> None:
    write_config(tmp_path / "home", text)
    done = qwenmem("sessions", "--json", home=tmp_path / "home", cwd=tmp_path)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "[]", "")


def test_invalid_config_line_names_file_key_and_expectation(tmp_path: Path) -> None:
    # The real process, once; the other mistakes are checked in-process (test_config.py).
    config = write_config(tmp_path / "home", "[llm]\nmodel = qwen-plus\n")
    done = qwenmem("memory", "list", home=tmp_path / "home", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert str(config) in line and "llm.model: invalid TOML" in line and "Traceback" not in line


# -- §3 memory import / export / search ----------------------------------------------


def test_import_optional_fields_export_and_a_negative_min_score(
    cli_run: CliRunner, tmp_path: Path
) -> None:
    # In-process through the CLI's entry (cli_run): behaviour, not process start-up.
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    home = tmp_path / "home"
    write_config(home, "[memory]\nmin_score = -1\n")
    created = 1_790_000_000.0
    rows = [
        {"category": "project", "key": "db_engine", "value": "The database is PostgreSQL",
         "scope": "project"},  # hand-written: "this project"
        {"category": "reference", "key": "ci_dashboard", "value": "CI runs on Buildkite",
         "scope": "global", "origin": "agent"},
        {"category": "user", "key": "home_city", "value": "The user lives in Lisbon",
         "origin": "tool", "created_at": created, "ttl_days": 700},
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))

    # Without --trust a file's fact about the user is held (file content, issue 25) ...
    untrusted = cli_run("memory", "import", str(source), home=home / "untrusted", cwd=project)
    assert "created 2" in untrusted.stdout and "quarantined 1" in untrusted.stdout
    # ... with it, the file is the user's own backup.
    done = cli_run("memory", "import", "--trust", str(source), home=home, cwd=project)
    assert done.returncode == 0, done.stderr
    assert "created 3" in done.stdout and "rejected 0" in done.stdout

    listed = {m["key"]: m for m in json.loads(
        cli_run("memory", "list", "--json", home=home, cwd=project).stdout)}
    assert set(listed) == {"db_engine", "ci_dashboard", "home_city"}
    assert listed["db_engine"]["scope"] == str(project.resolve())
    assert (listed["ci_dashboard"]["scope"], listed["ci_dashboard"]["origin"]) == ("global", "agent")
    city = listed["home_city"]
    assert (city["origin"], city["created_at"]) == ("tool", created)
    assert city["expires_at"] == pytest.approx(created + 700 * DAY)

    # Negative min_score: no threshold, so even an unrelated query gets its top k.
    unrelated = ["zebra quantum marmalade", "home city"]
    hits = cli_run("memory", "search", "-k", "2", home=home, cwd=project,
                   stdin="\n".join(unrelated) + "\n").stdout.splitlines()
    assert [len(json.loads(line)) for line in hits] == [2, 2]
    write_config(home, "[memory]\nmin_score = 0\n")
    strict = cli_run("memory", "search", unrelated[0], "--json", home=home, cwd=project)
    assert json.loads(strict.stdout) == []

    exported = cli_run("memory", "export", home=home, cwd=project)
    assert sorted(json.loads(line)["key"] for line in exported.stdout.splitlines()) == sorted(listed)
    assert "exported 3" in exported.stderr


# -- §7 the daemon over a real socket, §2 env overrides ---------------------------------

TOKEN = "contract-token-1234"
ALLOWED = "http://ok.example"


class Http:
    """Raw HTTP, so malformed bodies and odd headers reach the server as sent."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)

    def __call__(
        self, method: str, path: str, body: bytes | None = None, *, token: bool = True,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
        try:
            conn.putrequest(method, path)
            sent = {**({"Authorization": f"Bearer {TOKEN}"} if token else {}), **(headers or {})}
            for name, value in sent.items():
                conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body or b"")))
            conn.endheaders(body)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(
                response.read()
            )
        finally:
            conn.close()


@pytest.fixture
def served(tmp_path: Path, fake: FakeOpenAI) -> Iterator[tuple[str, Path]]:
    """`qwenmem serve` whose config file points nowhere; the env overrides point at the fake."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    home = tmp_path / "home"
    write_config(
        home,
        '[llm]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "sk-file-key-0000"\n'
        'model = "file-model"\nfast_model = "file-fast"\n[memory]\nextraction = false\n',
    )
    env = {
        "QWENMEM_HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "QWENMEM_BASE_URL": fake.base_url,
        "QWENMEM_API_KEY": "sk-env-key-1111",
        "QWENMEM_MODEL": "env-model",
        "QWENMEM_FAST_MODEL": "env-fast",
        "QWENMEM_DEBUG_LOG_FILE": "0",
    }
    proc = subprocess.Popen(
        [str(QWENMEM), "serve", "--port", "0", "--token", TOKEN, "--allow-origin", ALLOWED],
        cwd=project, env=checkout_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()  # the server announces itself once it listens
        assert "listening on http://" in line, proc.stderr.read()
        yield line.split("listening on ", 1)[1].split()[0], home
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed in this venv")
def test_daemon_routes_envelopes_headers_and_env_overrides(
    served: tuple[str, Path], fake: FakeOpenAI
) -> None:
    url, home = served
    call = Http(url)
    fake.script(Reply("hello back"), Reply("<recap>Greeting the daemon. Next: more.</recap>"))

    assert call("GET", "/health", token=False)[::2] == (200, {"status": "ok"})
    status, _, body = call("GET", "/capabilities", token=False)
    assert (status, body["code"], type(body["error"])) == (401, "unauthorized", str)
    status, _, body = call("GET", "/capabilities")
    assert status == 200 and body["v"] == 1
    assert {"session_recap", "memory"} <= set(body["features"])

    status, _, body = call("POST", "/session", b'{"title": "contract"}')
    assert status == 201
    session_id = body["sessionId"]
    status, _, body = call("GET", "/sessions")
    assert status == 200 and session_id in [s["sessionId"] for s in body["sessions"]]
    status, _, body = call("POST", f"/session/{session_id}/prompt", b'{"text": "hi"}')
    assert (status, body["sessionId"], body["reply"]) == (200, session_id, "hello back")
    status, _, body = call("POST", f"/session/{session_id}/recap", b"ignored, not JSON")
    assert (status, body) == (200, {"sessionId": session_id, "recap": "Greeting the daemon. Next: more."})

    # §2: all four env overrides won over the file.
    chat, recap = fake.chat_requests
    assert chat["model"] == "env-model" and recap["model"] == "env-fast"
    assert recap["messages"][0]["content"] == RECAP_SYSTEM_PROMPT
    keys = {r.headers.get("authorization") for r in fake.requests if r.path.endswith("/completions")}
    assert keys == {"Bearer sk-env-key-1111"}

    assert call("POST", "/session/nope/recap")[::2] == (
        404, {"error": 'No session with id "nope"', "sessionId": "nope", "code": "session_not_found"}
    )
    assert call("POST", "/session", b"{bad")[::2] == (
        400, {"error": "Invalid JSON in request body", "code": "invalid_json"}
    )
    for client_id, ok in [("a" * 128, True), ("a" * 129, False), ("bad id!", False), ("", False),
                          ("host-1.app:cli_2", True)]:
        status, _, body = call("GET", "/sessions", headers={"X-Qwenmem-Client-Id": client_id})
        assert (status == 200) is ok, client_id
        assert ok or body["code"] == "invalid_client_id"

    status, headers, body = call("GET", "/health", headers={"Origin": "http://evil.example"})
    assert (status, body["code"]) == (403, "origin_not_allowed")
    assert "access-control-allow-origin" not in headers  # the refused page may not read it
    status, headers, _ = call("GET", "/sessions", headers={"Origin": ALLOWED})
    assert status == 200 and headers["access-control-allow-origin"] == ALLOWED

    with DaemonClient(url, token=TOKEN) as client:
        assert client.recap_session(session_id, client_id="contract").session_id == session_id
    params = inspect.signature(DaemonClient).parameters
    assert list(params)[:3] == ["base_url", "token", "timeout"] and params["token"].default is None
    assert DaemonClient(url).timeout > 0 and math.isfinite(DaemonClient(url).timeout)
    assert list(inspect.signature(DaemonClient.recap_session).parameters) == [
        "self", "session_id", "client_id",
    ]
    assert not [p for p in (home / "debug").glob("*")]  # QWENMEM_DEBUG_LOG_FILE=0


# -- §2 layout, §3 project, §4 slash commands and busy input in a real terminal ---------


class Terminal:
    """One tmux server on a private socket; polls the screen with a deadline."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        # env given explicitly: under pytest the C-level environ carries COLUMNS=80 and
        # LINES=24 (set with putenv, invisible in os.environ; in an xdist worker they are in
        # os.environ too), which would pin the app's size. No QWENMEM_*: the pane inherits
        # the tmux server's environment, and the suite's QWENMEM_EMBEDDING=hash would
        # override the embedder this test's config names.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("QWENMEM_") and k not in ("COLUMNS", "LINES")
        }
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              timeout=10, env=env)
        assert done.returncode == 0, f"tmux {args}: {done.stderr}"
        return done.stdout

    def start(self, command: list[str], *, cwd: Path, env: dict[str, str], status: Path) -> None:
        """Run `command`; its exit code lands in `status` (tmux may report a dead pane
        before it has reaped the process, so the pane's own exit status is unreliable)."""
        line = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        line += f" sh -c {shlex.quote(shlex.join(command) + '; echo $? > ' + shlex.quote(str(status)))}"
        self.tmux("new-session", "-d", "-s", "app", "-x", "120", "-y", "45", "-c", str(cwd), line)
        self.tmux("set-option", "-t", "app", "remain-on-exit", "on")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "app")

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "app", "-l", text)
        self.tmux("send-keys", "-t", "app", "Enter")

    def until(self, predicate: Callable[[str], bool], what: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; screen:\n{screen}")
            time.sleep(0.05)  # a bounded poll of another process's screen

    def shows(self, text: str) -> str:
        return self.until(lambda screen: text in screen, repr(text))


_SOCKETS = itertools.count()
"""A socket per test, not per worker: a killed server can still hold its socket while the
next test's client connects to it ("server exited unexpectedly" under load)."""


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal(f"qwenmem-contract-{os.getpid()}-{next(_SOCKETS)}")
    yield term
    subprocess.run(["tmux", "-L", term.socket, "kill-server"], capture_output=True, timeout=10)


BUSY = "Cannot run /recap while another operation is in progress."
SLASH_COMMANDS = ("/help", "/recap", "/resume", "/memory", "/remember <text>", "/forget <id>",
                  "/compact", "/clear", "/quit")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed in this venv")
def test_tui_commands_busy_input_and_home_layout(
    terminal: Terminal, fake: FakeOpenAI, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    home = tmp_path / "home"
    write_config(home, '[memory]\nembedding = "openai"\nembedding_model = "emb"\n'
                       "extraction = false\n")
    env = {
        "QWENMEM_HOME": str(home),
        "QWENMEM_BASE_URL": fake.base_url,
        "QWENMEM_API_KEY": "sk-tui-key-2222",
        "QWENMEM_MODEL": "test-model",
        "TERM": "xterm-256color",
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
    }
    status = tmp_path / "exit-status"
    terminal.start([str(QWENMEM)], cwd=project / "src", env=checkout_env(env), status=status)  # in the project
    terminal.shows("idle")
    terminal.type("/help")
    screen = terminal.shows("/unpin")
    assert [c for c in SLASH_COMMANDS if c not in screen] == [], screen
    terminal.type("/frobnicate")  # typed back to back: each line is its own command
    terminal.type("/frobnicate2")
    terminal.shows("Unknown command /frobnicate. Type /help for the list.")
    terminal.shows("Unknown command /frobnicate2. Type /help for the list.")
    terminal.type("/clear")
    terminal.shows("Context cleared")
    terminal.type("/recap")
    terminal.shows("Not enough conversation context for a recap yet.")
    terminal.type("/remember I prefer tabs over spaces")
    terminal.shows("Remembered")

    # While a reply streams: a message queues, /recap answers at once.
    gate = threading.Event()
    fake.script(Reply("the slow first reply", gate=gate), Reply("the queued one answered"))
    terminal.type("hello")
    terminal.shows("responding")
    terminal.type("a queued message")
    terminal.shows("1 queued")
    terminal.type("/recap")
    terminal.shows(BUSY)
    gate.set()
    terminal.shows("the queued one answered")
    terminal.shows("· idle ·")

    # While a tool runs (save_memory waits for its embedding): /recap refused, Esc cancels.
    fake.embedding_gate = threading.Event()
    fake.script(
        Reply(tool_calls=[ToolCallSpec("save_memory",
                                       {"category": "user", "key": "city", "value": "Porto"})]),
        Reply("never sent"),
    )
    terminal.type("remember I live in Porto")
    terminal.shows("running tool")
    terminal.type("/recap")
    terminal.until(lambda screen: screen.count(BUSY) == 2, "a second busy answer")
    terminal.tmux("send-keys", "-t", "app", "Escape")
    terminal.shows("· idle ·")
    fake.embedding_gate.set()
    assert "never sent" not in terminal.screen()
    terminal.type("/quit")
    terminal.until(lambda _: status.exists() and status.read_text().strip() != "", "exit")
    assert status.read_text().strip() == "0"

    # §3: the session belongs to the git root; §2: everything under QWENMEM_HOME.
    sessions = json.loads(qwenmem("sessions", "--json", home=home, cwd=project).stdout)
    [session] = sessions
    assert session["title"] == "hello" and session["message_count"] >= 4
    debug = home / "debug"
    assert (debug / f"{session['id']}.txt").is_file()
    assert (debug / "latest.txt").is_symlink()
    assert (debug / "latest.txt").resolve() == (debug / f"{session['id']}.txt").resolve()
    assert (home / "qwenmem.db").is_file() and any((home / "index").iterdir())
