"""The shared MemoryStore: PostgreSQL through asyncpg, for several processes or machines.

Same interface and the same semantics as ``sqlite_store.py`` — one active row per
(user, scope, key) enforced by a partial unique index, supersede in one transaction,
an append-only audit table, TTL and hard filters in SQL — plus what only a server can
offer: every mutating transaction bumps the generation row and sends
``NOTIFY qwenmem_memory, '<generation>'`` on commit, so other processes bring their
local FAISS caches in step at once (``listener.py``) instead of at their next recall.

asyncpg, not psycopg 3: it is asyncio-native (no thread hop per query), speaks the
binary protocol (bytea vectors and bigint arrays arrive without text parsing), and
has LISTEN/NOTIFY built in (``Connection.add_listener``).

Serialisation: a write takes its user's lock, anything else that changes rows takes
every writer's (``steps.lock_user``, ``steps.lock_all``), as SQLite's ``BEGIN
IMMEDIATE`` does for a whole file. Reads never take them.

Connection loss: a transaction that fails because the server went away is retried
with exponential backoff on a fresh pooled connection (``connection.py``); the first retry and the final
failure are reported through ``on_notice`` so the user is told, and when the budget
is spent the caller gets ``MemoryStoreUnavailable`` — a write is never dropped
silently. A retried transaction that had in fact committed is harmless: the same
key and value again only refreshes the row.
"""
from __future__ import annotations

import builtins

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import asyncpg
import numpy as np

from qwenmem_tui.memory import write_plan
from qwenmem_tui.memory.model import (
    FLAG_FROM_FILE,
    AuditAction,
    AuditEntry,
    Memory,
    Status,
)
from qwenmem_tui.memory.postgres.cache import LocalCache
from qwenmem_tui.memory.postgres.connection import (
    MemoryStoreUnavailable,
    RetryPolicy,
    describe_dsn,
    one_line_reason,
    transient,
)
from qwenmem_tui.memory.postgres.listener import GenerationListener
from qwenmem_tui.memory.postgres import vector_search as pgvector
from qwenmem_tui.memory.postgres.schema import lexical_sql, migrate_schema
from qwenmem_tui.memory.postgres.steps import (
    ACTIVE,
    COLUMNS,
    PgSteps,
    add_metric_deltas,
    bump_generation,
    fetch_memory,
    lock_all,
    read_generation,
    row_to_memory,
)
from qwenmem_tui.memory.store import (
    AUDIT_SELECT,
    AllowedIds,
    ChannelQuery,
    RowQuery,
    StoreChannels,
    audit_from_row,
    no_vectors,
    status_counts,
    vector_blob,
)

log = logging.getLogger("qwenmem.memory")

T = TypeVar("T")
Notice = Callable[[str], None]
ChangeCallback = Callable[[int], Awaitable[None]]


class PostgresMemoryStore(write_plan.PlannedStore):
    """Use ``PostgresMemoryStore.open``; the pool is the store's, closed with it."""

    def __init__(
        self,
        dsn: str,
        pool: asyncpg.Pool,
        instance_id: str,
        *,
        retry: RetryPolicy,
        on_notice: Notice | None = None,
        cache: LocalCache | None = None,
        connect_timeout: float = 5.0,
        vector_search: bool = False,
    ) -> None:
        self.dsn = dsn
        self.where = describe_dsn(dsn)
        self.instance_id = instance_id
        self.retry = retry
        self.on_notice = on_notice
        self.cache = cache
        self.connect_timeout = connect_timeout
        self._pool = pool
        self._listener: GenerationListener | None = None
        # Backends our own pool has used: notifications from them are our own writes,
        # which the service already applied to the index (see ``watch``).
        self._own_pids: set[int] = set()
        self._vector_search = vector_search
        self._indexed_dims: set[int] = set()  # HNSW indexes known to exist

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        retry: RetryPolicy | None = None,
        on_notice: Notice | None = None,
        connect_timeout: float = 5.0,
        pool_size: int = 4,
        vector_search: bool = True,
    ) -> PostgresMemoryStore:
        """Connect, migrate, and return the store; ``MemoryStoreUnavailable`` (one line)
        when the server cannot be reached or refuses us. ``vector_search``: search
        vectors with pgvector when the server has it (``vector_search.py``)."""
        where = describe_dsn(dsn)
        try:
            pool = await asyncpg.create_pool(
                dsn,
                min_size=1,
                max_size=pool_size,
                timeout=connect_timeout,
                command_timeout=60,
                reset=_keep_session,
                init=pgvector.session_settings if vector_search else None,
            )
        except Exception as exc:  # asyncpg raises a zoo of types for "cannot connect"
            raise MemoryStoreUnavailable(
                f"memory database {where} is unreachable: {one_line_reason(exc)}"
            ) from exc
        try:
            async with pool.acquire() as conn:
                await migrate_schema(conn, where)
                instance_id = await conn.fetchval("SELECT id FROM memory_instance")
                searches = vector_search and await pgvector.prepare(conn, where)
            if searches:  # connections opened before the type existed lack its codec
                await pool.expire_connections()
        except BaseException as exc:
            await pool.close()
            if isinstance(exc, asyncpg.PostgresError | OSError):
                raise MemoryStoreUnavailable(f"memory database {where}: {one_line_reason(exc)}") from exc
            raise
        return cls(
            dsn,
            pool,
            instance_id,
            retry=retry or RetryPolicy(),
            on_notice=on_notice,
            connect_timeout=connect_timeout,
            vector_search=searches,
        )

    # plumbing ------------------------------------------------------------------------
    def _notice(self, text: str) -> None:
        log.warning("[MEMORY_PG] %s", text)
        if self.on_notice is not None:
            self.on_notice(text)

    async def _run(
        self,
        fn: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        what: str,
        write: bool,
        transaction: bool = True,
    ) -> T:
        """Run ``fn`` on a pooled connection (in a transaction when ``write``, unless it
        is one statement), retrying with backoff while the server is away. ``fn`` only
        touches the database, so a retry is safe."""
        attempts = self.retry.attempts if write else self.retry.read_attempts
        attempt = 0
        while True:
            try:
                async with self._pool.acquire(timeout=self.connect_timeout) as conn:
                    self._own_pids.add(conn.get_server_pid())
                    if not (write and transaction):
                        result = await fn(conn)
                    else:
                        async with conn.transaction():
                            result = await fn(conn)
                if attempt and write:
                    self._notice(f"memory: {self.where} is back; {what} saved")
                return result
            except Exception as exc:
                if not transient(exc):
                    raise
                attempt += 1
                if attempt >= attempts:
                    message = f"memory: {what} failed: {self.where} unreachable after {attempt} attempts ({one_line_reason(exc)})"
                    if write:
                        self._notice(message)
                    raise MemoryStoreUnavailable(message) from exc
                delay = self.retry.delay(attempt)
                if attempt == 1 and write:
                    self._notice(f"memory: lost {self.where} ({one_line_reason(exc)}); retrying {what}")
                log.info(
                    "[MEMORY_PG] %s: retry %d in %.2fs: %s", what, attempt, delay, one_line_reason(exc)
                )
                await asyncio.sleep(delay)

    async def _tx(
        self, fn: Callable[[asyncpg.Connection], Awaitable[T]], what: str = "memory write"
    ) -> T:
        return await self._run(fn, what=what, write=True)

    async def _read(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        return await self._run(fn, what="memory read", write=False)

    # writes ------------------------------------------------------------------------
    async def _in_transaction(
        self, plan: Callable[[write_plan.WriteSteps], Awaitable[T]], what: str
    ) -> T:
        async def body(conn: asyncpg.Connection) -> T:
            steps = PgSteps(conn)
            result = await plan(steps)
            await steps.flush()
            return result

        return await self._tx(body, what)

    async def record_recall(
        self, ids: Sequence[int], *, now: float, metrics: Mapping[str, float]
    ) -> None:
        names = sorted(metrics)

        async def body(conn: asyncpg.Connection) -> None:
            # One statement, so no BEGIN/COMMIT round trips: this runs on every chat turn.
            await conn.execute(
                "WITH touched AS (UPDATE memories SET last_recalled_at = $1,"
                " recall_count = recall_count + 1 WHERE id = ANY($2::bigint[]) RETURNING id)"
                " INSERT INTO memory_metrics (name, value) SELECT * FROM unnest($3::text[], $4::float8[])"
                " ON CONFLICT (name) DO UPDATE SET value = memory_metrics.value + excluded.value",
                now,
                [int(i) for i in ids],
                names,
                [float(metrics[n]) for n in names],
            )

        await self._run(body, what="recall bookkeeping", write=True, transaction=False)

    async def sweep_expired(self, *, now: float) -> list[int]:
        async def body(conn: asyncpg.Connection) -> list[int]:
            await lock_all(conn)
            rows = await conn.fetch(
                "UPDATE memories SET status = $1, updated_at = $2"
                " WHERE status = $3 AND expires_at IS NOT NULL AND expires_at <= $2 RETURNING id, value",
                Status.EXPIRED.value,
                now,
                ACTIVE,
            )
            if not rows:
                return []
            await conn.executemany(
                "INSERT INTO memory_audit (memory_id, action, origin, at, reason, old_value)"
                " VALUES ($1, $2, 'system', $3, 'ttl elapsed', $4)",
                [
                    (r["id"], AuditAction.EXPIRE.value, now, r["value"])
                    for r in sorted(rows, key=lambda r: r["id"])
                ],
            )
            await bump_generation(conn)
            return sorted(r["id"] for r in rows)

        return await self._tx(body, "expiry sweep")

    async def set_vectors(
        self, ids: Sequence[int], vectors: np.ndarray, embedding_model: str
    ) -> None:
        async def body(conn: asyncpg.Connection) -> None:
            await lock_all(conn)
            await conn.execute(
                "UPDATE memories AS m SET embedding = v.embedding, embedding_model = $3"
                " FROM unnest($1::bigint[], $2::bytea[]) AS v(id, embedding) WHERE m.id = v.id"
                " AND m.status IN ('active', 'quarantined')",
                [int(i) for i in ids],
                [vector_blob(v) for v in vectors],
                embedding_model,
            )
            await bump_generation(conn)

        await self._tx(body, "vector update")

    async def add_metrics(self, deltas: Mapping[str, float]) -> None:
        async def body(conn: asyncpg.Connection) -> None:
            await add_metric_deltas(conn, deltas)

        # One statement, so no BEGIN/COMMIT round trips: a write's trust counters
        # come after its transaction, on the way back to whoever saved it.
        await self._run(body, what="metrics update", write=True, transaction=False)

    # reads -------------------------------------------------------------------------
    async def get(self, memory_id: int) -> Memory | None:
        return await self._read(lambda conn: fetch_memory(conn, memory_id))

    async def fetch(self, ids: Sequence[int]) -> list[Memory]:
        if not ids:
            return []

        async def body(conn: asyncpg.Connection) -> list[Memory]:
            rows = await conn.fetch(
                f"SELECT {COLUMNS} FROM memories WHERE id = ANY($1::bigint[])",
                [int(i) for i in ids],
            )
            by_id = {m.id: m for m in map(row_to_memory, rows)}
            return [by_id[i] for i in ids if i in by_id]

        return await self._read(body)

    async def list(
        self,
        *,
        user: str | None = None,
        scopes: Collection[str] | None = None,
        statuses: Collection[Status] | None = None,
        key_prefix: str | None = None,
        linked: bool = False,
    ) -> builtins.list[Memory]:
        sql, params = list_query(
            user=user, scopes=scopes, statuses=statuses, key_prefix=key_prefix, linked=linked
        )

        async def body(conn: asyncpg.Connection) -> builtins.list[Memory]:
            return [row_to_memory(r) for r in await conn.fetch(sql, *params)]

        return await self._read(body)

    async def rows(self, query: RowQuery) -> builtins.list[Memory]:
        where, params = _row_filter(query)
        order = " ORDER BY created_at, id" if query.oldest_first else " ORDER BY id"
        if query.limit is not None:
            params.append(query.limit)
            order += f" LIMIT ${len(params)}"
        sql = f"SELECT {COLUMNS} FROM memories{where}{order}"

        async def body(conn: asyncpg.Connection) -> builtins.list[Memory]:
            return [row_to_memory(r) for r in await conn.fetch(sql, *params)]

        return await self._read(body)

    async def count(self, query: RowQuery) -> int:
        where, params = _row_filter(query)

        async def body(conn: asyncpg.Connection) -> int:
            return int(await conn.fetchval(f"SELECT count(*) FROM memories{where}", *params))

        return await self._read(body)

    async def allowed_ids(self, *, user: str, scopes: Collection[str], now: float) -> AllowedIds:
        # One statement, one snapshot: the generation and the ids it names agree.
        async def body(conn: asyncpg.Connection) -> asyncpg.Record:
            return await conn.fetchrow(
                "SELECT (SELECT value FROM memory_meta WHERE name = 'generation') AS generation,"
                " coalesce(array_agg(id ORDER BY id), '{}') AS ids, min(expires_at) AS valid_until"
                " FROM memories WHERE status = $1 AND username = $2 AND scope = ANY($3::text[])"
                " AND (expires_at IS NULL OR expires_at > $4)",
                ACTIVE,
                user,
                list(scopes),
                now,
            )

        row = await self._read(body)
        return AllowedIds(
            ids=np.array(row["ids"], dtype=np.int64),
            generation=int(row["generation"]),
            valid_until=row["valid_until"],
        )

    async def _lexical_search(
        self, terms: Sequence[str], user: str, scopes: Collection[str], now: float,
        exclude: Collection[int], limit: int,
    ) -> builtins.list[tuple[int, float]]:
        sql = lexical_sql("$1", "$2", "$3", "$4", "$5", "$6")
        params = (" | ".join(terms), user, list(scopes), now, [int(i) for i in exclude], limit)

        async def body(conn: asyncpg.Connection) -> builtins.list[asyncpg.Record]:
            rows: builtins.list[asyncpg.Record] = await conn.fetch(sql, *params)
            return rows

        return [(int(r["id"]), float(r["score"])) for r in await self._read(body)]

    async def generation(self) -> int:
        return await self._read(read_generation)

    async def vector_ids(self, embedding_model: str, *, user: str | None = None) -> np.ndarray:
        sql, params = vector_ids_query(embedding_model, user)

        async def body(conn: asyncpg.Connection) -> builtins.list[int]:
            ids: builtins.list[int] = await conn.fetchval(sql, *params)
            return ids

        return np.sort(np.array(await self._read(body), dtype=np.int64))

    async def vectors(
        self, embedding_model: str, ids: Sequence[int] | None = None, *, user: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        # Aggregated into one row: ten thousand Records cost far more than one bytea.
        sql = (
            "SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids, string_agg(embedding, ''::bytea ORDER BY id)"
            " AS blob, max(length(embedding)) AS width FROM memories"
            " WHERE status = $1 AND embedding_model = $2 AND embedding IS NOT NULL"
            " AND ($3::text IS NULL OR username = $3)"
        )
        params: builtins.list[Any] = [ACTIVE, embedding_model, user]
        if ids is not None:
            sql += " AND id = ANY($4::bigint[])"
            params.append([int(i) for i in ids])

        async def body(conn: asyncpg.Connection) -> asyncpg.Record:
            return await conn.fetchrow(sql, *params)

        row = await self._read(body)
        if not row["ids"]:
            return no_vectors()
        out_ids = np.array(row["ids"], dtype=np.int64)
        vectors = np.frombuffer(row["blob"], dtype="<f4").reshape(len(out_ids), row["width"] // 4)
        return out_ids, vectors.astype(np.float32)

    async def missing_vectors(self, embedding_model: str, *, user: str | None = None) -> builtins.list[Memory]:
        # One user's: the two partial indexes of migration 8 answer it index-only, so
        # a start does not read a heap page per row of this user (10,000 at 1M).
        held = "status IN ('active', 'quarantined')"
        if user is None:
            sql = f"SELECT {COLUMNS} FROM memories WHERE {held} AND (embedding IS NULL OR embedding_model != $1) ORDER BY id"
            params: tuple[str, ...] = (embedding_model,)
        else:
            sql = (
                f"SELECT {COLUMNS} FROM memories WHERE id IN ("
                f"SELECT id FROM memories WHERE {held} AND embedding IS NULL AND username = $2"
                f" UNION ALL SELECT id FROM memories WHERE {held} AND embedding IS NOT NULL"
                " AND username = $2 AND embedding_model != $1) ORDER BY id"
            )
            params = (embedding_model, user)

        async def body(conn: asyncpg.Connection) -> builtins.list[Memory]:
            return [row_to_memory(r) for r in await conn.fetch(sql, *params)]

        return await self._read(body)

    async def audit(
        self, memory_id: int | None = None, *, action: AuditAction | None = None
    ) -> builtins.list[AuditEntry]:
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if memory_id is not None:
            params.append(memory_id)
            where.append(f"memory_id = ${len(params)}")
        if action is not None:
            params.append(AuditAction(action).value)
            where.append(f"action = ${len(params)}")
        sql = AUDIT_SELECT + (" WHERE " + " AND ".join(where) if where else "")

        async def body(conn: asyncpg.Connection) -> builtins.list[AuditEntry]:
            return [audit_from_row(r) for r in await conn.fetch(sql + " ORDER BY id", *params)]

        return await self._read(body)

    async def metrics(self) -> dict[str, float]:
        async def body(conn: asyncpg.Connection) -> dict[str, float]:
            return {
                r["name"]: r["value"]
                for r in await conn.fetch("SELECT name, value FROM memory_metrics")
            }

        return await self._read(body)

    async def counts_by_status(self) -> dict[str, int]:
        async def body(conn: asyncpg.Connection) -> builtins.list[asyncpg.Record]:
            rows: builtins.list[asyncpg.Record] = await conn.fetch(
                "SELECT status, count(*) AS n FROM memories GROUP BY status"
            )
            return rows

        return status_counts((r["status"], r["n"]) for r in await self._read(body))

    async def active_rows(self, user: str) -> tuple[builtins.list[Memory], dict[int, tuple[str, bytes]]]:
        """This user's active rows and their vectors: what the local read-only cache keeps."""

        async def body(conn: asyncpg.Connection) -> builtins.list[asyncpg.Record]:
            rows: builtins.list[asyncpg.Record] = await conn.fetch(
                f"SELECT {COLUMNS}, embedding FROM memories WHERE status = $1 AND username = $2 ORDER BY id",
                ACTIVE,
                user,
            )
            return rows

        rows = await self._read(body)
        vectors = {
            r["id"]: (r["embedding_model"], bytes(r["embedding"]))
            for r in rows
            if r["embedding"] is not None
        }
        return [row_to_memory(r) for r in rows], vectors

    # vectors in the database (pgvector) -------------------------------------------
    def searches_vectors(self) -> bool:
        return self._vector_search

    async def _ensure_index(self, dim: int) -> None:
        if dim not in self._indexed_dims:
            await self._read(lambda conn: pgvector.ensure_index(conn, dim, self.where))
            self._indexed_dims.add(dim)

    async def nearest_vectors(
        self,
        query: np.ndarray,
        *,
        embedding_model: str,
        user: str,
        scopes: Collection[str],
        now: float,
        exclude: Collection[int],
        limit: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        await self._ensure_index(int(np.asarray(query).size))

        async def body(conn: asyncpg.Connection) -> tuple[np.ndarray, np.ndarray]:
            return await pgvector.nearest(
                conn, query, embedding_model=embedding_model, user=user, scopes=scopes,
                now=now, exclude=exclude, limit=limit,
            )

        return await self._read(body)

    async def search_channels(self, request: ChannelQuery) -> StoreChannels:
        dim = int(np.asarray(request.query).size)
        await self._ensure_index(dim)
        records = await self._read(lambda conn: pgvector.channels(conn, request))
        return _channels_from(records, request.embedding_model, dim, request.links)

    async def vector_mean(
        self, embedding_model: str, *, user: str, dim: int
    ) -> tuple[np.ndarray | None, int]:
        return await self._read(lambda conn: pgvector.mean(conn, embedding_model, user, dim))

    # change feed -------------------------------------------------------------------
    async def watch(self, on_change: ChangeCallback) -> None:
        """LISTEN on a dedicated connection; ``on_change(generation)`` after every
        commit of another process, and once after a reconnect to catch up on missed ones.

        Our own commits are skipped: the service applies them to the index itself, and
        a resync racing that would cost a full id diff per write.
        """
        if self._listener is not None:
            await self._listener.close()
        self._listener = GenerationListener(
            self.dsn, on_change, on_notice=self._notice, connect_timeout=self.connect_timeout,
            ignore_pid=self._own_pids.__contains__,
        )
        await self._listener.start()

    async def close(self) -> None:
        try:
            if self._listener is not None:
                await self._listener.close()
            if self.cache is not None:
                await self.cache.refresh_from(self)
        except Exception as exc:  # a stale offline cache must not break shutdown
            log.warning("[MEMORY_PG] could not refresh the local cache: %s", one_line_reason(exc))
        finally:
            await self._pool.close()


def _channels_from(
    records: Sequence[asyncpg.Record], embedding_model: str, dim: int, asked_links: bool
) -> StoreChannels:
    """``search_channels``' answer from its statement's rows (one per candidate, and
    one per link when asked)."""
    links: dict[int, builtins.list[int]] | None = None
    if asked_links:
        links = {}
        for link in sorted((r["found_id"], r["link_of"]) for r in records if r["link_of"] is not None):
            links.setdefault(link[1], []).append(link[0])
    dense = sorted(
        (r["dense_distance"], r["found_id"], r["dense_vector"])
        for r in records
        if r["dense_vector"] is not None
    )
    lexical = sorted(
        ((int(r["found_id"]), float(r["lexical_score"])) for r in records if r["lexical_score"] is not None),
        key=lambda hit: (-hit[1], hit[0]),
    )
    rows = {r["id"]: row_to_memory(r) for r in records if r["id"] is not None}
    vectors = {
        r["id"]: np.frombuffer(r["stored_vector"], dtype="<f4").astype(np.float32)
        for r in records
        if r["id"] is not None and r["lexical_score"] is not None and r["stored_vector"] is not None
        and r["embedding_model"] == embedding_model and len(r["stored_vector"]) == 4 * dim
    }
    return StoreChannels(
        dense_ids=np.array([d[1] for d in dense], dtype=np.int64),
        dense_vectors=(
            np.stack([d[2] for d in dense]).astype(np.float32) if dense
            else np.zeros((0, dim), dtype=np.float32)
        ),
        lexical=lexical,
        rows=rows,
        vectors=vectors,
        links=links,
    )


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """Pool reset hook. Our queries leave no session state behind (no SET, no LISTEN
    or session locks on pooled connections; asyncpg still rolls back an open
    transaction first), so the default ``RESET ALL``/``UNLISTEN *`` round trip per
    release would buy nothing."""


def vector_ids_query(embedding_model: str, user: str | None) -> tuple[str, tuple[str, ...]]:
    """``vector_ids``' statement (its ids unsorted: an ORDER BY in SQL cost more than
    the whole index read) and its parameters."""
    if user is None:
        return (
            "SELECT coalesce(array_agg(id), '{}') FROM memories"
            " WHERE status = $1 AND embedding_model = $2 AND embedding IS NOT NULL",
            (ACTIVE, embedding_model),
        )
    # A local cache diffs these at every change anyone in the team makes: read from
    # migration 8's index (its predicate as literals), less the user's few held for
    # review, instead of a heap page per row of the user (10,000 at a million rows).
    return (
        "SELECT coalesce(array_agg(id), '{}') FROM memories"
        " WHERE status IN ('active', 'quarantined') AND embedding IS NOT NULL AND username = $2"
        " AND embedding_model = $1 AND id <> ALL (ARRAY("
        "SELECT id FROM memories WHERE status = 'quarantined' AND username = $2))",
        (embedding_model, user),
    )


def list_query(
    *,
    user: str | None = None,
    scopes: Collection[str] | None = None,
    statuses: Collection[Status] | None = None,
    key_prefix: str | None = None,
    linked: bool = False,
) -> tuple[str, builtins.list[Any]]:
    """``PostgresMemoryStore.list``'s statement and its parameters."""
    where: builtins.list[str] = []
    params: builtins.list[Any] = []
    if user is not None:
        params.append(user)
        where.append(f"username = ${len(params)}")
    if scopes is not None:
        params.append(list(scopes))
        where.append(f"scope = ANY(${len(params)}::text[])")
    if statuses is not None:
        params.append([Status(s).value for s in statuses])
        where.append(f"status = ANY(${len(params)}::text[])")
    if key_prefix is not None:
        params.append(key_prefix)
        where.append(f"starts_with(key, ${len(params)})")
    if linked:  # migration 9's index holds these
        where.append("restates IS NOT NULL")
    sql = f"SELECT {COLUMNS} FROM memories"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + " ORDER BY id", params


def _row_filter(q: RowQuery) -> tuple[str, builtins.list[Any]]:
    """``q``'s filters as a WHERE clause and its numbered parameters."""
    where: builtins.list[str] = []
    params: builtins.list[Any] = []

    def cond(sql: str, value: Any) -> None:
        params.append(value)
        where.append(sql.replace("$?", f"${len(params)}"))

    if q.user is not None:
        cond("username = $?", q.user)
    if q.scopes is not None:
        cond("scope = ANY($?::text[])", list(q.scopes))
    if q.statuses is not None:
        cond("status = ANY($?::text[])", [Status(s).value for s in q.statuses])
    if q.key is not None:
        cond("key = $?", q.key)
    if q.after is not None:
        cond("id > $?", q.after)
    if q.exclude:
        cond("NOT id = ANY($?::bigint[])", [int(i) for i in q.exclude])
    if q.linked:
        cond("(id = ANY($?::bigint[]) OR superseded_by = ANY($?::bigint[]) OR restates = ANY($?::bigint[]))",
             [int(i) for i in q.linked])  # fmt: skip
    if q.created_after is not None:
        cond("created_at > $?", q.created_after)
    if q.created_until is not None:
        cond("created_at <= $?", q.created_until)
    if q.model_written is not None:
        cond(("" if q.model_written else "NOT ") + "(origin <> 'user' OR $? = ANY(flags))", FLAG_FROM_FILE)
    for word in q.words:
        cond("position($? in lower(key || ' ' || value || ' ' || category || ' ' || status)) > 0", word)
    return (" WHERE " + " AND ".join(where) if where else ""), params
