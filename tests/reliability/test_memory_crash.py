"""kill -9 of a process writing memories: rows, the FTS index and vectors still agree.

The child saves memories in a tight loop (new keys and supersedes of old ones) and
prints each id after its commit; the parent kills it after a known number of lines,
so the kill lands mid-write of the next one. After every kill: the database is
intact, the full-text index is exactly what indexing the active rows afresh gives,
every active row has its vector and no other row has one, and a fresh service's
FAISS index holds exactly the active rows — also after its file is deleted.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from memtest_support import PROJECT_A, fts_documents, fts_matches_rows, make_settings

from qwenmem_tui.memory.model import Status
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths

WRITER = """
import asyncio, sys
from pathlib import Path
from qwenmem_tui.config import Settings
from qwenmem_tui.features import registry  # noqa: F401 -- registers the features' settings
from qwenmem_tui.memory.model import WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths

async def main(home, start, project):
    settings = Settings.model_validate({"general": {"user": "ana"}, "memory": {"embedding": "hash"}})
    svc = await MemoryService.open(settings, Paths(Path(home)))
    i = int(start)
    while True:
        result = await svc.save(WriteRequest("project", f"key_{i % 7}", f"value {i} of the crash loop", origin="tool", project=project))
        print("SAVED", result.memory.id, flush=True)
        i += 1

asyncio.run(main(*sys.argv[1:4]))
"""
KILLS = 3


def _saved_lines(proc: subprocess.Popen[bytes], count: int, timeout: float = 60.0) -> list[int]:
    """Read (bounded, on the pipe's fd) until ``count`` SAVED lines arrived."""
    assert proc.stdout is not None
    fd, buffer, ids = proc.stdout.fileno(), b"", []
    end = time.monotonic() + timeout
    while len(ids) < count:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        data = os.read(fd, 65536) if ready else b""
        if not data:
            raise AssertionError(f"writer stopped after {ids}: {proc.stderr.read() if proc.stderr else b''!r}")
        *lines, buffer = (buffer + data).split(b"\n")
        ids += [int(line.split()[1]) for line in lines if line.startswith(b"SAVED")]
    return ids


def _vectors_follow_status(db_file: Path) -> bool:
    with sqlite3.connect(db_file) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        wrong = conn.execute(
            "SELECT count(*) FROM memories WHERE (status = 'active') != (embedding IS NOT NULL)"
        ).fetchone()[0]
    return wrong == 0


@pytest.mark.slow
async def test_kill_9_mid_write_leaves_rows_fts_and_vectors_in_agreement(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    await (await MemoryService.open(make_settings(), paths)).close()  # schema first
    saved: list[int] = []
    for round_ in range(KILLS):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(paths.home), str(round_ * 1000), PROJECT_A],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            saved += await asyncio.to_thread(_saved_lines, proc, 15 + 7 * round_)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                assert stream is not None
                stream.close()
        assert proc.returncode == -signal.SIGKILL
        assert _vectors_follow_status(paths.db_file)
        assert fts_matches_rows(paths.db_file)

        svc = await MemoryService.open(make_settings(), paths)
        try:
            active = sorted(m.id for m in await svc.list(statuses=[Status.ACTIVE]))
            assert len(active) == 7  # one row per key, whatever the kill interrupted
            assert fts_documents(paths.db_file) == set(active)
            assert svc.index.ids().tolist() == active
            last = await svc.get(saved[-1])
            assert last is not None and last.status is Status.ACTIVE
            hit = await svc.recall(last.value, project=PROJECT_A, k=1, record=False)
            assert hit.ids == [last.id] and hit.lexical_scores[0] is not None
        finally:
            await svc.close()

    # A deleted index is rebuilt from the store, the FTS index never needed one.
    for index_file in paths.index_dir.glob("*.faiss"):
        index_file.unlink()
    svc = await MemoryService.open(make_settings(), paths)
    try:
        active = sorted(m.id for m in await svc.list(statuses=[Status.ACTIVE]))
        assert svc.index.ids().tolist() == active == sorted(fts_documents(paths.db_file))
    finally:
        await svc.close()
