"""The one SQLite connection: WAL, busy timeout, migrations, retried writes.

Several processes may share `qwenmem.db` (two TUIs, the daemon, a CLI command), so
every write runs in a `BEGIN IMMEDIATE` transaction that takes the write lock up
front, SQLite's busy timeout absorbs short waits, and `write()` retries with backoff
when the lock is still held after that, telling the UI through `on_retry`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from qwenmem_tui.paths import PRIVATE_DIR_MODE, private_file, tighten_file
from qwenmem_tui.storage.migrations import MIGRATIONS

log = logging.getLogger("qwenmem.storage")

T = TypeVar("T")

RESTORE_HINT = (
    ": `qwenmem memory export --salvage FILE` saves every memory still readable; move the"
    " database away to start fresh, then `qwenmem memory import --trust --keep-scope FILE` restores"
    " that file (or a `qwenmem memory export` backup) with each memory in its own project"
)
"""Appended to every "the database is damaged" message: the way back for memories.
``--keep-scope``: a restore that put every project's memories into the current one
would not be a restore; ``--trust``: the backup is the user's own, not file content."""

INTEGRITY_PROBLEMS_SHOWN = 3
"""Lines of ``PRAGMA quick_check`` quoted in the message: enough to say where."""

SIDE_FILES = ("-wal", "-shm", "-journal")
"""SQLite's companions of a database file, as much chat history as the file itself."""

RetryCallback = Callable[[int, float], None]
"""Called as `on_retry(attempt, delay)` before sleeping `delay` seconds."""


class StorageError(Exception):
    """A storage failure worth one line to the user; `str(e)` names the file."""


class DiskFull(StorageError):
    """A write found no space left: what was committed before it is kept, and the
    file is intact (SQLite rolled the transaction back)."""


def is_disk_full(exc: BaseException) -> bool:
    """SQLITE_FULL, or an OS write that found the disk (or the quota) full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF == 13


def disk_full(path: Path, exc: BaseException) -> DiskFull:
    """The one line for a write that ran out of space at ``path``."""
    return DiskFull(f"Cannot write {path}: the disk is full; free some space and retry")


def _is_locked(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def is_corrupt(exc: BaseException) -> bool:
    # SQLITE_CORRUPT (11) and SQLITE_NOTADB (26), extended codes included.
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in (11, 26)


def damaged(path: Path, exc: BaseException) -> StorageError:
    """The one line for a database SQLite found damaged: which file, that it was left
    as it was, and the way back (salvage, then a restore that keeps each scope)."""
    return StorageError(f"Database {path} is damaged ({exc}); it was left untouched{RESTORE_HINT}")


def split_statements(script: str) -> list[str]:
    """Split an SQL script into complete statements.

    `sqlite3.complete_statement` understands string literals, comments and trigger
    bodies, so a `;` inside any of them does not end a statement.
    """
    statements: list[str] = []
    current = ""
    for piece in script.split(";"):
        current += piece + ";"
        if sqlite3.complete_statement(current):
            if current.strip(" \t\r\n;"):
                statements.append(current.strip())
            current = ""
    if current.rstrip(";").strip():
        raise ValueError(f"incomplete SQL statement at the end of a script: {current.strip()!r}")
    return statements


class Database:
    """An open `qwenmem.db`; use `Database.open`, never the constructor."""

    def __init__(
        self,
        path: Path,
        conn: aiosqlite.Connection,
        *,
        on_retry: RetryCallback | None = None,
        retries: int = 6,
        backoff: float = 0.05,
    ) -> None:
        self.path = path
        self.conn = conn
        self.on_retry = on_retry
        self._retries = retries
        self._backoff = backoff
        # One connection is shared by every coroutine; a write transaction spans
        # several awaits, so writers must not interleave on it.
        self._write_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        on_retry: RetryCallback | None = None,
        busy_timeout_ms: int = 5000,
        retries: int = 6,
        backoff: float = 0.05,
        migrations: Sequence[str] = MIGRATIONS,
    ) -> Database:
        """Open (creating if needed) and migrate the database at `path`.

        A file that is not a usable SQLite database raises `StorageError` naming it;
        the file is never modified or replaced in that case.
        """
        path = Path(path)
        try:
            path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
            # Chat history and memories: 0600 whatever the umask; SQLite creates the
            # -wal and -shm files with the database file's mode, older ones are fixed.
            private_file(path)
            for suffix in SIDE_FILES:
                tighten_file(path.with_name(path.name + suffix))
            conn = await aiosqlite.connect(path, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            if is_disk_full(exc):
                raise disk_full(path, exc) from exc
            raise StorageError(f"Cannot open database {path}: {exc}") from exc
        conn.row_factory = sqlite3.Row
        db = cls(path, conn, on_retry=on_retry, retries=retries, backoff=backoff)
        try:
            await db._configure(busy_timeout_ms)
            await db._migrate(migrations)
        except BaseException as exc:
            await conn.close()
            if is_disk_full(exc):  # e.g. the WAL or a migration could not be written
                raise disk_full(path, exc) from exc
            if isinstance(exc, sqlite3.DatabaseError):
                if _is_locked(exc):
                    raise StorageError(
                        f"Database {path} is locked by another process: {exc}"
                    ) from exc
                raise StorageError(
                    f"Database {path} is unreadable ({exc}); it was left untouched"
                    f"{RESTORE_HINT}"
                ) from exc
            raise
        return db

    async def _configure(self, busy_timeout_ms: int) -> None:
        # busy_timeout first: switching to WAL may itself wait for another writer.
        await self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        # Reading the schema touches the header and fails cleanly on a non-database
        # file before anything could be written to it.
        await self.fetchone("SELECT count(*) FROM sqlite_master")
        row = await self._switch_to_wal()
        if row is None or str(row[0]).lower() != "wal":
            log.warning("[STORAGE] WAL unavailable for %s (journal_mode=%s)", self.path, row and row[0])
        await self.conn.execute("PRAGMA synchronous = NORMAL")
        await self.conn.execute("PRAGMA foreign_keys = ON")

    async def _switch_to_wal(self) -> sqlite3.Row | None:
        """`PRAGMA journal_mode = WAL`, retried with backoff while locked: the switch
        needs the file to itself, and while another process is opening or migrating the
        same database SQLite may refuse it at once instead of waiting its busy timeout
        (seen once in the proxy tests, where the test seeds the home the proxy opens)."""
        attempt = 0
        while True:
            try:
                return await self.fetchone("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc):
                    raise
                attempt += 1
                await self._wait_out_lock(attempt, exc)

    async def check_integrity(self) -> None:
        """Read every page once (``PRAGMA quick_check``) and raise the "damaged" error if
        any is unreadable.

        Opening reads only the schema: a file damaged further in opens fine and fails
        later, on whichever row a request touches. A long-lived face (the daemon) checks
        here, so it refuses to start instead of serving errors. Seconds for a database of
        gigabytes, hence not on every open.
        """
        try:
            rows = await self.fetchall(f"PRAGMA quick_check({INTEGRITY_PROBLEMS_SHOWN})")
        except StorageError:
            raise
        except sqlite3.DatabaseError as exc:  # e.g. I/O error reading a page
            raise self._corrupt(exc) from exc
        problems = [str(row[0]) for row in rows]
        if problems != ["ok"]:
            raise self._corrupt(sqlite3.DatabaseError("; ".join(problems)))

    async def user_version(self) -> int:
        row = await self.fetchone("PRAGMA user_version")
        return int(row[0]) if row else 0

    async def _migrate(self, migrations: Sequence[str]) -> None:
        target = len(migrations)
        version = await self.user_version()
        if version > target:
            raise StorageError(
                f"Database {self.path} has schema version {version}, newer than this "
                f"qwenmem understands ({target}); upgrade qwenmem"
            )
        while version < target:
            async def step(conn: aiosqlite.Connection) -> int:
                # Re-read under the write lock: another process may have migrated
                # while we waited for it.
                current = await self.user_version()
                if current < target:
                    for statement in split_statements(migrations[current]):
                        await conn.execute(statement)
                    await conn.execute(f"PRAGMA user_version = {current + 1}")
                    log.info("[STORAGE] migrated %s to schema version %d", self.path, current + 1)
                    return current + 1
                return current

            version = await self.write(step)

    async def close(self) -> None:
        await self.conn.close()

    def _corrupt(self, exc: sqlite3.DatabaseError) -> StorageError:
        return damaged(self.path, exc)

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        try:
            async with self.conn.execute(sql, tuple(params)) as cursor:
                return list(await cursor.fetchall())
        except sqlite3.DatabaseError as exc:
            if is_corrupt(exc):
                raise self._corrupt(exc) from exc
            raise

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        try:
            async with self.conn.execute(sql, tuple(params)) as cursor:
                return await cursor.fetchone()
        except sqlite3.DatabaseError as exc:
            if is_corrupt(exc):
                raise self._corrupt(exc) from exc
            raise

    async def write(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        """Run `fn` in one write transaction and commit; retry while locked.

        `fn` may be run again after a rollback, so it must not have side effects
        outside the database. Other errors roll back and propagate unchanged.
        """
        return await self._locked_write(lambda: self._transaction(fn))

    async def write_now(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``write`` for a transaction of plain SQL: BEGIN, ``fn`` (on the connection
        itself) and COMMIT run on the connection's thread in one hop. Each statement
        awaited is a hop between threads, and a write of a dozen statements spent most
        of its time hopping (a bulk import, a line at a time).

        Once queued it runs whole: cancelling the caller stops its wait, not the
        transaction (which commits or rolls back as one, never half of it). What
        follows a write in memory (its index) follows the store's generation."""
        # aiosqlite's own queue (untyped): the one way onto the connection's thread.
        run: Callable[..., Awaitable[T]] = self.conn._execute
        return await self._locked_write(lambda: run(_immediate, self.conn, fn))

    async def on_thread(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` on the connection itself, on its thread, in one hop: several reads
        (or a connection's private temp tables) without a hop per statement."""
        run: Callable[..., Awaitable[T]] = self.conn._execute
        return await run(_on_thread, self.conn, fn)

    async def _locked_write(self, attempt_once: Callable[[], Awaitable[T]]) -> T:
        """One writer at a time; retried while another process holds the lock."""
        async with self._write_lock:
            attempt = 0
            while True:
                try:
                    return await attempt_once()
                except sqlite3.DatabaseError as exc:
                    if is_corrupt(exc):
                        raise self._corrupt(exc) from exc
                    if is_disk_full(exc):
                        raise disk_full(self.path, exc) from exc
                    if not _is_locked(exc):
                        raise
                    attempt += 1
                    await self._wait_out_lock(attempt, exc)

    async def _wait_out_lock(self, attempt: int, exc: sqlite3.DatabaseError) -> None:
        """After try `attempt` found the database locked: wait with backoff before the
        next, or raise once the retries are spent."""
        if attempt > self._retries:
            raise StorageError(
                f"Database {self.path} stayed locked by another process: {exc}"
            ) from exc
        delay = self._backoff * 2 ** (attempt - 1)
        log.warning("[STORAGE] %s locked, retry %d in %.2fs", self.path, attempt, delay)
        if self.on_retry is not None:
            self.on_retry(attempt, delay)
        await asyncio.sleep(delay)

    async def _transaction(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        try:
            # Inside the try: a task cancelled while awaiting BEGIN still has the BEGIN
            # run by aiosqlite's thread, and only the ROLLBACK below releases that lock.
            await self.conn.execute("BEGIN IMMEDIATE")
            result = await fn(self.conn)
            await self.conn.execute("COMMIT")
        except BaseException:
            # Also on cancellation: aiosqlite runs queued statements in order, so the
            # rollback lands after whatever `fn` had already sent.
            try:
                await self.conn.execute("ROLLBACK")
            except sqlite3.OperationalError:
                pass  # COMMIT went through, or SQLite already rolled back
            raise
        return result


def _on_thread(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    return fn(conn._conn)  # the sqlite3 connection: only ever used on this thread


def _immediate(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``Database.write_now``'s transaction, on the connection's own thread."""
    raw = conn._conn  # the sqlite3 connection: only ever used on this thread
    raw.execute("BEGIN IMMEDIATE")
    try:
        result = fn(raw)
        raw.execute("COMMIT")
    except BaseException:
        try:
            raw.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass  # COMMIT went through, or SQLite already rolled back
        raise
    return result
