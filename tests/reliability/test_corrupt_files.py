"""Damaged files in the home: a truncated FAISS index is rebuilt; a corrupt database is
named in one line, left byte-for-byte untouched, with a hint to restore from a memory
export; a config that cannot be read is one line and exit 2.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwenmem_tui import cli
from qwenmem_tui.config import Settings
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import Item, SessionStore
from qwenmem_tui.tui.app import create_app
from qwenmem_tui.memory.model import WriteRequest

from .conftest import SIZE


async def test_truncated_faiss_index_is_rebuilt(settings: Settings, paths: Paths, project: Path) -> None:
    paths.ensure()
    scope = project_id(project)
    service = await MemoryService.open(settings, paths)
    try:
        for n in range(20):
            await service.save(WriteRequest("project", f"fact_{n}", f"The service number {n} runs on port {8000 + n}",
                               origin="user", project=scope))
    finally:
        await service.close()
    [index_file] = paths.index_dir.glob("*.faiss")
    for keep in (index_file.stat().st_size // 2, 7, 0):
        data = index_file.read_bytes()
        index_file.write_bytes(data[:keep])
        service = await MemoryService.open(settings, paths)
        try:
            assert len(service.index) == 20
            found = await service.recall("service number 7 port", project=scope, min_score=-1, record=False)
            assert "fact_7" in [m.key for m in found.memories]
        finally:
            await service.close()  # saves the rebuilt index
        assert index_file.stat().st_size > 1000


async def _qwenmem_database(db: Path) -> None:
    """A real qwenmem.db with a few sessions of chat, closed cleanly."""
    database = await Database.open(db)
    try:
        store = SessionStore(database)
        for n in range(30):
            info = await store.create_session("/project", f"session {n}")
            for m in range(5):
                text = f"message {m} of session {n} " * 20
                await store.add_item(Item(None, info.id, "user", text, {"role": "user", "content": text}))
    finally:
        await database.close()


async def _corrupt_header(db: Path) -> None:
    db.write_bytes(b"this is not an SQLite database at all " * 200)


async def _corrupt_pages(db: Path) -> None:
    """Page 1 (the schema) survives; every page after it is overwritten."""
    await _qwenmem_database(db)
    data = db.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    db.write_bytes(data[:page] + b"\xa5" * (len(data) - page))


DAMAGES = pytest.mark.parametrize("damage", [_corrupt_header, _corrupt_pages], ids=["header", "pages"])


def assert_clear(message: str, db: Path) -> None:
    assert "\n" not in message.strip() and "Traceback" not in message, message
    assert str(db) in message, message
    assert "qwenmem memory export" in message and "memory import" in message, message


@DAMAGES
def test_corrupt_database_is_named_untouched_and_restorable(
    home: Path, paths: Paths, project: Path, damage, monkeypatch: pytest.MonkeyPatch, capsys  # type: ignore[no-untyped-def]
) -> None:
    paths.ensure()
    asyncio.run(damage(paths.db_file))
    before = paths.db_file.read_bytes()
    monkeypatch.chdir(project)
    for args in (["sessions"], ["memory", "list"], ["memory", "export"]):
        assert cli.run(args) == 1, args
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert_clear(err, paths.db_file)
        assert paths.db_file.read_bytes() == before, args


@DAMAGES
async def test_tui_refuses_a_corrupt_database_in_one_line(
    settings: Settings, paths: Paths, project: Path, damage, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    paths.ensure()
    await damage(paths.db_file)
    before = paths.db_file.read_bytes()
    app = create_app(settings, paths, cwd=project, resume=True)
    app.project = "/project"  # resume one of the stored sessions
    messages: list[str] = []
    real_exit = app.exit

    def exit_(*args, **kwargs):  # type: ignore[no-untyped-def]
        messages.append(str(kwargs.get("message", "")))
        return real_exit(*args, **kwargs)

    monkeypatch.setattr(app, "exit", exit_)
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()  # the open runs behind the drawn screen
        await pilot.pause()
    assert app.return_code == 1
    assert len(messages) == 1
    assert_clear(messages[0], paths.db_file)
    assert paths.db_file.read_bytes() == before


@pytest.mark.parametrize(
    "make_unreadable",
    [
        lambda p: (p.unlink(), p.mkdir()),
        lambda p: p.write_bytes(b'[llm]\nmodel = "\xff\xfe broken"\n'),
        lambda p: p.write_bytes(b"\x00\x01\x02 binary garbage \x89PNG"),
    ],
    ids=["directory", "invalid utf-8", "binary"],
)
def test_unreadable_config_is_one_line_exit_2(
    home: Path, project: Path, make_unreadable, monkeypatch: pytest.MonkeyPatch, capsys  # type: ignore[no-untyped-def]
) -> None:
    config = home / "config.toml"
    make_unreadable(config)
    monkeypatch.chdir(project)
    for args in ([], ["sessions"], ["memory", "list"], ["serve", "--port", "0"]):
        assert cli.run(args) == 2, args
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and str(config) in err and "Traceback" not in err


@pytest.fixture
def unprivileged_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`home`, or as root a copy owned by nobody in a directory nobody may enter (the
    test's tmp_path sits in root's private pytest directory)."""
    if os.geteuid() != 0:
        yield home
        return
    nobody = pwd.getpwnam("nobody")
    parent = Path(tempfile.mkdtemp(prefix="qwenmem-nobody-"))
    try:
        parent.chmod(0o711)
        copy = parent / "home"
        shutil.copytree(home, copy)
        for path in (copy, *copy.rglob("*")):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        monkeypatch.setenv("QWENMEM_HOME", str(copy))
        yield copy
    finally:
        shutil.rmtree(parent)


def test_config_without_read_permission_is_one_line_exit_2(
    unprivileged_home: Path, monkeypatch: pytest.MonkeyPatch, capsys  # type: ignore[no-untyped-def]
) -> None:
    # Root reads any file whatever its mode, so as root (CI) the command runs in a
    # child that dropped to `nobody`, on a home that user owns.
    home = unprivileged_home
    config = home / "config.toml"
    config.chmod(0)
    monkeypatch.chdir(home)
    code, err = _run_as_nobody(["sessions"]) if os.geteuid() == 0 else (cli.run(["sessions"]), "")
    err += capsys.readouterr().err
    assert code == 2, err
    assert "permission denied" in err and str(config) in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _run_as_nobody(argv: list[str]) -> tuple[int, str]:
    """`cli.run(argv)` in a forked child running as nobody: its exit code and stderr."""
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            sys.stderr = os.fdopen(write, "w")
            code = cli.run(argv)
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        err = pipe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), err
