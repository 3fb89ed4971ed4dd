"""The default MemoryStore: the ``memories`` tables of qwenmem.db (WAL, aiosqlite).

Writes run as ``BEGIN IMMEDIATE`` transactions (``Database.write``): the write lock is taken before the
supersede check reads the key's active row, so two processes saving the same key
serialise instead of both seeing "no active row" (the partial unique index would
then reject the second one; it is the backstop, not the mechanism).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import aiosqlite
import numpy as np

from qwenmem_tui.memory.model import (
    AuditAction,
    AuditEntry,
    Category,
    Memory,
    MemoryDraft,
    Origin,
    Status,
    WriteAction,
    WriteResult,
    content_hash,
)
from qwenmem_tui.memory.store import AllowedIds, MemoryStore

if TYPE_CHECKING:
    from qwenmem_tui.storage.database import Database

T = TypeVar("T")

_COLUMNS = (
    "id, user, scope, category, key, value, origin, status, flags, created_at, updated_at, "
    "expires_at, last_recalled_at, recall_count, superseded_by, content_hash, embedding_model"
)
_ACTIVE = Status.ACTIVE.value


def _row_to_memory(row: Sequence[Any]) -> Memory:
    return Memory(
        id=row[0],
        user=row[1],
        scope=row[2],
        category=Category(row[3]),
        key=row[4],
        value=row[5],
        origin=Origin(row[6]),
        status=Status(row[7]),
        flags=json.loads(row[8]),
        created_at=row[9],
        updated_at=row[10],
        expires_at=row[11],
        last_recalled_at=row[12],
        recall_count=row[13],
        superseded_by=row[14],
        content_hash=row[15],
        embedding_model=row[16],
    )


def _blob(vector: np.ndarray | None) -> bytes | None:
    return None if vector is None else np.asarray(vector, dtype="<f4").tobytes()


class SqliteMemoryStore(MemoryStore):
    def __init__(self, db: Database) -> None:
        self._db = db

    @property
    def _conn(self) -> aiosqlite.Connection:
        return self._db.conn

    async def _tx(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        # Database.write runs fn inside BEGIN IMMEDIATE ... COMMIT, serialised with
        # every other writer on this connection and retried while another process
        # holds the lock; fn only touches the database, so a retry is safe.
        return await self._db.write(fn)

    # writes ------------------------------------------------------------------------
    async def write(
        self,
        draft: MemoryDraft,
        *,
        flags: Sequence[str],
        expires_at: float | None,
        vector: np.ndarray | None,
        embedding_model: str,
        now: float,
    ) -> WriteResult:
        chash = content_hash(draft.value)
        created = draft.created_at if draft.created_at is not None else now

        async def insert(conn: aiosqlite.Connection, status: Status) -> int:
            cur = await conn.execute(
                "INSERT INTO memories (user, scope, category, key, value, origin, status, flags,"
                " created_at, updated_at, expires_at, content_hash, embedding_model, embedding)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    draft.user,
                    draft.scope,
                    draft.category.value,
                    draft.key,
                    draft.value,
                    draft.origin.value,
                    status.value,
                    json.dumps(list(flags)),
                    created,
                    now,
                    expires_at,
                    chash,
                    embedding_model if vector is not None else "",
                    _blob(vector),
                ),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

        async def refresh(conn: aiosqlite.Connection, row: Memory, why: str) -> None:
            # Refreshing moves the expiry forward only: a shorter TTL on a repeat must
            # not make a fact the user stated twice expire sooner.
            new_expiry = expires_at
            if row.expires_at is None or (expires_at is not None and row.expires_at > expires_at):
                new_expiry = row.expires_at
            await conn.execute(
                "UPDATE memories SET updated_at = ?, expires_at = ? WHERE id = ?",
                (now, new_expiry, row.id),
            )
            await _audit(
                conn, row.id, AuditAction.REFRESH, draft.origin, now, why, row.value, draft.value
            )

        async def body(conn: aiosqlite.Connection) -> WriteResult:
            writes = {"writes": 1.0}
            if flags:
                generation = await _generation(conn)
                new_id = await insert(conn, Status.QUARANTINED)
                await _audit(
                    conn,
                    new_id,
                    AuditAction.QUARANTINE,
                    draft.origin,
                    now,
                    _join(draft.reason, "flags: " + ", ".join(flags)),
                    None,
                    draft.value,
                )
                await _add_metrics(conn, {**writes, "quarantined_writes": 1.0})
                return WriteResult(
                    await _must_get(conn, new_id), WriteAction.QUARANTINED, generation=generation
                )

            current = await _one(
                conn,
                f"SELECT {_COLUMNS} FROM memories WHERE user = ? AND scope = ? AND key = ? AND status = ?",
                (draft.user, draft.scope, draft.key, _ACTIVE),
            )
            if current is not None and current.content_hash == chash:
                await refresh(conn, current, _join(draft.reason, "same value saved again"))
                await _add_metrics(conn, writes)
                return WriteResult(
                    await _must_get(conn, current.id),
                    WriteAction.REFRESHED,
                    generation=await _bump(conn),
                )

            twin = await _one(
                conn,
                f"SELECT {_COLUMNS} FROM memories WHERE user = ? AND scope = ? AND content_hash = ?"
                " AND status = ? AND key != ?",
                (draft.user, draft.scope, chash, _ACTIVE, draft.key),
            )
            superseded: list[int] = []
            if twin is not None:
                if current is not None:
                    await _supersede(conn, current, twin.id, draft, now)
                    superseded.append(current.id)
                await refresh(
                    conn,
                    twin,
                    _join(draft.reason, f"deduplicated: saved again under key {draft.key}"),
                )
                await _add_metrics(conn, writes)
                return WriteResult(
                    await _must_get(conn, twin.id),
                    WriteAction.DEDUPLICATED,
                    superseded,
                    await _bump(conn),
                )

            if current is not None:
                # Leave the partial unique index room for the new row first.
                await conn.execute(
                    "UPDATE memories SET status = ?, updated_at = ? WHERE id = ?",
                    (Status.SUPERSEDED.value, now, current.id),
                )
            new_id = await insert(conn, Status.ACTIVE)
            await _audit(
                conn, new_id, AuditAction.CREATE, draft.origin, now, draft.reason, None, draft.value
            )
            action = WriteAction.CREATED
            if current is not None:
                await _supersede(conn, current, new_id, draft, now)
                superseded.append(current.id)
                action = WriteAction.SUPERSEDED
            await _add_metrics(conn, writes)
            return WriteResult(await _must_get(conn, new_id), action, superseded, await _bump(conn))

        return await self._tx(body)

    async def record_recall(
        self, ids: Sequence[int], *, now: float, metrics: Mapping[str, float]
    ) -> None:
        async def body(conn: aiosqlite.Connection) -> None:
            if ids:
                await conn.executemany(
                    "UPDATE memories SET last_recalled_at = ?, recall_count = recall_count + 1 WHERE id = ?",
                    [(now, i) for i in ids],
                )
            await _add_metrics(conn, metrics)

        await self._tx(body)

    async def approve(self, memory_id: int, *, now: float, reason: str = "") -> Memory | None:
        async def body(conn: aiosqlite.Connection) -> Memory | None:
            row = await _get(conn, memory_id)
            if row is None or row.status is not Status.QUARANTINED:
                return None
            current = await _one(
                conn,
                f"SELECT {_COLUMNS} FROM memories WHERE user = ? AND scope = ? AND key = ? AND status = ?",
                (row.user, row.scope, row.key, _ACTIVE),
            )
            if current is not None:
                await conn.execute(
                    "UPDATE memories SET status = ?, updated_at = ? WHERE id = ?",
                    (Status.SUPERSEDED.value, now, current.id),
                )
            await conn.execute(
                "UPDATE memories SET status = ?, updated_at = ? WHERE id = ?",
                (_ACTIVE, now, memory_id),
            )
            await _audit(
                conn, memory_id, AuditAction.APPROVE, Origin.USER, now, reason, None, row.value
            )
            if current is not None:
                draft = MemoryDraft(
                    row.category, row.key, row.value, Origin.USER, row.scope, row.user
                )
                await _supersede(conn, current, memory_id, draft, now)
            await _bump(conn)
            return await _must_get(conn, memory_id)

        return await self._tx(body)

    async def forget(
        self, memory_id: int, *, origin: Origin | str, now: float, reason: str = ""
    ) -> Memory | None:
        async def body(conn: aiosqlite.Connection) -> Memory | None:
            row = await _get(conn, memory_id)
            if row is None or row.status is Status.DELETED:
                return None
            await conn.execute(
                "UPDATE memories SET status = ?, updated_at = ?, embedding = NULL WHERE id = ?",
                (Status.DELETED.value, now, memory_id),
            )
            await _audit(
                conn, memory_id, AuditAction.FORGET, str(origin), now, reason, row.value, None
            )
            await _bump(conn)
            return await _must_get(conn, memory_id)

        return await self._tx(body)

    async def sweep_expired(self, *, now: float) -> list[int]:
        async def body(conn: aiosqlite.Connection) -> list[int]:
            cur = await conn.execute(
                "SELECT id, value FROM memories"
                " WHERE status = ? AND expires_at IS NOT NULL AND expires_at <= ?",
                (_ACTIVE, now),
            )
            rows = list(await cur.fetchall())
            if not rows:
                return []
            await conn.executemany(
                "UPDATE memories SET status = ?, updated_at = ? WHERE id = ?",
                [(Status.EXPIRED.value, now, r[0]) for r in rows],
            )
            for memory_id, value in rows:
                await _audit(
                    conn, memory_id, AuditAction.EXPIRE, "system", now, "ttl elapsed", value, None
                )
            await _bump(conn)
            return [r[0] for r in rows]

        return await self._tx(body)

    async def set_vectors(
        self, ids: Sequence[int], vectors: np.ndarray, embedding_model: str
    ) -> None:
        async def body(conn: aiosqlite.Connection) -> None:
            await conn.executemany(
                "UPDATE memories SET embedding = ?, embedding_model = ? WHERE id = ?",
                [(_blob(v), embedding_model, i) for i, v in zip(ids, vectors, strict=True)],
            )
            await _bump(conn)

        await self._tx(body)

    async def add_metrics(self, deltas: Mapping[str, float]) -> None:
        async def body(conn: aiosqlite.Connection) -> None:
            await _add_metrics(conn, deltas)

        await self._tx(body)

    # reads -------------------------------------------------------------------------
    async def get(self, memory_id: int) -> Memory | None:
        return await _get(self._conn, memory_id)

    async def fetch(self, ids: Sequence[int]) -> list[Memory]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        cur = await self._conn.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE id IN ({marks})", list(ids)
        )
        by_id = {m.id: m for m in map(_row_to_memory, await cur.fetchall())}
        return [by_id[i] for i in ids if i in by_id]

    async def list(
        self,
        *,
        user: str | None = None,
        scopes: Collection[str] | None = None,
        statuses: Collection[Status] | None = None,
    ) -> list[Memory]:
        where: list[str] = []
        params: list[Any] = []
        if user is not None:
            where.append("user = ?")
            params.append(user)
        if scopes is not None:
            where.append(f"scope IN ({','.join('?' * len(scopes))})")
            params.extend(scopes)
        if statuses is not None:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            params.extend(s.value for s in statuses)
        sql = f"SELECT {_COLUMNS} FROM memories"
        if where:
            sql += " WHERE " + " AND ".join(where)
        cur = await self._conn.execute(sql + " ORDER BY id", params)
        return [_row_to_memory(r) for r in await cur.fetchall()]

    async def allowed_ids(self, *, user: str, scopes: Collection[str], now: float) -> AllowedIds:
        generation = await self.generation()
        # One row with the ids joined: a hundred thousand Row objects through the
        # aiosqlite thread cost ~25x more than parsing one string.
        cur = await self._conn.execute(
            "SELECT group_concat(id), min(expires_at) FROM ("
            f" SELECT id, expires_at FROM memories WHERE status = ? AND user = ?"
            f" AND scope IN ({','.join('?' * len(scopes))}) AND (expires_at IS NULL OR expires_at > ?)"
            " ORDER BY id)",
            (_ACTIVE, user, *scopes, now),
        )
        row = await cur.fetchone()
        joined, valid_until = (row[0], row[1]) if row else (None, None)
        ids = np.array(joined.split(","), dtype=np.int64) if joined else np.zeros(0, dtype=np.int64)
        return AllowedIds(ids=ids, generation=generation, valid_until=valid_until)

    async def generation(self) -> int:
        return await _generation(self._conn)

    async def vector_ids(self, embedding_model: str) -> np.ndarray:
        cur = await self._conn.execute(
            "SELECT id FROM memories WHERE status = ? AND embedding_model = ?"
            " AND embedding IS NOT NULL ORDER BY id",
            (_ACTIVE, embedding_model),
        )
        rows = await cur.fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    async def vectors(
        self, embedding_model: str, ids: Sequence[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        sql = (
            "SELECT id, embedding FROM memories"
            " WHERE status = ? AND embedding_model = ? AND embedding IS NOT NULL"
        )
        params: list[Any] = [_ACTIVE, embedding_model]
        rows: list[Any] = []
        if ids is None:
            rows = list(await (await self._conn.execute(sql + " ORDER BY id", params)).fetchall())
        else:
            # SQLite caps bound parameters; large id lists go in chunks.
            for start in range(0, len(ids), 500):
                chunk = [int(i) for i in ids[start : start + 500]]
                cur = await self._conn.execute(
                    sql + f" AND id IN ({','.join('?' * len(chunk))}) ORDER BY id", params + chunk
                )
                rows.extend(await cur.fetchall())
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        out_ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
        return out_ids, vectors.astype(np.float32, copy=False)

    async def missing_vectors(self, embedding_model: str) -> list[Memory]:
        cur = await self._conn.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE status IN (?, ?)"
            " AND (embedding IS NULL OR embedding_model != ?) ORDER BY id",
            (_ACTIVE, Status.QUARANTINED.value, embedding_model),
        )
        return [_row_to_memory(r) for r in await cur.fetchall()]

    async def audit(self, memory_id: int | None = None) -> list[AuditEntry]:
        sql = "SELECT id, memory_id, action, origin, at, reason, old_value, new_value FROM memory_audit"
        params: tuple[Any, ...] = ()
        if memory_id is not None:
            sql += " WHERE memory_id = ?"
            params = (memory_id,)
        cur = await self._conn.execute(sql + " ORDER BY id", params)
        return [
            AuditEntry(r[0], r[1], AuditAction(r[2]), r[3], r[4], r[5], r[6], r[7])
            for r in await cur.fetchall()
        ]

    async def metrics(self) -> dict[str, float]:
        cur = await self._conn.execute("SELECT name, value FROM memory_metrics")
        return {name: value for name, value in await cur.fetchall()}

    async def counts_by_status(self) -> dict[str, int]:
        cur = await self._conn.execute("SELECT status, COUNT(*) FROM memories GROUP BY status")
        counts = {s.value: 0 for s in Status}
        counts.update({status: n for status, n in await cur.fetchall()})
        return counts

    async def close(self) -> None:
        await self._db.close()


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


async def _one(conn: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> Memory | None:
    cur = await conn.execute(sql, params)
    row = await cur.fetchone()
    return _row_to_memory(row) if row else None


async def _get(conn: aiosqlite.Connection, memory_id: int) -> Memory | None:
    return await _one(conn, f"SELECT {_COLUMNS} FROM memories WHERE id = ?", (memory_id,))


async def _must_get(conn: aiosqlite.Connection, memory_id: int) -> Memory:
    row = await _get(conn, memory_id)
    assert row is not None, f"memory #{memory_id} vanished inside its own transaction"
    return row


async def _supersede(
    conn: aiosqlite.Connection, old: Memory, new_id: int, draft: MemoryDraft, now: float
) -> None:
    await conn.execute(
        "UPDATE memories SET status = ?, superseded_by = ?, updated_at = ?, embedding = NULL WHERE id = ?",
        (Status.SUPERSEDED.value, new_id, now, old.id),
    )
    await _audit(
        conn,
        old.id,
        AuditAction.SUPERSEDE,
        draft.origin,
        now,
        f"superseded by #{new_id}",
        old.value,
        draft.value,
    )


async def _audit(
    conn: aiosqlite.Connection,
    memory_id: int,
    action: AuditAction,
    origin: Origin | str,
    at: float,
    reason: str,
    old_value: str | None,
    new_value: str | None,
) -> None:
    await conn.execute(
        "INSERT INTO memory_audit (memory_id, action, origin, at, reason, old_value, new_value)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (memory_id, action.value, str(origin), at, reason, old_value, new_value),
    )


async def _generation(conn: aiosqlite.Connection) -> int:
    cur = await conn.execute("SELECT value FROM memory_meta WHERE name = 'generation'")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _bump(conn: aiosqlite.Connection) -> int:
    cur = await conn.execute(
        "UPDATE memory_meta SET value = value + 1 WHERE name = 'generation' RETURNING value"
    )
    row = await cur.fetchone()
    assert row is not None, "memory_meta lost its generation row"
    return int(row[0])


async def _add_metrics(conn: aiosqlite.Connection, deltas: Mapping[str, float]) -> None:
    await conn.executemany(
        "INSERT INTO memory_metrics (name, value) VALUES (?, ?)"
        " ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
        list(deltas.items()),
    )
