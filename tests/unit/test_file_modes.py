"""Issue #17, files: QWENMEM_HOME and everything qwenmem creates in it are owner-only
(0700 directories, 0600 files) under the common umask 022; a loose home is tightened
with a one-line notice.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwenmem_tui import cli, debuglog
from qwenmem_tui.paths import Paths, tighten_home
from qwenmem_tui.storage.database import Database


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def modes(home: Path) -> dict[str, str]:
    """Every entry under `home` (the home itself as "."), symlinks left out."""
    found = {".": oct(stat.S_IMODE(home.stat().st_mode))}
    for path in sorted(home.rglob("*")):
        if not path.is_symlink():
            found[path.relative_to(home).as_posix()] = oct(stat.S_IMODE(path.stat().st_mode))
    return found


def assert_private(home: Path, *, skip: tuple[str, ...] = ("config.toml",)) -> dict[str, str]:
    found = modes(home)
    loose = {
        name: mode
        for name, mode in found.items()
        if name not in skip
        and mode != ("0o700" if (home / name).is_dir() else "0o600")
    }
    assert not loose, loose
    return found


def with_hash_embedder(home: Path) -> None:
    config = home / "config.toml"
    config.write_text(config.read_text() + '[memory]\nembedding = "hash"\n')


async def test_database_and_its_wal_and_shm_are_0600(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    db = await Database.open(paths.db_file)
    try:
        await db.write(lambda conn: conn.execute("CREATE TABLE t (x)"))
        found = assert_private(paths.home)
    finally:
        await db.close()
    assert {"qwenmem.db", "qwenmem.db-wal", "qwenmem.db-shm", "index", "debug", "run"} <= set(found)


async def test_an_old_loose_database_is_tightened_when_opened(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    db = await Database.open(paths.db_file)
    await db.write(lambda conn: conn.execute("CREATE TABLE t (x)"))
    for name in ("qwenmem.db", "qwenmem.db-wal", "qwenmem.db-shm"):
        (paths.home / name).chmod(0o644)
    again = await Database.open(paths.db_file)
    try:
        assert_private(paths.home)
    finally:
        await again.close()
        await db.close()


def test_memories_index_and_debug_log_through_the_cli(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`qwenmem memory import` in process: database, FAISS index, debug log, all 0600."""
    with_hash_embedder(home)
    monkeypatch.chdir(project)
    lines = project / "memories.jsonl"
    lines.write_text(json.dumps({"category": "user", "key": "editor", "value": "uses vim"}) + "\n")
    debuglog.configure(Paths(home), "cli")
    assert cli.run(["memory", "import", "--trust", str(lines)]) == 0
    found = assert_private(home)
    assert any(name.startswith("index/") for name in found), found
    assert "debug/cli.txt" in found and "qwenmem.db" in found
    assert "made it private" not in capsys.readouterr().err  # nothing was loose


def test_a_loose_home_is_tightened_with_one_notice(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with_hash_embedder(home)
    monkeypatch.chdir(project)
    (home / "index").mkdir()
    (home / "index" / "old.faiss").write_bytes(b"x")
    (home / "qwenmem.db-wal").write_bytes(b"")
    (home / "notes").symlink_to("/etc/hostname")  # never followed
    home.chmod(0o755)
    (home / "config.toml").chmod(0o644)  # the user's file: warned about, not changed
    assert cli.run(["sessions"]) == 0
    err = capsys.readouterr().err.splitlines()
    notices = [line for line in err if "made it private" in line]
    assert notices == [
        f"qwenmem: {home} was readable by other users; made it private "
        "(4 entries now 700/600, owner only)"
    ], err
    assert_private(home)
    assert stat.S_IMODE((home / "config.toml").stat().st_mode) == 0o644
    assert stat.S_IMODE(Path("/etc/hostname").stat().st_mode) & 0o044  # untouched
    assert cli.run(["sessions"]) == 0
    assert "made it private" not in capsys.readouterr().err  # once


def test_loose_files_in_a_private_home_are_fixed_quietly(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    (paths.index_dir / "old.faiss").write_bytes(b"x")
    assert tighten_home(paths) is None
    assert_private(paths.home)


def test_tighten_home_ignores_a_missing_home(tmp_path: Path) -> None:
    assert tighten_home(Paths(tmp_path / "nowhere")) is None
    assert not (tmp_path / "nowhere").exists()


def test_the_real_command_under_umask_022(home: Path, project: Path) -> None:
    """The console script's entry as a user runs it under umask 022: a memory import
    (database, FAISS index, debug log) leaves nothing readable by others."""
    with_hash_embedder(home)
    lines = project / "memories.jsonl"
    lines.write_text(json.dumps({"category": "user", "key": "shell", "value": "uses zsh"}) + "\n")
    as_user = "import os; os.umask(0o022); from qwenmem_tui.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", as_user, "memory", "import", "--trust", str(lines)],
        cwd=project, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = assert_private(home)
    assert "qwenmem.db" in found and any(name.startswith("index/") for name in found)
