"""Every process hears every memory change at once: LISTEN on the change channel.

Every mutating transaction ends with ``NOTIFY qwenmem_memory, '<generation>'``, so a
write or supersede in one process reaches every other process's index within
milliseconds, not at its next recall. Notifications are only a wake-up call: the
generation counter decides what changed, so a lost or coalesced one costs nothing,
and after a reconnect the listener always triggers one catch-up sync.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from qwenmem_tui.memory.postgres.connection import describe_dsn
from qwenmem_tui.memory.postgres.schema import CHANNEL

log = logging.getLogger("qwenmem.memory")

Notice = Callable[[str], None]
ChangeCallback = Callable[[int], Awaitable[None]]


class GenerationListener:
    """Calls ``on_change(generation)`` whenever any process commits a memory change.

    Callbacks never overlap: notifications arriving while one runs are coalesced
    into one more call. A dropped connection is re-established with backoff for as
    long as the listener lives, and the user is told once when it drops and once
    when it is back.
    """

    def __init__(
        self,
        dsn: str,
        on_change: ChangeCallback,
        *,
        on_notice: Notice,
        connect_timeout: float = 5.0,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        ignore_pid: Callable[[int], bool] = lambda _pid: False,
    ) -> None:
        self._dsn = dsn
        self._ignore_pid = ignore_pid
        self._on_change = on_change
        self._notice = on_notice
        self._connect_timeout = connect_timeout
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._conn: asyncpg.Connection | None = None
        self._pending = False
        self._latest = -1
        self._drain_task: asyncio.Task[None] | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        """Listen now; if the server is already gone, keep trying in the background."""
        try:
            await self._connect()
        except Exception as exc:
            log.warning("[MEMORY_SYNC] cannot listen on %s yet: %s", describe_dsn(self._dsn), exc)
            self._reconnect_task = asyncio.create_task(self._reconnect())

    async def _connect(self) -> None:
        conn = await asyncpg.connect(self._dsn, timeout=self._connect_timeout)
        try:
            await conn.add_listener(CHANNEL, self._on_notify)
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn

    def _on_notify(self, _conn: object, pid: int, _channel: str, payload: str) -> None:
        if self._ignore_pid(pid):
            return
        try:
            self._latest = max(self._latest, int(payload))
        except ValueError:
            log.warning("[MEMORY_SYNC] ignoring a malformed notification %r", payload[:40])
            return
        self._kick()

    def _kick(self) -> None:
        self._pending = True
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending and not self._closed:
            self._pending = False
            try:
                await self._on_change(self._latest)
            except Exception as exc:  # the next notification or recall syncs again
                log.warning("[MEMORY_SYNC] sync after a notification failed: %s", exc)

    def _on_terminated(self, _conn: object) -> None:
        self._conn = None
        if self._closed or (self._reconnect_task is not None and not self._reconnect_task.done()):
            return
        self._notice(f"memory: lost the change feed from {describe_dsn(self._dsn)}; reconnecting")
        self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        attempt = 0
        while not self._closed:
            attempt += 1
            await asyncio.sleep(min(self._max_backoff, self._backoff * 2 ** (attempt - 1)))
            try:
                await self._connect()
            except Exception as exc:
                log.info("[MEMORY_SYNC] reconnect %d failed: %s", attempt, exc)
                continue
            self._notice(f"memory: change feed from {describe_dsn(self._dsn)} restored")
            self._kick()  # changes made while we were away sent notifications nobody heard
            return

    async def close(self) -> None:
        self._closed = True
        for task in (self._reconnect_task, self._drain_task):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.remove_termination_listener(self._on_terminated)
            try:
                await asyncio.wait_for(conn.close(), timeout=self._connect_timeout)
            except Exception:
                conn.terminate()
