"""Vectors searched where they live: pgvector, when the server has the extension.

A client of a team's store would otherwise download every vector it may see into a
local FAISS cache at its first start and keep it in step on every change. With
pgvector the dense channel is one query: the hard filters (user, scope, active,
unexpired, not excluded) in its WHERE, ordered by inner product, bounded by LIMIT.

Not a numbered migration: whether it applies depends on the server (the extension
installed or installable by this role), so it is checked at every open, under its
own advisory lock, and a server without it keeps the local cache (``VectorIndex``).

- ``embedding`` (little-endian float32 bytea) stays the truth every store and the
  offline cache read; ``embedding_vec`` follows it through a trigger, so writers that
  know nothing of it (an older qwenmem, ``memory migrate``) keep it in step too.
- ``embedding_vec`` is an untyped ``vector``: memories of several embedders coexist.
  HNSW needs one dimension, so each dimension searched gets its own partial
  expression index (``ensure_index``); the query repeats its predicate literally so
  the planner can use it. For a selective filter (one user of a hundred) the planner
  may rather read that user's rows by the btree and sort them exactly; either way
  the cost follows the rows the client may see, not the table.
- Storage MAIN keeps the vector inline (the bytea goes to TOAST instead), so an
  exact scan does not fetch each vector from the TOAST table.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import asyncpg
import numpy as np

from qwenmem_tui.memory.postgres.steps import ACTIVE

log = logging.getLogger("qwenmem.memory")

# pg_advisory_xact_lock key serialising the set-up across processes ("qwnv").
_SETUP_LOCK = 0x71776E76
# A first search builds the HNSW index of its dimension itself only on a table this
# small (the planner's estimate): seconds. On a larger one it would hold that client
# for minutes; an administrator builds it (``ensure_index`` logs the statement).
AUTO_INDEX_ROWS = 20_000
# Candidates an HNSW scan keeps per step; iterative scans (pgvector >= 0.8) go on
# past it until the LIMIT is met after the filters, in exact distance order.
EF_SEARCH = 100

# Exact: every finite float32, subnormals included, decoded from its bits.
_SETUP = """
CREATE OR REPLACE FUNCTION qwenmem_f32le(b bytea) RETURNS real[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT array_agg((CASE WHEN bits >> 31 = 1 THEN -1::float8 ELSE 1::float8 END) *
    CASE WHEN (bits >> 23) & 255 = 0 THEN (bits & 8388607) * 2::float8 ^ -149
         ELSE ((bits & 8388607) + 8388608) * 2::float8 ^ (((bits >> 23) & 255) - 150) END
    ORDER BY i)::real[]
  FROM (SELECT i, get_byte(b, 4 * i)::bigint | (get_byte(b, 4 * i + 1)::bigint << 8)
                | (get_byte(b, 4 * i + 2)::bigint << 16) | (get_byte(b, 4 * i + 3)::bigint << 24) AS bits
        FROM generate_series(0, length(b) / 4 - 1) AS i) AS w
$$;
ALTER TABLE memories ADD COLUMN embedding_vec vector;
ALTER TABLE memories ALTER COLUMN embedding_vec SET STORAGE MAIN;
CREATE OR REPLACE FUNCTION qwenmem_embedding_vec() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.embedding_vec := qwenmem_f32le(NEW.embedding)::vector;
    RETURN NEW;
END
$$;
CREATE TRIGGER memories_embedding_vec BEFORE INSERT OR UPDATE OF embedding ON memories
    FOR EACH ROW EXECUTE FUNCTION qwenmem_embedding_vec();
UPDATE memories SET embedding_vec = qwenmem_f32le(embedding)::vector
    WHERE embedding IS NOT NULL AND status IN ('active', 'quarantined');
"""


async def prepare(conn: asyncpg.Connection, where: str) -> bool:
    """True when this database searches vectors: the column exists, or the extension
    is (or can now be) installed and the column was added. Never raises for a server
    without pgvector or a role that may not install it: that is the fallback."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SETUP_LOCK)
        if await _has_column(conn):
            return True
        available = await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')"
        )
        if not available:
            log.info("[MEMORY_PG] %s has no pgvector: vectors are searched locally", where)
            return False
        try:
            async with conn.transaction():  # a savepoint: the refusal must not end ours
                await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except asyncpg.PostgresError as exc:
            log.info(
                "[MEMORY_PG] %s: cannot install pgvector (%s): vectors are searched locally",
                where, exc,
            )
            return False
        await conn.execute(_SETUP)
        log.info("[MEMORY_PG] %s: vectors are searched in the database (pgvector)", where)
        return True


async def _has_column(conn: asyncpg.Connection) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'memories'::regclass"
            " AND attname = 'embedding_vec' AND NOT attisdropped)"
        )
    )


def index_name(dim: int) -> str:
    return f"memories_hnsw_{int(dim)}"


def index_sql(dim: int, *, concurrently: bool = False) -> str:
    dim = int(dim)
    return (
        f"CREATE INDEX {'CONCURRENTLY ' if concurrently else ''}IF NOT EXISTS {index_name(dim)}"
        f" ON memories USING hnsw ((embedding_vec::vector({dim})) vector_ip_ops)"
        f" WHERE status = 'active' AND vector_dims(embedding_vec) = {dim}"
    )


async def ensure_index(conn: asyncpg.Connection, dim: int, where: str) -> None:
    """The HNSW index of one dimension, built by the first client searching it while
    the table is small (``AUTO_INDEX_ROWS``). Without it the search is still exact
    and filtered first: a client's query reads its own rows by the btree, which is
    also the planner's choice with the index when one user owns a small share."""
    dim = int(dim)
    if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", index_name(dim)):
        return
    rows = await conn.fetchval("SELECT reltuples FROM pg_class WHERE oid = 'memories'::regclass")
    if rows > AUTO_INDEX_ROWS:
        log.info(
            "[MEMORY_PG] %s has no HNSW index for %d dimensions; searches are exact and"
            " filtered first. To add it: %s", where, dim, index_sql(dim, concurrently=True),
        )
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SETUP_LOCK)
        await conn.execute(index_sql(dim))


def nearest_sql(dim: int) -> str:
    """The dense channel's query for one dimension; the index predicate repeated as
    literals (a parameter would hide it from the planner)."""
    dim = int(dim)
    return (
        "SELECT id, embedding FROM memories"
        f" WHERE status = 'active' AND vector_dims(embedding_vec) = {dim}"
        " AND embedding_model = $2 AND username = $3 AND scope = ANY($4::text[])"
        " AND (expires_at IS NULL OR expires_at > $5) AND NOT (id = ANY($6::bigint[]))"
        f" ORDER BY embedding_vec::vector({dim}) <#> $1::real[]::vector({dim}) LIMIT $7"
    )


async def nearest(
    conn: asyncpg.Connection,
    query: np.ndarray,
    *,
    embedding_model: str,
    user: str,
    scopes: Collection[str],
    now: float,
    exclude: Collection[int],
    limit: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(ids, float32 vectors) best first; the vectors from the bytea, bit for bit
    what a local index would hold."""
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    rows = await conn.fetch(
        nearest_sql(len(q)),
        q.tolist(),
        embedding_model,
        user,
        list(scopes),
        now,
        [int(i) for i in exclude],
        limit,
    )
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, len(q)), dtype=np.float32)
    ids = np.array([r["id"] for r in rows], dtype=np.int64)
    vectors = np.frombuffer(b"".join(r["embedding"] for r in rows), dtype="<f4")
    return ids, vectors.reshape(len(rows), -1).astype(np.float32)


async def mean(
    conn: asyncpg.Connection, embedding_model: str, user: str
) -> tuple[np.ndarray | None, int]:
    """The mean of ``user``'s active vectors of one embedder, summed in the server,
    and their count."""
    row = await conn.fetchrow(
        "SELECT avg(embedding_vec)::real[] AS mean, count(*) AS n FROM memories WHERE status = $1"
        " AND username = $2 AND embedding_model = $3 AND embedding_vec IS NOT NULL",
        ACTIVE,
        user,
        embedding_model,
    )
    value = row["mean"]
    return (None if value is None else np.asarray(value, dtype=np.float32)), int(row["n"])


async def session_settings(conn: asyncpg.Connection) -> None:
    """Per connection: HNSW scans continue until the filtered LIMIT is met (an
    unknown setting on a server without pgvector is a harmless placeholder)."""
    try:
        await conn.execute(
            f"SET hnsw.ef_search = {EF_SEARCH}; SET hnsw.iterative_scan = strict_order"
        )
    except asyncpg.PostgresError as exc:  # an older pgvector: plain HNSW scans
        log.info("[MEMORY_PG] HNSW scan settings refused: %s", exc)
