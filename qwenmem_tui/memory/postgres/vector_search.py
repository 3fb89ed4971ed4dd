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

from qwenmem_tui.memory.postgres.schema import lexical_sql
from qwenmem_tui.memory.postgres.steps import COLUMNS
from qwenmem_tui.memory.store import ChannelQuery


log = logging.getLogger("qwenmem.memory")

# pg_advisory_xact_lock key serialising the set-up across processes ("qwnv").
_SETUP_LOCK = 0x71776E76
# An existing store is given the pgvector column at a client's start only while it
# holds this few vectors: each is converted by SQL (~1-2.5 ms here), under a lock every
# other starting client waits on. A larger one stays on the local cache until an
# administrator runs the set-up (``prepare`` logs it).
AUTO_SETUP_VECTORS = 5_000
# A first search builds the HNSW index of its dimension itself only on a table this
# small (the planner's estimate): seconds. On a larger one it would hold that client
# for minutes; an administrator builds it (``ensure_index`` logs the statement).
AUTO_INDEX_ROWS = 20_000
# The widest vector a btree entry holds with its row's user, scope and expiry.
MAX_PACKED_DIM = 512
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
        vectors = await conn.fetchval(
            "SELECT count(*) FROM (SELECT 1 FROM memories WHERE embedding IS NOT NULL LIMIT $1) AS v",
            AUTO_SETUP_VECTORS + 1,
        )
        if vectors > AUTO_SETUP_VECTORS:
            log.info(
                "[MEMORY_PG] %s: %d+ stored vectors would each be converted at this start;"
                " vectors are searched locally. To search them in the database, run once"
                " (minutes per 100,000 rows): CREATE EXTENSION IF NOT EXISTS vector; %s",
                where, AUTO_SETUP_VECTORS, " ".join(_SETUP.split()),
            )
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


def own_index_name(dim: int) -> str:
    return f"memories_own_vectors_{int(dim)}"


def indexes_sql(dim: int, *, concurrently: bool = False) -> list[str]:
    """The indexes of one dimension: HNSW, and a btree holding each user's vectors
    packed by (user, scope), so that the exact search of one user's rows is an
    index-only scan of a few hundred pages instead of a heap page per row (the rows
    of a hundred users interleave in the table). Only while a vector fits in a btree
    entry (2,700 bytes: 512 dimensions with room to spare)."""
    dim = int(dim)
    how = "CONCURRENTLY " if concurrently else ""
    where = f"WHERE status = 'active' AND vector_dims(embedding_vec) = {dim}"
    statements = [
        f"CREATE INDEX {how}IF NOT EXISTS {index_name(dim)} ON memories USING hnsw"
        f" ((embedding_vec::vector({dim})) vector_ip_ops) {where}"
    ]
    if dim <= MAX_PACKED_DIM:
        statements.append(
            f"CREATE INDEX {how}IF NOT EXISTS {own_index_name(dim)} ON memories (username, scope)"
            f" INCLUDE (id, expires_at, embedding_model, embedding_vec) {where}"
        )
    return statements


async def ensure_index(conn: asyncpg.Connection, dim: int, where: str) -> None:
    """The indexes of one dimension (``indexes_sql``), built by the first client
    searching it while the table is small (``AUTO_INDEX_ROWS``). Without them the
    search is still exact and filtered first, reading the user's rows by the status
    btree; the log names the statements that add them."""
    dim = int(dim)
    names = [index_name(dim)] + ([own_index_name(dim)] if dim <= MAX_PACKED_DIM else [])
    present = await conn.fetchval(
        "SELECT count(*) FROM unnest($1::text[]) AS n WHERE to_regclass(n) IS NOT NULL", names
    )
    if present == len(names):
        return
    rows = await conn.fetchval("SELECT reltuples FROM pg_class WHERE oid = 'memories'::regclass")
    if rows > AUTO_INDEX_ROWS:
        log.info(
            "[MEMORY_PG] %s lacks the vector indexes for %d dimensions; searches are exact"
            " and filtered first. To add them: %s", where, dim,
            "; ".join(indexes_sql(dim, concurrently=True)),
        )
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SETUP_LOCK)
        for statement in indexes_sql(dim):
            await conn.execute(statement)


def nearest_sql(dim: int) -> str:
    """The dense channel's query for one dimension; the index predicate repeated as
    literals (a parameter would hide it from the planner). The query vector travels
    as a ``vector`` (``encode_vector``): sent as a real[] and cast, a generic plan
    (PostgreSQL's choice after five runs of a prepared statement) converted it again
    for each row compared, 2.3 times the CPU of the whole statement at 5,000 rows."""
    dim = int(dim)
    return (
        "SELECT id, embedding_vec FROM memories"
        f" WHERE status = 'active' AND vector_dims(embedding_vec) = {dim}"
        " AND embedding_model = $2 AND username = $3 AND scope = ANY($4::text[])"
        " AND (expires_at IS NULL OR expires_at > $5) AND NOT (id = ANY($6::bigint[]))"
        f" ORDER BY embedding_vec::vector({dim}) <#> $1::vector({dim}) LIMIT $7"
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
    """(ids, float32 vectors) best first; the vectors as the index holds them
    (``decode_vector``), bit for bit the stored float32s."""
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    rows = await conn.fetch(
        nearest_sql(len(q)),
        q,
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
    return ids, np.stack([r["embedding_vec"] for r in rows]).astype(np.float32)


def channels_sql(
    dim: int, *, centred: bool, lexical: bool, links: bool = False, removed: bool = False
) -> str:
    """Recall's one statement: the dense search (``nearest_sql``, $1-$7), the
    lexical one (``lexical_sql``, its terms and limit $9 and $10), and the rows of
    every lexical hit and of the $8 dense candidates best by the centred cosine
    (``dense.debiased``, the mean and the basis removed the last parameters) or by ``p·query`` — all in one snapshot.

    One row per candidate: its distance and vector when the dense search found it,
    its score when the lexical one did, its row (and stored vector) when wanted.
    ``links``: then one row more per active memory of the user's that may restate an
    older one (``link_of``: that one; migration 9's index), which recall reads again
    whenever the generation moves: in a team, at nearly every recall."""
    dim = int(dim)
    query = f"$1::vector({dim})"
    if centred:
        mean = f"${11 if lexical else 9}::vector({dim})"
        norm = f"vector_norm(d.embedding_vec - {mean})"
        if removed:  # |P x|: x's norm without its components along the basis (its
            # columns one after another in one real[])
            basis = f"${12 if lexical else 10}::real[]"
            column = f"({basis})[i * {dim} + 1:(i + 1) * {dim}]::vector({dim})"
            norm = (
                f"sqrt(greatest({norm} ^ 2 - (SELECT sum(((d.embedding_vec - {mean}) <#> {column}) ^ 2)"
                f" FROM generate_series(0, cardinality({basis}) / {dim} - 1) AS i), 0))"
            )
        rank = f"((d.embedding_vec - {mean}) <#> {query}) / greatest({norm}, 1e-6)"
    else:
        rank = f"d.embedding_vec <#> {query}"
    words = (
        lexical_sql("$9", "$3", "$4", "$5", "$6", "$10")
        if lexical
        else "SELECT NULL::bigint AS id, NULL::real AS score WHERE false"
    )
    names = [c.strip() for c in COLUMNS.split(",")]
    row = ", ".join(f"m.{c}" for c in names)
    linked = (
        f" UNION ALL SELECT {', '.join('NULL' for _ in names)}, id, NULL, NULL, NULL, NULL, restates"
        " FROM memories WHERE username = $3 AND status = 'active' AND restates IS NOT NULL"
        if links
        else ""
    )
    return (
        f"WITH dense AS ({nearest_sql(dim)}),"
        f" best AS (SELECT d.id FROM dense AS d ORDER BY {rank}, d.id LIMIT $8),"
        f" lexical AS ({words}),"
        " found AS (SELECT id FROM dense UNION SELECT id FROM lexical)"
        f" SELECT {row}, f.id AS found_id, d.embedding_vec AS dense_vector,"  # the row first:
        f" d.embedding_vec <#> {query} AS dense_distance, l.score AS lexical_score,"  # read by position
        " m.embedding AS stored_vector, NULL::bigint AS link_of"
        " FROM found AS f LEFT JOIN dense AS d ON d.id = f.id LEFT JOIN lexical AS l ON l.id = f.id"
        " LEFT JOIN memories AS m ON m.id = f.id AND (l.id IS NOT NULL OR f.id IN (SELECT id FROM best))"
        + linked
    )


async def channels(conn: asyncpg.Connection, request: ChannelQuery) -> list[asyncpg.Record]:
    """``channels_sql``'s rows; no terms or no lexical room leave the lexical search out."""
    r = request
    q = np.asarray(r.query, dtype=np.float32).reshape(-1)
    lexical = bool(r.terms) and r.lexical_limit > 0
    params: list[object] = [
        q, r.embedding_model, r.user, list(r.scopes), r.now,
        [int(i) for i in r.exclude], r.dense_limit, r.rows_for,
    ]
    params += [" | ".join(r.terms), r.lexical_limit] if lexical else []
    removed = r.centre is not None and r.remove is not None
    if r.centre is not None:
        params.append(np.asarray(r.centre, dtype=np.float32).reshape(-1))
    if removed:
        params.append(np.asarray(r.remove, dtype=np.float32).T.reshape(-1).tolist())  # columns
    sql = channels_sql(
        len(q), centred=r.centre is not None, lexical=lexical, links=r.links, removed=removed
    )
    rows: list[asyncpg.Record] = await conn.fetch(sql, *params)
    return rows


async def mean(
    conn: asyncpg.Connection, embedding_model: str, user: str, dim: int
) -> tuple[np.ndarray | None, int]:
    """The mean of ``user``'s active vectors of one embedder and dimension, summed in
    the server (index-only, from the packed btree: the predicate as literals), and
    their count. pgvector's ``sum`` adds float32 vectors in place; its ``avg`` builds
    a float8 array per row and cost twice as much (50 ms for 10,000 vectors here)."""
    dim = int(dim)
    row = await conn.fetchrow(
        "SELECT sum(embedding_vec)::real[] AS total, count(*) AS n FROM memories"
        f" WHERE status = 'active' AND vector_dims(embedding_vec) = {dim}"
        " AND username = $1 AND embedding_model = $2",
        user,
        embedding_model,
    )
    total, count = row["total"], int(row["n"])
    if total is None or not count:
        return None, count
    return np.asarray(total, dtype=np.float64).astype(np.float32) / np.float32(count), count


def decode_vector(data: bytes) -> np.ndarray:
    """pgvector's binary form: dimension and an unused int16, big-endian float32s."""
    return np.frombuffer(data, dtype=">f4", offset=4)


def encode_vector(vector: np.ndarray) -> bytes:
    values = np.asarray(vector, dtype=">f4").reshape(-1)
    return len(values).to_bytes(2, "big") + bytes(2) + values.tobytes()


async def session_settings(conn: asyncpg.Connection) -> None:
    """Per connection: vectors travel in pgvector's binary form (where the type
    exists), and HNSW scans continue until the filtered LIMIT is met (an unknown
    setting on a server without pgvector is a harmless placeholder)."""
    schema = await conn.fetchval(
        "SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
        " WHERE t.typname = 'vector' LIMIT 1"
    )
    if schema is not None:
        await conn.set_type_codec(
            "vector", schema=schema, encoder=encode_vector, decoder=decode_vector, format="binary"
        )
    try:
        await conn.execute(
            f"SET hnsw.ef_search = {EF_SEARCH}; SET hnsw.iterative_scan = strict_order"
        )
    except asyncpg.PostgresError as exc:  # an older pgvector: plain HNSW scans
        log.info("[MEMORY_PG] HNSW scan settings refused: %s", exc)
