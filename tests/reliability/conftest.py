"""Helpers for attacking the finished product: a core chat on the temp home, the real
app under Pilot, and the real CLI in a pseudo-terminal whose raw output we read.

Everything waits on conditions (the fake server's request log, lines a child prints,
bytes on a pty), never on sleeps.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import select
import signal
import sqlite3
import struct
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from chat_support import collect, session_parts

from qwenmem_tui.chat.events import ChatEvent, QueryFinished
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.config import Settings
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import Item, SessionStore

REPO_ROOT = Path(__file__).resolve().parents[2]
SIZE = (100, 30)


@dataclass
class Core:
    """The core chat stack on the temp home, as the TUI builds it minus the screen."""

    db: Database
    store: SessionStore
    llm: LLMClient
    session: ChatSession
    retries: list[tuple[int, float]] = field(default_factory=list)

    async def ask(self, text: str) -> list[ChatEvent]:
        return await collect(self.session, text)


def outcome(events: list[ChatEvent]) -> QueryFinished:
    finished = events[-1]
    assert isinstance(finished, QueryFinished), events
    return finished


async def stored_items(paths: Paths, session_id: str) -> list[Item]:
    """The session's items as a fresh connection sees them (what a restart would load)."""
    db = await Database.open(paths.db_file)
    try:
        return await SessionStore(db).load_items(session_id)
    finally:
        await db.close()


def integrity(db_file: Path) -> str:
    """``PRAGMA integrity_check`` on a fresh connection: "ok" for an intact database."""
    conn = sqlite3.connect(db_file)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def make_core(
    settings: Settings, paths: Paths, project: Path
) -> Callable[..., Any]:
    """`async with make_core(base_url=..., timeout=...) as core`: a ChatSession on the home."""

    @asynccontextmanager
    async def make(*, base_url: str | None = None, timeout: float = 30.0) -> AsyncIterator[Core]:
        paths.ensure()
        retries: list[tuple[int, float]] = []
        db = await Database.open(paths.db_file, on_retry=lambda a, d: retries.append((a, d)))
        store = SessionStore(db)
        llm = LLMClient(
            base_url=base_url or settings.llm.base_url or "",
            api_key=settings.api_key_value(),
            model=settings.llm.model,
            timeout=timeout,
        )
        info = await store.create_session(project_id(project))
        session = ChatSession(info=info, **session_parts(store, llm, settings, project))
        try:
            yield Core(db, store, llm, session, retries)
        finally:
            await session.close()
            await llm.aclose()
            await db.close()

    return make


# -- the real CLI in a pseudo-terminal --------------------------------------------------


class PtyProcess:
    """`python -m qwenmem_tui` on a pty: raw bytes it writes to the terminal, keys in."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd
        self.output = bytearray()
        self.status: int | None = None

    def read_until(self, needle: bytes, *, timeout: float = 30.0) -> None:
        """Read (bounded by `timeout`) until `needle` shows up in the output."""
        loop_deadline = _deadline(timeout)
        while needle not in self.output:
            if not self._read_some(loop_deadline()):
                raise AssertionError(
                    f"{needle!r} never reached the terminal; last output: {bytes(self.output[-600:])!r}"
                )

    def read_to_exit(self, *, timeout: float = 30.0) -> int:
        """Read everything until the process closes the terminal; its exit status."""
        remaining = _deadline(timeout)
        while self._read_some(remaining()):
            pass
        _, status = os.waitpid(self.pid, 0)
        self.status = status
        return os.waitstatus_to_exitcode(status)

    def _read_some(self, timeout: float) -> bool:
        if timeout <= 0:
            return False
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        self.output += data
        return True

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)

    def kill(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, self.status = os.waitpid(self.pid, 0)
        os.close(self.fd)


def _deadline(timeout: float) -> Callable[[], float]:
    end = time.monotonic() + timeout
    return lambda: end - time.monotonic()


@contextmanager
def run_in_pty(args: list[str], *, cwd: Path, env: dict[str, str]) -> Iterator[PtyProcess]:
    """Fork the real CLI onto a new pty (100x30, xterm); killed at the end whatever happens."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: become the CLI
        try:
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "qwenmem_tui", *args], env)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    process = PtyProcess(pid, fd)
    try:
        yield process
    finally:
        process.kill()


def serve_url(proc: subprocess.Popen[str], *, timeout: float = 30.0) -> str:
    """The base URL from `qwenmem serve --port 0`'s banner, read with a bound."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    remaining = _deadline(timeout)
    data = b""
    while b"\n" not in data:
        ready, _, _ = select.select([fd], [], [], max(0.0, remaining()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            raise AssertionError(f"qwenmem serve never said where it listens: {data!r}")
        data += chunk
    return data.decode().split("listening on ", 1)[1].split()[0]


def child_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment for a child qwenmem: the temp home, no developer overrides."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("QWENMEM_") and key not in ("TEXTUAL", "TERM")
    }
    env.update(QWENMEM_HOME=str(home), TERM="xterm-256color", COLORTERM="truecolor")
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


async def wait_for(predicate: Callable[[], bool], *, timeout: float = 10.0) -> None:
    """Poll `predicate` on the event loop (for state another task changes)."""

    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)
