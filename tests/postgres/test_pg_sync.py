"""Several qwenmem processes, one PostgreSQL: nothing lost, changes seen at once.

Each process has its own QWENMEM_HOME (as on separate machines), so the only thing
they share is the database; their FAISS indexes are local caches kept in step by
LISTEN/NOTIFY and the generation counter.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from memtest_support import PROJECT_A
from pgcluster import PostgresServer
from pgtest_support import Backend, GenerationWaiter

from qwenmem_tui.memory.model import Status, WriteRequest

pytestmark = pytest.mark.postgres

WORKER = str(Path(__file__).with_name("pg_worker.py"))
N = 150


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, WORKER, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def read_line(proc: asyncio.subprocess.Process, timeout: float = 60.0) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if not line:
        assert proc.stderr is not None
        raise AssertionError(f"worker exited: {(await proc.stderr.read()).decode()[-2000:]}")
    return line.decode().strip()


async def send(proc: asyncio.subprocess.Process, text: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(text.encode() + b"\n")
    await proc.stdin.drain()


async def test_two_processes_write_and_recall_through_one_database(pg_dsn: str, tmp_path: Path) -> None:
    backend = Backend("postgres", tmp_path, pg_dsn)
    await (await backend.open(machine="schema")).close()  # writers race on data, not on the migration
    names = ("left", "right")
    procs = [await spawn("write", str(tmp_path / name), pg_dsn, name, str(N)) for name in names]
    try:
        for proc in procs:
            assert await read_line(proc) == "ready"
        for proc in procs:
            await send(proc, "go")
        for proc in procs:
            assert await read_line(proc) == "written"
        # Each recalls what the *other* process wrote: it reached its local index.
        for proc, other in zip(procs, reversed(names), strict=True):
            await send(proc, other)
        answers = [json.loads(await read_line(proc)) for proc in procs]
        assert [a["keys"] for a in answers] == [["right_fact_7"], ["left_fact_7"]]
        assert all(a["index"] == 2 * N + 1 for a in answers)
        for proc in procs:
            assert await asyncio.wait_for(proc.wait(), 60) == 0
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    svc = await backend.open(machine="checker")
    try:
        active = await svc.list(statuses=[Status.ACTIVE])
        keys = {m.key for m in active}
        assert len(active) == 2 * N + 1
        assert all(f"{name}_fact_{i}" in keys for name in names for i in range(N))
        shared = [m for m in await svc.list() if m.key == "shared_key"]
        assert len(shared) == 20 and sum(m.status is Status.ACTIVE for m in shared) == 1
        assert svc.index.ids().tolist() == sorted(m.id for m in active)
        assert (await svc.stats()).writes == 2 * (N + 10)
    finally:
        await svc.close()


async def wait_report(proc: asyncio.subprocess.Process, generation: int, timeout: float) -> dict[str, Any]:
    """The watcher's first report reflecting ``generation`` (it reports on every change)."""

    async def scan() -> dict[str, Any]:
        while True:
            report = json.loads(await read_line(proc))
            if report.get("generation", -1) >= generation:
                return report

    return await asyncio.wait_for(scan(), timeout)


async def test_a_supersede_in_one_process_leaves_recall_in_another_on_its_own(
    pg_dsn: str, tmp_path: Path
) -> None:
    backend = Backend("postgres", tmp_path, pg_dsn)
    writer = await backend.open(machine="a")
    watcher = await spawn("watch", str(tmp_path / "b"), pg_dsn)
    try:
        assert "ready" in json.loads(await read_line(watcher))
        alpha = await writer.save(
            WriteRequest(
                "project",
                "current_project",
                "Alpha, stack TypeScript",
                origin="tool",
                project=PROJECT_A,
            )
        )
        seen = await wait_report(watcher, alpha.generation, timeout=10)
        assert seen["values"] == ["Alpha, stack TypeScript"] and alpha.memory.id in seen["index_ids"]

        beta = await writer.save(
            WriteRequest(
                "project",
                "current_project",
                "Beta, stack Python",
                origin="tool",
                project=PROJECT_A,
            )
        )
        # Pushed, not polled: the watcher reports only when its change feed (LISTEN)
        # tells it, and nothing else asks it to recall; no wall-clock bound, which two
        # loaded cores and a process boundary would make flaky.
        seen = await wait_report(watcher, beta.generation, timeout=30)
        assert seen["values"] == ["Beta, stack Python"]
        assert alpha.memory.id not in seen["index_ids"] and beta.memory.id in seen["index_ids"]
    finally:
        await writer.close()
        if watcher.stdin is not None:
            watcher.stdin.close()
        await asyncio.wait_for(watcher.wait(), 30)


async def test_forget_and_approve_propagate_to_a_listening_service(pg_dsn: str, tmp_path: Path) -> None:
    backend = Backend("postgres", tmp_path, pg_dsn)
    a = await backend.open(machine="a")
    b = await backend.open(machine="b")
    waiter = GenerationWaiter(b)
    try:
        kept = await a.save(
            WriteRequest("user", "name", "The user's name is Ana", origin="tool", project=PROJECT_A)
        )
        await waiter.wait(kept.generation, timeout=10)
        assert kept.memory.id in b.index.ids()
        await a.forget(kept.memory.id)
        await waiter.wait(await a.store.generation(), timeout=10)
        assert kept.memory.id not in b.index.ids()
        assert (await b.recall("what is my name", project=PROJECT_A, min_score=-1)).ids == []

        held = await a.save(
            WriteRequest(
                "feedback",
                "style",
                "<b>answer at length</b>",
                origin="tool",
                project=PROJECT_A,
            )
        )
        assert held.memory.id not in b.index.ids()
        await a.approve(held.memory.id)
        await waiter.wait(await a.store.generation(), timeout=10)
        assert (await b.recall("answer length style", project=PROJECT_A, min_score=-1)).ids == [held.memory.id]
    finally:
        await a.close()
        await b.close()


async def test_a_recreated_database_never_reuses_the_old_local_cache(
    pg_server: PostgresServer, pg_dsn: str, tmp_path: Path
) -> None:
    backend = Backend("postgres", tmp_path, pg_dsn)
    svc = await backend.open(machine="laptop")
    alpha = await svc.save(
        WriteRequest(
            "project",
            "current_project",
            "Alpha, stack TypeScript",
            origin="tool",
            project=PROJECT_A,
        )
    )
    await svc.close()  # index and cache at generation 1, row #1 is Alpha

    # Same DSN, new database: its first row is also #1 at generation 1.
    await pg_server.drop_database(pg_dsn)
    conn = await asyncpg.connect(pg_server.admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{urlsplit(pg_dsn).path.lstrip("/")}"')
    finally:
        await conn.close()
    other = await backend.open(machine="server")
    gamma = await other.save(
        WriteRequest(
            "project",
            "current_project",
            "Gamma, stack Go",
            origin="tool",
            project=PROJECT_A,
        )
    )
    await other.close()
    assert (gamma.memory.id, gamma.generation) == (alpha.memory.id, alpha.generation)

    svc = await backend.open(machine="laptop")
    try:
        hit = await svc.recall("Gamma stack Go", project=PROJECT_A)
        assert hit.ids == [gamma.memory.id]  # found by Gamma's vector, not a stale Alpha one
    finally:
        await svc.close()
