"""A full disk: one line naming the file and what was kept, no traceback (nor logging's
"--- Logging error ---"), no temp files left, nothing committed lost.

The database runs out of room the way SQLite reports it on a full disk (SQLITE_FULL,
"database or disk is full"): ``PRAGMA max_page_count`` caps the real file a few pages
above its size once it is migrated. Files qwenmem writes itself (the FAISS index, the
debug log) get the OS's ENOSPC at their write. A real tmpfs does the same by hand:
docs/reliability.md.
"""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from qwenmem_tui import debuglog
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.database import Database

LINES = 60
ROOM_PAGES = 12
"""Pages left after migration: room for some of LINES memories, not all."""


def _enospc(path: Path) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", str(path))


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every database opened from now on has ROOM_PAGES pages left; every index file
    write finds no space after its first bytes (a 0-byte or partial temp file)."""
    migrate = Database._migrate

    async def migrate_then_fill(self: Database, migrations: Any) -> None:
        await migrate(self, migrations)
        pages = (await self.fetchone("PRAGMA page_count"))[0]
        await self.conn.execute(f"PRAGMA max_page_count = {pages + ROOM_PAGES}")

    monkeypatch.setattr(Database, "_migrate", migrate_then_fill)
    write_bytes = Path.write_bytes

    def write_index(self: Path, data: bytes) -> int:  # type: ignore[override]
        if self.name.endswith(".tmp") and self.parent.name == "index":
            write_bytes(self, data[:100])
            raise _enospc(self)
        return write_bytes(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_index)


def _import_file(tmp_path: Path) -> Path:
    path = tmp_path / "memories.jsonl"
    path.write_text(
        "".join(
            json.dumps({"category": "project", "key": f"service_{n:03d}",
                        "value": f"Service {n:03d} listens on port {9000 + n}; " + "notes " * 60})
            + "\n"
            for n in range(LINES)
        )
    )
    return path


def test_import_on_a_full_disk_says_how_far_it_got_and_keeps_it(
    cli_run: Any, home: Path, paths: Paths, project: Path, tmp_path: Path,
    full_disk: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = _import_file(tmp_path)
    result = cli_run("memory", "import", str(source), home=home, cwd=project)
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "Logging error" not in result.stderr
    message = lines[0]
    assert f"Cannot write {paths.db_file}: the disk is full" in message, message
    stopped_at = int(message.split("stopped at line ")[1].split()[0])
    assert 1 < stopped_at < LINES, message
    kept = stopped_at - 1
    assert f"kept what the lines before it did (imported {kept} (created {kept}," in message, message
    assert not list(paths.index_dir.glob("*.tmp"))

    monkeypatch.undo()  # space again: what was kept is there, the rest imports
    listed = cli_run("memory", "list", "--json", home=home, cwd=project)
    assert sorted(m["key"] for m in json.loads(listed.stdout)) == [
        f"service_{n:03d}" for n in range(kept)
    ]
    again = cli_run("memory", "import", str(source), home=home, cwd=project)
    assert again.returncode == 0, again
    assert f"created {LINES - kept}, superseded 0, refreshed {kept}," in again.stdout
    found = cli_run("memory", "search", "service 059 port", "--json", home=home, cwd=project)
    assert json.loads(found.stdout)[0]["key"] == "service_059"  # the index caught up


def test_serve_on_a_full_disk_exits_with_one_line(
    cli_run: Any, home: Path, paths: Paths, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure = Database._configure

    async def no_room(self: Database, busy_timeout_ms: int) -> None:
        await configure(self, busy_timeout_ms)
        await self.conn.execute("PRAGMA max_page_count = 1")  # the schema won't fit

    monkeypatch.setattr(Database, "_configure", no_room)
    result = cli_run("serve", "--port", "0", home=home, cwd=project)
    assert result.returncode == 1, result
    assert "listening" not in result.stdout
    assert result.stderr.strip() == (
        f"qwenmem serve: cannot start: Cannot write {paths.db_file}: the disk is full; "
        "free some space and retry"
    )


def test_a_debug_log_on_a_full_disk_stays_quiet_and_is_not_offered(
    paths: Paths, capfd: pytest.CaptureFixture[str]
) -> None:
    path = debuglog.configure(paths, "cli")
    assert path is not None and debuglog.current_path() == path
    handler = logging.getLogger().handlers[-1]
    assert isinstance(handler, logging.FileHandler)

    class Full:
        def write(self, text: str) -> int:
            raise _enospc(path)

        def flush(self) -> None:
            raise _enospc(path)

        def close(self) -> None:
            pass

    handler.stream = Full()  # type: ignore[assignment]
    logging.getLogger("qwenmem.cli").error("[CLI] unexpected error", exc_info=ValueError("x"))
    assert "Logging error" not in capfd.readouterr().err
    assert debuglog.current_path() is None  # "details in FILE" would point at nothing


async def test_a_chat_turn_on_a_full_disk_names_the_file_not_an_internal_error(
    make_session: Any, session_store: Any,
) -> None:
    from chat_support import collect, outcome_of

    session = await make_session()
    db: Database = session_store.db
    pages = (await db.fetchone("PRAGMA page_count"))[0]
    await db.conn.execute(f"PRAGMA max_page_count = {pages}")  # not one page more
    outcome = outcome_of(await collect(session, "hello " * 2000))
    assert outcome.status == "error"
    assert outcome.error == (
        f"Cannot write {db.path}: the disk is full; free some space and retry"
    ), outcome.error
