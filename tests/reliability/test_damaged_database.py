"""A database damaged past its first page: the daemon refuses to start in one line (never
"listening" and then failing requests), every memory command names the file and the way
back, and ``memory export --salvage`` recovers every row on a readable page, which
``memory import --keep-scope`` restores into the projects they came from.

Damage is real: pages of a real qwenmem.db overwritten on disk, found with SQLite's own
``dbstat`` table, so the rows lost are known independently of the salvage's method.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from qwenmem_tui import cli
from qwenmem_tui.config import Settings
from qwenmem_tui.memory.backup import export_lines
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths
from qwenmem_tui.memory.model import WriteRequest

from .test_corrupt_files import _corrupt_header, _corrupt_pages, assert_clear

MEMORIES = 24
OTHER_PROJECT = "/elsewhere/other-project"


async def _memories_database(settings: Settings, paths: Paths, project: Path) -> list[dict]:
    """A qwenmem.db holding MEMORIES memories of two projects, saved the real way;
    returns their export lines (as ``memory export`` writes them) in id order."""
    paths.ensure()
    service = await MemoryService.open(settings, paths)
    try:
        for n in range(MEMORIES):
            await service.save(
                WriteRequest(
                    "project",
                    f"service_{n:02d}",
                    f"Service {n:02d} listens on port {9000 + n}; team {n % 5} owns it",
                    origin="user",
                    project=str(project) if n % 3 else OTHER_PROJECT,
                )
            )
        lines = await export_lines(service)
    finally:
        await service.close()
    return sorted((json.loads(line) for line in lines), key=lambda row: row["id"])


def _damage_leaves(db: Path, which: list[int]) -> set[int]:
    """Overwrite the given leaf pages (by b-tree order) of the memories table; returns the
    ids of the rows they held, from each leaf's cell count in that order."""
    conn = sqlite3.connect(db)
    try:
        leaves = conn.execute(
            "SELECT pageno, ncell FROM dbstat WHERE name = 'memories' AND pagetype = 'leaf'"
            " ORDER BY path"
        ).fetchall()
        ids = [row[0] for row in conn.execute("SELECT id FROM memories ORDER BY id")]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    assert len(leaves) > max(which) + 1, leaves  # intact leaves on both sides
    lost: set[int] = set()
    start = 0
    data = bytearray(db.read_bytes())
    for position, (page, cells) in enumerate(leaves):
        if position in which:
            lost.update(ids[start : start + cells])
            data[(page - 1) * page_size : page * page_size] = b"\xa5" * page_size
        start += cells
    assert start == len(ids)
    db.write_bytes(bytes(data))
    return lost


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def test_salvage_recovers_every_row_on_a_readable_page_and_import_restores_them(
    settings: Settings, paths: Paths, project: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    rows = asyncio.run(_memories_database(settings, paths, project))
    assert len(rows) == MEMORIES
    lost = _damage_leaves(paths.db_file, [1, 4])
    assert 0 < len(lost) < MEMORIES // 2
    damaged = paths.db_file.read_bytes()
    monkeypatch.chdir(project)

    # The plain commands fail on the damaged page, in one line that shows the way back.
    for args in (["memory", "list", "--all"], ["memory", "export"]):
        assert cli.run(args) == 1, args
        err = _one_line(capsys.readouterr().err)
        assert_clear(err, paths.db_file)
        assert "--salvage" in err and "--trust --keep-scope" in err, err

    out = tmp_path / "salvaged.jsonl"
    assert cli.run(["memory", "export", "--salvage", str(out)]) == 0
    err = _one_line(capsys.readouterr().err)
    salvaged = [json.loads(line) for line in out.read_text().splitlines()]
    expected = [row for row in rows if row["id"] not in lost]
    assert salvaged == expected  # every readable row, exactly as an export writes it
    assert f"salvaged {len(expected)} memories to {out}" in err, err
    assert f"{len(lost)} ids on damaged pages" in err, err
    assert paths.db_file.read_bytes() == damaged  # read-only: the evidence is untouched

    # Start fresh as the message says, restore: each memory back in its own project.
    paths.db_file.rename(tmp_path / "damaged.db")
    for side in paths.home.glob("qwenmem.db-*"):
        side.unlink()
    assert cli.run(["memory", "import", "--trust", "--keep-scope", str(out)]) == 0
    capsys.readouterr()
    assert cli.run(["memory", "export"]) == 0
    restored = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((r["scope"], r["key"], r["value"]) for r in restored) == sorted(
        (r["scope"], r["key"], r["value"]) for r in expected
    )
    assert {r["scope"] for r in restored} == {str(project), OTHER_PROJECT}


@pytest.mark.parametrize("damage", [_corrupt_header, _corrupt_pages], ids=["header", "schema"])
def test_salvage_of_a_file_with_nothing_readable_says_so_and_writes_nothing(
    paths: Paths, project: Path, tmp_path: Path, damage,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    paths.ensure()
    asyncio.run(damage(paths.db_file))
    before = paths.db_file.read_bytes()
    monkeypatch.chdir(project)
    out = tmp_path / "salvaged.jsonl"
    assert cli.run(["memory", "export", "--salvage", str(out)]) == 1
    err = _one_line(capsys.readouterr().err)
    assert "nothing could be salvaged" in err and str(paths.db_file) in err, err
    assert not out.exists()
    assert paths.db_file.read_bytes() == before


def _serve(project: Path) -> subprocess.CompletedProcess[str]:
    """``qwenmem serve --port 0`` as a user runs it; a start that hangs fails the test."""
    return subprocess.run(
        [sys.executable, "-m", "qwenmem_tui", "serve", "--port", "0"],
        cwd=project, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("damage", ["header", "schema", "deep"])
def test_serve_on_a_damaged_database_exits_with_one_line_and_never_listens(
    settings: Settings, paths: Paths, project: Path, damage: str
) -> None:
    if damage == "deep":  # opens fine: only reading every page finds it
        asyncio.run(_memories_database(settings, paths, project))
        _damage_leaves(paths.db_file, [2])
    else:
        paths.ensure()
        asyncio.run({"header": _corrupt_header, "schema": _corrupt_pages}[damage](paths.db_file))
    before = paths.db_file.read_bytes()
    result = _serve(project)
    assert result.returncode == 1, result
    assert "listening" not in result.stdout, result
    err = _one_line(result.stderr)
    assert err.startswith("qwenmem serve: cannot start: "), err
    assert_clear(err, paths.db_file)
    assert "--keep-scope" in err, err
    assert paths.db_file.read_bytes() == before
