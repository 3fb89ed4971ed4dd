"""A team's writers and readers in one PostgreSQL (issue 40 item 2, concurrency): one
user's write never waits on another user's, and what recall reads on every change
of the team's store comes from an index, not from every row of the user."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import numpy as np
import pytest
from memtest_support import PROJECT_A
from pgtest_support import Backend

from qwenmem_tui.memory import write_plan
from qwenmem_tui.memory.model import Category, MemoryDraft, Origin, Status, WriteAction, WriteRequest
from qwenmem_tui.memory.postgres.store import PostgresMemoryStore, list_query, vector_ids_query
from qwenmem_tui.memory.store_index import MEAN_REFRESH_S, StoreIndex

pytestmark = pytest.mark.postgres


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresMemoryStore]:
    opened = await PostgresMemoryStore.open(pg_dsn, vector_search=False)
    yield opened
    await opened.close()


def draft(user: str, key: str, value: str) -> MemoryDraft:
    return MemoryDraft(Category.PROJECT, key, value, Origin.TOOL, PROJECT_A, user, reason="test")


async def write(store: PostgresMemoryStore, user: str, key: str, value: str) -> WriteAction:
    result = await store.write(
        draft(user, key, value), flags=[], expires_at=None,
        vector=np.ones(4, dtype=np.float32) / 2, embedding_model="m", now=1000.0,
    )  # fmt: skip
    return result.action


async def lock_waits(conn: asyncpg.Connection) -> int:
    """Backends of this database waiting on a lock now."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        )
    )


async def finishes_or_waits(task: asyncio.Task[object], conn: asyncpg.Connection) -> bool:
    """True when ``task`` finished, False as soon as a backend waits on a lock while
    it has not (the wait seen may be one the task left behind as it finished: a
    recall's counting, started as it returns)."""
    while not task.done():
        if await lock_waits(conn):
            return task.done()
        await asyncio.sleep(0.01)
    return True


async def test_a_write_waits_only_for_the_same_users_writes(store: PostgresMemoryStore, pg_dsn: str) -> None:
    """While ana's write transaction is open, bo's write commits at once; ana's next
    write waits for hers and then commits. The generation row used to be locked for a
    write's whole transaction, so every user's writes queued on every other's."""
    holding, release = asyncio.Event(), asyncio.Event()

    async def open_write(steps: write_plan.WriteSteps) -> None:
        await steps.lock("ana")
        holding.set()
        await release.wait()

    held = asyncio.create_task(store._in_transaction(open_write, "held write"))
    observer = await asyncpg.connect(pg_dsn)
    try:
        await holding.wait()
        others = asyncio.create_task(write(store, "bo", "stack", "Rust"))
        assert await finishes_or_waits(others, observer), "bo's write waited for ana's"
        assert others.result() is WriteAction.CREATED

        hers = asyncio.create_task(write(store, "ana", "stack", "Python"))
        assert not await finishes_or_waits(hers, observer), "ana's two writes did not queue"
        release.set()
        await held
        assert await hers is WriteAction.CREATED
    finally:
        release.set()
        await observer.close()
    assert [m.value for m in await store.list(user="ana")] == ["Python"]
    assert await store.metrics() == {"writes": 2.0}  # counted in each write's last statement


async def test_recall_reads_a_users_linked_memories_from_their_index(
    store: PostgresMemoryStore, pg_dsn: str
) -> None:
    """Recall asks for the user's memories linked to an older one whenever the
    generation moves; they are read from migration 9's index, not by filtering every
    active row of the user (a heap page each at a million rows)."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "INSERT INTO memories (username, scope, category, key, value, origin, status,"
            " created_at, updated_at, content_hash)"
            " SELECT 'u' || (i % 20), 'global', 'user', 'k' || i, 'v' || i, 'user', 'active', 0, 0, 'h' || i"
            " FROM generate_series(1, 4000) AS i"
        )
        await conn.execute(
            "UPDATE memories SET restates = id - 20 WHERE username = 'u1' AND id % 400 = 1 AND id > 20"
        )
        await conn.execute("ANALYZE memories")
        sql, params = list_query(user="u1", statuses=[Status.ACTIVE], linked=True)
        plan = json.loads(await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql, *params))
    finally:
        await conn.close()
    assert "memories_linked" in json.dumps(plan), plan
    linked = await store.list(user="u1", statuses=[Status.ACTIVE], linked=True)
    assert len(linked) == 9 and all(m.restates == m.id - 20 for m in linked)


async def test_a_local_cache_diffs_a_users_ids_from_an_index(store: PostgresMemoryStore, pg_dsn: str) -> None:
    """A client keeping the local cache reads its user's vector ids at every change
    anyone in the team makes; they come from migration 8's index (less the few held
    for review), not from a heap page per row of the user (10,000 at a million rows)."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "INSERT INTO memories (username, scope, category, key, value, origin, status,"
            " created_at, updated_at, content_hash, embedding_model, embedding)"
            " SELECT 'u' || (i % 20), 'global', 'user', 'k' || i, 'v' || i, 'user',"
            " CASE WHEN i % 140 = 1 THEN 'quarantined' WHEN i % 140 = 21 THEN 'superseded' ELSE 'active' END,"
            " 0, 0, 'h' || i, CASE WHEN i % 100 = 41 THEN 'other' ELSE 'm' END,"
            " CASE WHEN i % 100 = 61 THEN NULL ELSE '\\x0000803f'::bytea END"
            " FROM generate_series(1, 4000) AS i"
        )
        await conn.execute("VACUUM ANALYZE memories")
        want = await conn.fetchval(
            "SELECT array_agg(id ORDER BY id) FROM memories WHERE username = 'u1' AND status = 'active'"
            " AND embedding_model = 'm' AND embedding IS NOT NULL"
        )
        sql, params = vector_ids_query("m", "u1")
        plan = json.dumps(json.loads(await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql, *params)))
    finally:
        await conn.close()
    assert "memories_own_models" in plan, plan
    ids = await store.vector_ids("m", user="u1")
    assert ids.tolist() == want and len(want) > 50  # none held, superseded, unembedded or of another model


async def test_other_users_writes_do_not_make_a_client_read_its_mean_again(
    pgvector_dsn: str, tmp_path: Path
) -> None:
    """The debiasing mean of ana's 300 vectors is read again after ana's own writes
    (1% of them) or after ``MEAN_REFRESH_S``, not whenever the team's generation
    moves: with twenty people writing it moved several times a second, and each
    re-read aggregated all of ana's vectors in the middle of a recall."""
    store = await PostgresMemoryStore.open(pgvector_dsn, vector_search=True)
    vectors = np.random.default_rng(3).standard_normal((300, 4)).astype(np.float32)
    conn = await asyncpg.connect(pgvector_dsn)
    try:
        await conn.execute(
            "INSERT INTO memories (username, scope, category, key, value, origin, status,"
            " created_at, updated_at, content_hash, embedding_model, embedding)"
            " SELECT 'ana', 'global', 'user', 'k' || i, 'v' || i, 'user', 'active', 0, 0, 'h' || i, 'm', e"
            " FROM unnest($1::bytea[]) WITH ORDINALITY AS v(e, i)",
            [v.astype("<f4").tobytes() for v in vectors],
        )
        now = [0.0]
        index = StoreIndex(store, tmp_path, "m", user="ana", monotonic=lambda: now[0])
        index.generation = await store.generation()
        first = await index.mean(4)
        assert first is not None and np.allclose(first, vectors.mean(axis=0), atol=1e-5)

        for n in range(5):  # bo's writes move the generation past 1% of ana's vectors
            assert await write(store, "bo", f"stack{n}", f"Rust {n}") is WriteAction.CREATED
        index.generation = await store.generation()
        assert await index.mean(4) is first

        mine = np.ones(4, dtype=np.float32) / 2
        for n in range(3):  # ana's own, through this index: read again
            result = await store.write(
                draft("ana", f"editor{n}", f"vim {n}"), flags=[], expires_at=None,
                vector=mine, embedding_model="m", now=1000.0,
            )  # fmt: skip
            await index.add(np.array([result.memory.id]), mine.reshape(1, -1))
        index.generation = await store.generation()
        second = await index.mean(4)
        expected = np.vstack([vectors, np.tile(mine, (3, 1))]).mean(axis=0)
        assert second is not first and second is not None and np.allclose(second, expected, atol=1e-5)

        await write(store, "bo", "stack", "Go")
        index.generation = await store.generation()
        assert await index.mean(4) is second
        now[0] += MEAN_REFRESH_S  # and anyone's change, once the mean is a minute old
        assert await index.mean(4) is not second
    finally:
        await conn.close()
        await store.close()


async def test_a_recall_answers_before_it_is_counted(pg_dsn: str, tmp_path: Path) -> None:
    """The recall counters are a write to rows every client updates: a recall returns
    its memories without waiting for them (here: held by another transaction), and
    this process's own reads of the counters wait until its recalls are counted."""
    svc = await Backend("postgres", tmp_path, pg_dsn).open()
    observer = await asyncpg.connect(pg_dsn)
    try:
        saved = await svc.save(
            WriteRequest("project", "test_command", "Run tests with make test", origin="user", project=PROJECT_A)
        )
        await observer.execute("INSERT INTO memory_metrics (name, value) VALUES ('recalls', 0)")
        locker = observer.transaction()
        await locker.start()
        await observer.execute("SELECT value FROM memory_metrics WHERE name = 'recalls' FOR UPDATE")
        counters = await asyncpg.connect(pg_dsn)
        try:
            recall = asyncio.create_task(svc.recall("how do I run the tests", project=PROJECT_A))
            assert await finishes_or_waits(recall, counters), "the recall waited for its counters"
        finally:
            await locker.rollback()
            await counters.close()
        assert recall.result().ids == [saved.memory.id]
        assert (await svc.stats()).recalls == 1
        row = await svc.get(saved.memory.id)
        assert row is not None and row.recall_count == 1
    finally:
        await observer.close()
        await svc.close()
