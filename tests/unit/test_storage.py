"""Storage: real SQLite files in tmp dirs, migrations, locking, crash safety."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest

from qwenmem_tui.storage import (
    MIGRATIONS,
    Database,
    Item,
    SessionNotFoundError,
    SessionStore,
    StorageError,
    make_title,
)
from qwenmem_tui.storage.database import split_statements


class Clock:
    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "qwenmem.db")
    yield database
    await database.close()


@pytest.fixture
def store(db: Database) -> SessionStore:
    return SessionStore(db, clock=Clock())


def user_item(session_id: str, text: str) -> Item:
    return Item(None, session_id, "user", text, {"role": "user", "content": text})


# -- opening and migrations ----------------------------------------------------------


async def test_open_sets_wal_foreign_keys_and_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "qwenmem.db"
    db = await Database.open(path)
    try:
        assert path.exists()
        assert (await db.fetchone("PRAGMA journal_mode"))[0] == "wal"
        assert (await db.fetchone("PRAGMA foreign_keys"))[0] == 1
        assert (await db.fetchone("PRAGMA busy_timeout"))[0] == 5000
        assert await db.user_version() == len(MIGRATIONS)
        tables = {r[0] for r in await db.fetchall("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"sessions", "items"} <= tables
    finally:
        await db.close()


async def test_reopen_keeps_data_and_does_not_migrate_again(tmp_path: Path) -> None:
    path = tmp_path / "qwenmem.db"
    db = await Database.open(path)
    info = await SessionStore(db).create_session("/p", "hello")
    await db.close()
    db = await Database.open(path)
    try:
        assert await db.user_version() == len(MIGRATIONS)
        assert await SessionStore(db).get_session(info.id) == info
    finally:
        await db.close()


async def test_appended_migration_runs_on_an_existing_database(tmp_path: Path) -> None:
    path = tmp_path / "qwenmem.db"
    await (await Database.open(path)).close()
    extra = "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('a;b');"
    db = await Database.open(path, migrations=[*MIGRATIONS, extra])
    try:
        assert await db.user_version() == len(MIGRATIONS) + 1
        assert (await db.fetchone("SELECT body FROM notes"))[0] == "a;b"
    finally:
        await db.close()


async def test_failing_migration_rolls_back_entirely(tmp_path: Path) -> None:
    path = tmp_path / "qwenmem.db"
    await (await Database.open(path)).close()
    broken = "CREATE TABLE half (id INTEGER); INSERT INTO missing_table VALUES (1);"
    with pytest.raises(StorageError, match=str(path)):
        await Database.open(path, migrations=[*MIGRATIONS, broken])
    db = await Database.open(path)
    try:
        assert await db.user_version() == len(MIGRATIONS)
        assert await db.fetchone("SELECT name FROM sqlite_master WHERE name = 'half'") is None
    finally:
        await db.close()


def test_split_statements_respects_strings_comments_and_triggers() -> None:
    script = """
        CREATE TABLE t (a TEXT); -- a comment; with a semicolon
        INSERT INTO t VALUES ('x;y');
        CREATE TRIGGER tr AFTER INSERT ON t BEGIN
            UPDATE t SET a = 'z;' WHERE a = 'never';
        END;
    """
    statements = split_statements(script)
    assert len(statements) == 3
    assert statements[1].endswith("VALUES ('x;y');")
    assert statements[2].startswith("CREATE TRIGGER") and statements[2].endswith("END;")


async def test_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "qwenmem.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    with pytest.raises(StorageError, match="newer"):
        await Database.open(path)


async def test_corrupt_file_is_a_clear_error_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "qwenmem.db"
    garbage = b"this is not a database, it is a shopping list\n" * 200
    path.write_bytes(garbage)
    with pytest.raises(StorageError) as info:
        await Database.open(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)
    assert path.read_bytes() == garbage
    assert not (tmp_path / "qwenmem.db-wal").exists()


async def test_damaged_pages_surface_as_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "qwenmem.db"
    db = await Database.open(path)
    store = SessionStore(db)
    info = await store.create_session("/p")
    for i in range(100):
        await store.add_item(user_item(info.id, f"{i} " + "x" * 500))
    await db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    await db.close()
    with path.open("r+b") as handle:  # trash pages in the middle, keep the header
        handle.seek(4096 * 5)
        handle.write(b"\xff" * 4096 * 4)
    damaged = path.read_bytes()
    db = await Database.open(path)
    try:
        with pytest.raises(StorageError, match="damaged") as error:
            await SessionStore(db).load_items(info.id)
        assert str(path) in str(error.value)
    finally:
        await db.close()
    assert path.read_bytes() == damaged


# -- writes under contention ---------------------------------------------------------


async def test_write_retries_while_another_process_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "qwenmem.db"
    retries: list[tuple[int, float]] = []
    blocker = sqlite3.connect(path, isolation_level=None)

    def on_retry(attempt: int, delay: float) -> None:
        retries.append((attempt, delay))
        blocker.execute("COMMIT")  # the other writer finishes

    db = await Database.open(path, on_retry=on_retry, busy_timeout_ms=1, backoff=0.001)
    try:
        store = SessionStore(db)
        blocker.execute("BEGIN IMMEDIATE")
        info = await store.create_session("/p", "locked")
        assert [attempt for attempt, _ in retries] == [1]
        assert retries[0][1] > 0
        assert await store.get_session(info.id) == info
    finally:
        blocker.close()
        await db.close()


async def test_opening_waits_out_another_process_that_holds_the_file(tmp_path: Path) -> None:
    # Switching to WAL needs the file to itself; SQLite may refuse it at once rather
    # than wait its busy timeout while another process opens or migrates the same home
    # (the proxy tests, which seed the home the proxy opens, failed so once).
    path = tmp_path / "qwenmem.db"
    sqlite3.connect(path).close()  # a new database, not in WAL yet
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    retries: list[int] = []

    def on_retry(attempt: int, delay: float) -> None:
        retries.append(attempt)
        blocker.execute("COMMIT")  # the other process is done

    try:
        db = await Database.open(path, on_retry=on_retry, busy_timeout_ms=1, backoff=0.001)
        try:
            assert retries == [1]
            assert (await db.fetchone("PRAGMA journal_mode"))[0] == "wal"
        finally:
            await db.close()
    finally:
        blocker.close()


async def test_write_gives_up_with_a_storage_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "qwenmem.db"
    db = await Database.open(path, busy_timeout_ms=1, retries=2, backoff=0.001)
    attempts: list[int] = []
    db.on_retry = lambda attempt, delay: attempts.append(attempt)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StorageError, match="locked") as info:
            await SessionStore(db).create_session("/p")
        assert str(path) in str(info.value)
        assert attempts == [1, 2]
    finally:
        blocker.close()
        await db.close()


async def test_write_rolls_back_when_fn_fails(db: Database) -> None:
    async def half(conn: aiosqlite.Connection) -> None:
        await conn.execute(
            "INSERT INTO sessions (id, project, created_at, updated_at) VALUES ('x', '/p', 1, 1)"
        )
        raise ValueError("boom")

    with pytest.raises(ValueError):
        await db.write(half)
    assert await db.fetchone("SELECT id FROM sessions WHERE id = 'x'") is None
    assert not db.conn.in_transaction


async def test_concurrent_writers_in_one_process_do_not_interleave(store: SessionStore) -> None:
    info = await store.create_session("/p")
    saved = await asyncio.gather(*(store.add_item(user_item(info.id, f"m{i}")) for i in range(40)))
    assert len({item.id for item in saved}) == 40
    assert len(await store.load_items(info.id)) == 40
    assert (await store.get_session(info.id)).message_count == 40


# -- sessions and items ----------------------------------------------------------------


def test_make_title_uses_the_first_non_blank_line_trimmed() -> None:
    assert make_title("\n\n   fix   the\tbug  \nsecond line") == "fix the bug"
    long = make_title("word " * 40)
    assert len(long) == 60 and long.endswith("…")
    assert make_title("   \n ") == ""


async def test_sessions_listed_newest_first_and_by_project(store: SessionStore) -> None:
    a = await store.create_session("/one")
    b = await store.create_session("/two")
    c = await store.create_session("/one")
    await store.add_item(user_item(a.id, "bump a"))  # a is now the most recent
    assert [s.id for s in await store.list_sessions()] == [a.id, c.id, b.id]
    assert [s.id for s in await store.list_sessions("/one")] == [a.id, c.id]
    assert await store.list_sessions("/none") == []


async def test_latest_session_skips_sessions_without_items(store: SessionStore) -> None:
    used = await store.create_session("/p")
    await store.add_item(user_item(used.id, "hi"))
    await store.create_session("/p")  # opened and quit without typing
    latest = await store.latest_session("/p")
    assert latest is not None and latest.id == used.id
    assert await store.latest_session("/other") is None


async def test_items_round_trip_and_the_first_user_line_titles_the_session(
    store: SessionStore,
) -> None:
    info = await store.create_session("/p")
    await store.add_item(Item(None, info.id, "info", "welcome"))
    first = await store.add_item(user_item(info.id, "  Explain\x1b[31m the repo  \nplease"))
    await store.add_item(user_item(info.id, "second question"))
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}],
    }
    await store.add_item(Item(None, info.id, "assistant", "", assistant, {"k": "ü"}))
    items = await store.load_items(info.id)
    assert [i.type for i in items] == ["info", "user", "user", "assistant"]
    assert items[1] == first and first.id is not None
    assert items[1].content == "  Explain\x1b[31m the repo  \nplease"  # stored verbatim
    assert items[3].message == assistant and items[3].meta == {"k": "ü"}
    assert items[0].message is None
    session = await store.get_session(info.id)
    assert session.title == "Explain\x1b[31m the repo"
    assert session.message_count == 3  # display items are not messages
    assert session.updated_at == items[-1].created_at


async def test_explicit_title_wins_and_set_title_renames(store: SessionStore) -> None:
    info = await store.create_session("/p", "My title")
    await store.add_item(user_item(info.id, "first message"))
    assert (await store.get_session(info.id)).title == "My title"
    await store.set_title(info.id, "Renamed")
    assert (await store.get_session(info.id)).title == "Renamed"


async def test_update_item_rewrites_meta_and_recounts(store: SessionStore) -> None:
    info = await store.create_session("/p")
    item = await store.add_item(user_item(info.id, "pin me"))
    item.meta["pinned"] = True
    await store.update_item(item)
    assert (await store.load_items(info.id))[0].meta == {"pinned": True}
    item.message = None
    await store.update_item(item)
    assert (await store.get_session(info.id)).message_count == 0
    await store.update_item(item)  # display-only still: nothing to count twice
    assert (await store.get_session(info.id)).message_count == 0
    item.message = {"role": "user", "content": "pin me"}
    await store.update_item(item)
    await store.update_item(item)  # a reply's checkpoint rewritten again and again
    assert (await store.get_session(info.id)).message_count == 1
    await store.delete_session(info.id)
    await store.update_item(item)  # gone: nothing to count


async def test_item_for_an_unknown_session_is_refused(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError, match="nope"):
        await store.add_item(user_item("nope", "hello"))
    assert await store.get_session("nope") is None


# -- crash safety ----------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from qwenmem_tui.storage import Database, Item, SessionStore

    async def main() -> None:
        db = await Database.open(Path(sys.argv[1]))
        store = SessionStore(db)
        info = await store.create_session("/p")
        print("session", info.id, flush=True)
        n = 0
        while True:  # runs until killed
            n += 1
            text = f"message {n} " + "x" * 2000
            item = await store.add_item(
                Item(None, info.id, "user", text, {"role": "user", "content": text})
            )
            print("committed", item.id, flush=True)

    asyncio.run(main())
    """
)


async def test_sigkilled_writer_loses_nothing_it_committed(tmp_path: Path) -> None:
    path = tmp_path / "qwenmem.db"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        session_id = (await asyncio.to_thread(child.stdout.readline)).split()[1]
        committed = []
        while len(committed) < 30:
            line = await asyncio.to_thread(child.stdout.readline)
            assert line, "writer died early"
            committed.append(int(line.split()[1]))
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    db = await Database.open(path)
    try:
        assert (await db.fetchone("PRAGMA integrity_check"))[0] == "ok"
        items = await SessionStore(db).load_items(session_id)
        ids = [item.id for item in items]
        assert set(committed) <= set(ids)
        assert all(item.content.startswith("message ") for item in items)
        assert (await SessionStore(db).get_session(session_id)).message_count == len(items)
    finally:
        await db.close()


async def test_delete_if_empty_only_deletes_a_session_with_no_items(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "qwenmem.db")
    try:
        store = SessionStore(db)
        empty = await store.create_session("p")
        used = await store.create_session("p")
        await store.add_item(Item(id=None, session_id=used.id, type="info", content="hello"))
        assert await store.delete_if_empty(empty.id) is True
        assert await store.delete_if_empty(used.id) is False
        assert [s.id for s in await store.list_sessions("p")] == [used.id]
    finally:
        await db.close()
