"""Vectors searched in the database (issue 40 item 2): pgvector when the server has it,
the local FAISS cache when it does not, the same filters and the same ranking either way."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import pytest
from memtest_support import PROJECT_A, PROJECT_B, Clock
from pgtest_support import Backend, GenerationWaiter

from qwenmem_tui.memory.holder_space import HolderSpace
from qwenmem_tui.memory.index import VectorIndex
from qwenmem_tui.memory.model import DAY, GLOBAL_SCOPE, WriteRequest, content_hash, embed_text
from qwenmem_tui.memory.postgres.steps import bump_generation
from qwenmem_tui.memory.recall import RecallResult
from qwenmem_tui.memory.store_index import StoreIndex

pytestmark = pytest.mark.postgres

SUBJECTS = ("the billing service", "Carol", "the staging host", "my sister", "the nightly job", "Diego")
ATTRIBUTES = ("home city", "editor", "deploy target", "manager", "database", "timezone", "test runner")
VALUES = ("Lisbon", "neovim", "eu-west-2", "Erin", "PostgreSQL 16", "UTC+9", "pytest -n 2", "Hamburg")
QUERIES = (
    "where does my sister live?",
    "which editor does Carol use?",
    "what database does the billing service use?",
    "deploy target of the staging host",
    "who manages Diego",
    "nightly job timezone",
)


async def _fill(svc, clock: Clock, user_tag: str = "") -> None:  # type: ignore[no-untyped-def]
    """Forty-odd distinct facts over two projects and the global scope."""
    n = 0
    for s, subject in enumerate(SUBJECTS):
        for a, attribute in enumerate(ATTRIBUTES):
            if (s + a) % 3 == 0:
                continue
            value = VALUES[(s * 3 + a) % len(VALUES)]
            category = ("user", "project", "reference")[n % 3]
            project = PROJECT_A if n % 2 else PROJECT_B
            key = f"{subject}_{attribute}".replace(" ", "_").lower()
            await svc.save(
                WriteRequest(
                    category,
                    key,
                    f"{subject}'s {attribute} is {value}{user_tag}",
                    origin="user",
                    project=project,
                )
            )
            clock.advance(1)
            n += 1


def as_role(dsn: str, role: str) -> str:
    parts = urlsplit(dsn)
    netloc = parts.netloc.split("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{netloc}"))


async def test_pgvector_searches_in_the_database_with_the_local_indexs_top_k(
    pgvector_dsn: str, tmp_path: Path
) -> None:
    """With the extension, recall's dense channel is a query (no local copy, no FAISS
    file) and ranks as the local index does: the same top k, dense and fused."""
    backend = Backend("postgres", tmp_path, pgvector_dsn)
    clock = Clock()
    server = await backend.open(machine="a", clock=clock, postgres_vector_search=True)
    local = await backend.open(machine="b", clock=clock, postgres_vector_search=False)
    try:
        assert isinstance(server.index, StoreIndex) and isinstance(local.index, VectorIndex)
        await _fill(server, clock)
        conn = await asyncpg.connect(pgvector_dsn)
        try:  # the trigger kept the pgvector column in step with every written vector
            active, with_vec = await conn.fetchrow(
                "SELECT count(*), count(embedding_vec) FROM memories WHERE status = 'active'"
            )
            assert active >= 20 and with_vec == active
        finally:
            await conn.close()
        scopes = (GLOBAL_SCOPE, PROJECT_A)
        # Directions removed from the ranking (as recall removes the language subspace,
        # memory/language_space.py): the stored vectors stay plain, the query moves.
        dim = len((await server.embedder.embed_queries([QUERIES[0]]))[0])
        remove = np.linalg.qr(np.random.default_rng(5).standard_normal((dim, 3)))[0].astype(np.float32)
        for query, removed in [(q, r) for q in QUERIES for r in (None, remove)]:
            vector = (await server.embedder.embed_queries([query]))[0]
            await local.recall(query, project=PROJECT_A, record=False)  # brings the cache in step
            allowed = (await local.recaller.allowed(PROJECT_A)).ids
            want = await local.index.search(vector, 8, allowed, debias=True, remove=removed)
            got = await server.index.search_where(
                vector, 8, scopes=scopes, now=clock(), exclude=(), debias=True, remove=removed
            )
            assert [h.id for h in got] == [h.id for h in want], query
            assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-5)
            fused_server = await server.recall(query, project=PROJECT_A, k=5, min_score=-1, record=False)
            fused_local = await local.recall(query, project=PROJECT_A, k=5, min_score=-1, record=False)
            assert fused_server.ids == fused_local.ids and fused_server.ids, query
        assert not list((tmp_path / "a").rglob("*.faiss"))  # never a local copy
    finally:
        await local.close()
        await server.close()


async def _insert_many(dsn: str, svc, now: float, count: int) -> None:  # type: ignore[no-untyped-def]
    """``count`` distinct facts of ana's written straight into the table (saved one
    by one, the writer would take many of them for restatements of one fact): more
    rows in reach than the dense channel's depth, so the lexical channel finds some
    the dense one does not."""
    facts = [
        (("user", "project", "reference")[n % 3], (GLOBAL_SCOPE, PROJECT_A, PROJECT_A, PROJECT_B)[n % 4],
         f"{SUBJECTS[n % 6]}_{ATTRIBUTES[n % 7]}_{n}".replace(" ", "_"),
         f"{SUBJECTS[n % 6]}'s {ATTRIBUTES[n % 7]} number {n} is {VALUES[n % 8]} {VALUES[n * 7 % 8]}")
        for n in range(count)
    ]  # fmt: skip
    vectors = await svc.embedder.embed_passages([embed_text(c, k, v) for c, _, k, v in facts])
    conn = await asyncpg.connect(dsn)
    try:
        await conn.executemany(
            "INSERT INTO memories (username, scope, category, key, value, origin, status, flags,"
            " created_at, updated_at, content_hash, embedding_model, embedding, stated_at)"
            " VALUES ('ana', $1, $2, $3, $4, 'user', 'active', '{}', $5, $5, $6, $7, $8, $5)",
            [
                (scope, category, key, value, now - n, content_hash(value), svc.embedder.id,
                 np.asarray(vector, dtype="<f4").tobytes())
                for n, ((category, scope, key, value), vector) in enumerate(zip(facts, vectors, strict=True))
            ],  # fmt: skip
        )
        await conn.execute("UPDATE memory_meta SET value = value + 1 WHERE name = 'generation'")
    finally:
        await conn.close()


def _seen(result: RecallResult) -> tuple[object, ...]:
    """All a recall says: its ranking, each channel's score and the rows themselves."""
    return (
        result.ids, result.scores, result.vector_scores, result.lexical_scores,
        result.memories, result.block, result.small_talk,
    )


async def test_one_query_recall_ranks_and_reads_as_the_local_cache(
    pgvector_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pgvector recall is one round trip (both channels and their rows in one
    statement) and answers exactly what a client with the local cache answers over
    the same store: the same memories, ranks, fused, dense and lexical scores, also
    with rows excluded, a threshold, a query with no words, and when the exact
    rerank picks dense rows the statement did not send (read after it); with a
    holder space too, whose reordering reads the vectors the statement sent."""
    from qwenmem_tui.memory import store_index

    backend = Backend("postgres", tmp_path, pgvector_dsn)
    clock = Clock()
    server = await backend.open(machine="a", clock=clock, postgres_vector_search=True)
    local = await backend.open(machine="b", clock=clock, postgres_vector_search=False)
    try:
        await _fill(server, clock)
        await _insert_many(pgvector_dsn, server, clock(), 240)
        queries = (*QUERIES, "Hamburg", "what runs nightly in eu-west-2?", "¿?")
        await server.recall(QUERIES[0], project=PROJECT_A, record=False)  # mean, links, indexes
        calls: list[str] = []
        run = server.store._run

        async def counted(fn, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(fn.__qualname__)  # PostgresMemoryStore.<the method>.<locals>...
            return await run(fn, **kwargs)

        server.store._run = counted  # type: ignore[method-assign]
        # Directions the ranking leaves out (recall's language subspace, none for the
        # hash embedder): the store's pick of rows leaves them out too.
        dim = len((await server.embedder.embed_queries([QUERIES[0]]))[0])
        remove = np.linalg.qr(np.random.default_rng(5).standard_normal((dim, 3)))[0].astype(np.float32)
        # A holder space (holder_space.py, none shipped for the hash embedder): its
        # reordering reads the vectors the statement sent, no statement of its own.
        holders = HolderSpace(np.zeros(dim, dtype=np.float32), np.linalg.qr(np.random.default_rng(6).standard_normal((dim, 8)))[0].astype(np.float32))
        # A question bank (language_space.question_bank, none for the hash embedder): the
        # channels fused by scores read the candidates' vectors the statement sent.
        bank = np.random.default_rng(7).standard_normal((50, dim)).astype(np.float32)
        compared = read_after = 0
        for rows_with_search, basis, space, questions in (
            (1, None, None, None), (0, None, None, None), (1, remove, None, None), (1, None, holders, None),
            (0, remove, holders, None), (1, remove, holders, bank), (0, None, None, bank),
        ):
            monkeypatch.setattr(store_index, "ROWS_WITH_SEARCH", rows_with_search)
            server.recaller._language = local.recaller._language = (basis,)
            server.recaller._holders = local.recaller._holders = (space, None)
            server.recaller._bank = local.recaller._bank = (questions,)
            for query in queries:
                for k, min_score in ((3, -1.0), (8, -1.0), (5, None)):
                    first = await local.recall(query, project=PROJECT_A, k=k, min_score=min_score, record=False)
                    exclude = first.ids[:2]
                    for skip in ((), exclude):
                        want = await local.recall(
                            query, project=PROJECT_A, k=k, min_score=min_score, exclude=skip, record=False
                        )
                        calls.clear()
                        got = await server.recall(
                            query, project=PROJECT_A, k=k, min_score=min_score, exclude=skip, record=False
                        )
                        assert _seen(got) == _seen(want), (query, k, skip, basis is None)
                        # one statement; the rows the rerank picked beyond it in one more
                        assert len(calls) == 1 or (not rows_with_search and len(calls) == 2), calls
                        compared += bool(got.ids)
                        read_after += len(calls) - 1
                        # every candidate, lexical-only finds with their cosines too
                        scopes, limit, language = (GLOBAL_SCOPE, PROJECT_A), 4 * k, basis is not None
                        assert await server.recaller.candidates(
                            query, scopes=scopes, exclude=skip, limit=limit, language=language
                        ) == await local.recaller.candidates(
                            query, scopes=scopes, exclude=skip, limit=limit, language=language
                        )
        assert compared >= 3 * len(queries) * 3 and read_after > len(queries)
        server.recaller._language = local.recaller._language = (None,)
        server.recaller._holders = local.recaller._holders = (None, None)
        monkeypatch.setattr(store_index, "ROWS_WITH_SEARCH", 1)
        await _links_in_the_statement(pgvector_dsn, backend, clock, server, local, calls)
    finally:
        await local.close()
        await server.close()


async def _links_in_the_statement(dsn, backend, clock, server, local, calls) -> None:  # type: ignore[no-untyped-def]
    """Another user's write moves the generation: the links recall re-reads then
    (memories that may restate an older one) come inside the one statement, and a
    found memory's newer versions the channels missed join it as they do locally."""
    conn = await asyncpg.connect(dsn)
    try:  # carol's editor restated twice, in words no channel finds for the question
        older = await conn.fetchval("SELECT id FROM memories WHERE key = 'carol_editor' AND status = 'active'")
        newer = await conn.fetch(
            "SELECT id FROM memories WHERE username = 'ana' AND status = 'active' AND key LIKE 'diego_%'"
            " AND scope = $1 ORDER BY id DESC LIMIT 2", PROJECT_A,
        )  # fmt: skip
        async with conn.transaction():
            await conn.execute("UPDATE memories SET restates = $1 WHERE id = $2", older, newer[0]["id"])
            await conn.execute("UPDATE memories SET restates = $1 WHERE id = $2", newer[0]["id"], newer[1]["id"])
            generation = await bump_generation(conn)
    finally:
        await conn.close()
    for svc in (server, local):
        await GenerationWaiter(svc).wait(generation, timeout=30)
    query = "which editor does Carol use?"
    calls.clear()
    got = await server.recall(query, project=PROJECT_A, k=8, min_score=-1, record=False)
    want = await local.recall(query, project=PROJECT_A, k=8, min_score=-1, record=False)
    assert _seen(got) == _seen(want) and older in got.ids
    assert {newer[0]["id"], newer[1]["id"]} <= set(got.ids)
    # no read of the links: one read per step down the chain of newer versions
    assert [c.split(".")[1] for c in calls] == ["search_channels", "fetch", "fetch"], calls
    bob = await backend.open(user="bob", machine="c", clock=clock, postgres_vector_search=True)
    try:
        saved = await bob.save(WriteRequest("user", "desk", "my desk is by the window", origin="user", project=PROJECT_A))
        await GenerationWaiter(server).wait(saved.generation, timeout=30)
        calls.clear()
        got = await server.recall(QUERIES[2], project=PROJECT_A, k=5, record=False)
        assert [c.split(".")[1] for c in calls] == ["search_channels"] and got.ids
        assert server.recaller._links[0] == saved.generation
        # bob writes again while the statement runs: its links stand for this recall
        # (as of its snapshot), and the next recall reads them again
        search = server.store.search_channels

        async def meanwhile(request):  # type: ignore[no-untyped-def]
            found = await search(request)
            again = await bob.save(WriteRequest("user", "lamp", "my lamp is green", origin="user", project=PROJECT_A))
            await GenerationWaiter(server).wait(again.generation, timeout=30)
            return found

        server.store.search_channels = meanwhile  # type: ignore[method-assign]
        calls.clear()
        got = await server.recall(QUERIES[3], project=PROJECT_A, k=5, record=False)
        assert [c.split(".")[1] for c in calls] == ["search_channels"] and got.ids
        assert server.recaller._links[0] == saved.generation < server.index.generation
    finally:
        await bob.close()


async def test_filters_hold_in_the_database_search(pgvector_dsn: str, tmp_path: Path) -> None:
    """Another user's rows, another project's, expired and superseded ones never come
    back from the database's search, however close their vectors."""
    backend = Backend("postgres", tmp_path, pgvector_dsn)
    clock = Clock()
    ana = await backend.open(user="ana", machine="a", clock=clock, postgres_vector_search=True)
    bob = await backend.open(user="bob", machine="b", clock=clock, postgres_vector_search=True)
    try:
        await _fill(bob, clock, user_tag=" (bob)")
        await _fill(ana, clock)
        short = await ana.save(
            WriteRequest(
                "user",
                "temp_code",
                "the door code is 4321",
                origin="user",
                project=PROJECT_A,
                ttl_days=1,
            )
        )
        old = await ana.save(
            WriteRequest(
                "project",
                "deploy_day",
                "we deploy on Fridays",
                origin="user",
                project=PROJECT_A,
            )
        )
        await ana.save(
            WriteRequest(
                "project",
                "deploy_day",
                "we deploy on Tuesdays",
                origin="user",
                project=PROJECT_A,
            )
        )
        clock.advance(2 * DAY)  # the door code has expired (not yet swept)
        bob_ids = {m.id for m in await bob.list()}
        elsewhere = {m.id for m in await ana.list() if m.scope == PROJECT_B}
        for query in (*QUERIES, "door code", "when do we deploy"):
            vector = (await ana.embedder.embed_queries([query]))[0]
            assert isinstance(ana.index, StoreIndex)
            hits = await ana.index.search_where(
                vector, 40, scopes=(GLOBAL_SCOPE, PROJECT_A), now=clock(), exclude=(), debias=True
            )
            found = {h.id for h in hits}
            assert found and not found & bob_ids and not found & elsewhere, query
            assert short.memory.id not in found and old.memory.id not in found
            result = await ana.recall(query, project=PROJECT_A, k=10, min_score=-1, record=False)
            assert all(m.user == "ana" and m.scope in (GLOBAL_SCOPE, PROJECT_A) for m in result.memories)
    finally:
        await bob.close()
        await ana.close()


async def test_without_the_extension_recall_uses_the_local_cache(pgvector_dsn: str, tmp_path: Path) -> None:
    """A role that may not install pgvector (a managed server, say) keeps the local
    FAISS cache: same recall, nothing added to the schema."""
    admin = await asyncpg.connect(pgvector_dsn)
    database = urlsplit(pgvector_dsn).path.lstrip("/")
    role = f"plain_{database[-12:]}"
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
        await admin.execute(f'ALTER DATABASE "{database}" OWNER TO {role}')
        await admin.execute(f"ALTER SCHEMA public OWNER TO {role}")
    finally:
        await admin.close()
    backend = Backend("postgres", tmp_path, as_role(pgvector_dsn, role))
    clock = Clock()
    svc = await backend.open(clock=clock, postgres_vector_search=True)
    try:
        assert not svc.store.searches_vectors()
        assert isinstance(svc.index, VectorIndex)
        await _fill(svc, clock)
        result = await svc.recall("which editor does Carol use?", project=PROJECT_A, k=3, record=False)
        assert "Carol's editor" in result.block
        conn = await asyncpg.connect(pgvector_dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'vector'") == 0
        finally:
            await conn.close()
    finally:
        await svc.close()
        admin = await asyncpg.connect(pgvector_dsn)
        try:
            await admin.execute(f'ALTER DATABASE "{database}" OWNER TO postgres')
        finally:
            await admin.close()


async def test_a_teams_writes_cost_a_pgvector_client_no_query(pgvector_dsn: str, tmp_path: Path) -> None:
    """Another user's commits reach a pgvector client through the change feed, whose
    payload is the new generation: nothing local to bring in step, so no query per
    write of a busy team (a local cache reads its user's ids at each one)."""
    backend = Backend("postgres", tmp_path, pgvector_dsn)
    clock = Clock()
    ana = await backend.open(user="ana", machine="a", clock=clock, postgres_vector_search=True)
    bob = await backend.open(user="bob", machine="b", clock=clock, postgres_vector_search=True)
    try:
        reads: list[int] = []
        generation = bob.store.generation

        async def counted() -> int:
            reads.append(1)
            return await generation()

        bob.store.generation = counted  # type: ignore[method-assign]
        waiter = GenerationWaiter(bob)
        for n in range(5):
            result = await ana.save(
                WriteRequest("project", f"step_{n}", f"the build step {n} runs lint", origin="user", project=PROJECT_A)
            )
        await waiter.wait(result.generation, timeout=30)
        assert bob.index.generation == result.generation and reads == []
    finally:
        await bob.close()
        await ana.close()


async def test_a_large_existing_store_keeps_the_local_cache_at_start(
    pgvector_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Converting every stored vector would hold this start (and every other starting
    client) for minutes: past a size the set-up is left to an administrator, recall
    stays on the local cache, and nothing is added to the schema."""
    from qwenmem_tui.memory.postgres import vector_search

    backend = Backend("postgres", tmp_path, pgvector_dsn)
    clock = Clock()
    before = await backend.open(machine="a", clock=clock, postgres_vector_search=False)
    try:
        await _fill(before, clock)
    finally:
        await before.close()
    monkeypatch.setattr(vector_search, "AUTO_SETUP_VECTORS", 10)
    svc = await backend.open(machine="b", clock=clock, postgres_vector_search=True)
    try:
        assert not svc.store.searches_vectors() and isinstance(svc.index, VectorIndex)
        result = await svc.recall("which editor does Carol use?", project=PROJECT_A, k=3, record=False)
        assert "Carol's editor" in result.block
        conn = await asyncpg.connect(pgvector_dsn)
        try:
            assert not await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'memories'::regclass"
                " AND attname = 'embedding_vec')"
            )
        finally:
            await conn.close()
    finally:
        await svc.close()


async def test_the_query_vector_is_not_converted_per_row_in_a_generic_plan(
    pgvector_dsn: str, tmp_path: Path
) -> None:
    """After five runs PostgreSQL may plan a prepared statement once for any
    parameters: the query vector must then arrive as a vector, or the dense scan
    converts it from an array again for every row it compares (the statement cost
    2.3 times its CPU at a million rows, one user's 5,000 of them in reach)."""
    from qwenmem_tui.memory.postgres import vector_search

    svc = await Backend("postgres", tmp_path, pgvector_dsn).open(postgres_vector_search=True)
    await svc.close()  # the schema and the vector column
    conn = await asyncpg.connect(pgvector_dsn)
    try:
        for name, sql, vectors in (
            ("nearest", vector_search.nearest_sql(8), [0]),
            ("channels", vector_search.channels_sql(8, centred=True, lexical=True, links=True), [0, 10]),
        ):
            await conn.execute(f"PREPARE {name} AS {sql}")
            types = await conn.fetchval(
                "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = $1", name
            )
            # the query (and the mean it is centred on) as vectors, not arrays to convert
            assert [types[i] for i in vectors] == ["vector"] * len(vectors), types
    finally:
        await conn.close()
