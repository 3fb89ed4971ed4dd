"""``write_plan``'s statements in PostgreSQL, and the row helpers every query shares.

Serialisation, as SQLite's ``BEGIN IMMEDIATE`` but no wider than a write needs: a
write takes its user's advisory lock (``lock_user``), so two processes saving the
same key queue up instead of both seeing "no active row", while other users' writes
go on beside it; anything else that changes rows (approve, forget, the expiry sweep,
a migration) takes the writers' lock exclusively (``lock_all``). The rows every
write changes — the generation and the write counters — are touched by the
transaction's last statement (``PgSteps.bump``), so they stay locked only for its
commit: generations are still handed out in commit order, one per change. A team's
store locked the generation row for a write's every round trip before, and twenty
clients queued on it. Reads take no lock. ``bump_generation`` notifies the change
channel in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from qwenmem_tui.memory import write_plan
from qwenmem_tui.memory.model import Memory, MemoryDraft, Status
from qwenmem_tui.memory.postgres.schema import CHANNEL
from qwenmem_tui.memory.store import memory_from_row

ACTIVE = Status.ACTIVE.value
# Advisory lock keys: the writers' lock (bigint, "qwnw") and the class of the per-user
# locks (int pair: this class, hashtext(user)).
WRITERS_LOCK = 0x71776E77
USER_LOCKS = 0x71776E75
COLUMNS = (
    "id, username, scope, category, key, value, origin, status, flags, created_at, updated_at,"
    " expires_at, last_recalled_at, recall_count, superseded_by, content_hash, embedding_model,"
    " restates, stated_at, valid_until"
)


def row_to_memory(row: asyncpg.Record) -> Memory:
    return memory_from_row(row, row["flags"])


async def fetch_one(conn: asyncpg.Connection, sql: str, *params: Any) -> Memory | None:
    row = await conn.fetchrow(sql, *params)
    return row_to_memory(row) if row else None


async def fetch_memory(conn: asyncpg.Connection, memory_id: int) -> Memory | None:
    return await fetch_one(conn, f"SELECT {COLUMNS} FROM memories WHERE id = $1", memory_id)


class PgSteps(write_plan.WriteSteps):
    """``write_plan``'s statements in PostgreSQL, inside ``_tx``'s transaction."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self._metrics: dict[str, float] = {}  # applied by the last statement

    async def lock(self, user: str | None = None) -> int:
        return await (lock_all(self._conn) if user is None else lock_user(self._conn, user))

    async def get(self, memory_id: int) -> Memory | None:
        return await fetch_memory(self._conn, memory_id)

    async def active(self, user: str, scope: str, category: str, key: str) -> Memory | None:
        return await fetch_one(
            self._conn,
            f"SELECT {COLUMNS} FROM memories WHERE username = $1 AND scope = $2 AND category = $3"
            " AND key = $4 AND status = $5",
            user,
            scope,
            category,
            key,
            ACTIVE,
        )

    async def active_and_twin(
        self, draft: MemoryDraft, chash: str
    ) -> tuple[Memory | None, Memory | None]:
        # One round trip answers both questions.
        candidates = [
            row_to_memory(r)
            for r in await self._conn.fetch(
                f"SELECT {COLUMNS} FROM memories WHERE username = $1 AND scope = $2 AND status = $3"
                " AND (key = $4 OR content_hash = $5) ORDER BY id",
                draft.user,
                draft.scope,
                ACTIVE,
                draft.key,
                chash,
            )
        ]
        fact = (draft.category, draft.key)
        current = next((m for m in candidates if (m.category, m.key) == fact), None)
        twin = next(
            (m for m in candidates if (m.category, m.key) != fact and m.content_hash == chash), None
        )
        return current, twin

    async def insert(self, row: write_plan.NewRow) -> Memory:
        # RETURNING the row saves reading it back: nothing later in the
        # transaction changes the new row.
        return row_to_memory(await self._conn.fetchrow(
            "INSERT INTO memories (username, scope, category, key, value, origin, status, flags,"
            " created_at, updated_at, expires_at, content_hash, embedding_model, embedding, stated_at,"
            " restates) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
            f" RETURNING {COLUMNS}",
            *row,
        ))

    async def set_status(self, memory_id: int, status: Status, now: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET status = $1, updated_at = $2 WHERE id = $3",
            status.value,
            now,
            memory_id,
        )

    async def mark_superseded(self, memory_id: int, by: int, now: float, until: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET status = $1, superseded_by = $2, updated_at = $3, valid_until = $4,"
            " embedding = NULL WHERE id = $5",
            Status.SUPERSEDED.value,
            by,
            now,
            until,
            memory_id,
        )

    async def mark_deleted(self, memory_id: int, now: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET status = $1, updated_at = $2, embedding = NULL WHERE id = $3",
            Status.DELETED.value,
            now,
            memory_id,
        )

    async def reactivate(self, memory_id: int, now: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET status = $1, superseded_by = NULL, valid_until = NULL,"
            " updated_at = $2 WHERE id = $3",
            Status.ACTIVE.value,
            now,
            memory_id,
        )

    async def set_history(
        self, memory_id: int, superseded_by: int | None, valid_until: float | None
    ) -> None:
        await self._conn.execute(
            "UPDATE memories SET superseded_by = $1, valid_until = $2 WHERE id = $3",
            superseded_by,
            valid_until,
            memory_id,
        )

    async def set_place(self, memory_id: int, category: str, scope: str, now: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET category = $1, scope = $2, updated_at = $3 WHERE id = $4",
            category,
            scope,
            now,
            memory_id,
        )

    async def touch(self, memory_id: int, now: float, expires_at: float | None) -> None:
        await self._conn.execute(
            "UPDATE memories SET updated_at = $1, expires_at = $2 WHERE id = $3",
            now,
            expires_at,
            memory_id,
        )

    async def set_restates(self, memory_id: int, restates: int | None) -> None:
        await self._conn.execute(
            "UPDATE memories SET restates = $1 WHERE id = $2", restates, memory_id
        )

    async def insert_audit(self, values: tuple[object, ...]) -> None:
        await self._conn.execute(
            "INSERT INTO memory_audit (memory_id, action, origin, at, reason, old_value, new_value)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7)",
            *values,
        )

    async def add_metrics(self, deltas: Mapping[str, float]) -> None:
        # Every write counts into the same rows: held from here to the commit they
        # would queue the team's writers; ``bump`` or ``flush`` applies them last.
        for name, value in deltas.items():
            self._metrics[name] = self._metrics.get(name, 0.0) + value

    async def bump(self) -> int:
        metrics, self._metrics = self._metrics, {}
        return await bump_generation(self._conn, metrics)

    async def flush(self) -> None:
        """Counters added after the last bump (a held write changes no generation)."""
        metrics, self._metrics = self._metrics, {}
        await add_metric_deltas(self._conn, metrics)


async def read_generation(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT value FROM memory_meta WHERE name = 'generation'"))


async def lock_user(conn: asyncpg.Connection, user: str) -> int:
    """Serialise with the writers of ``user``'s memories and with ``lock_all``; the
    generation as this statement began."""
    return int(
        await conn.fetchval(
            "SELECT (SELECT value FROM memory_meta WHERE name = 'generation')"
            " FROM pg_advisory_xact_lock_shared($1::bigint), pg_advisory_xact_lock($2::int, hashtext($3))",
            WRITERS_LOCK,
            USER_LOCKS,
            user,
        )
    )


async def lock_all(conn: asyncpg.Connection) -> int:
    """Serialise with every other mutating transaction; the generation then."""
    await conn.execute("SELECT pg_advisory_xact_lock($1::bigint)", WRITERS_LOCK)
    return await read_generation(conn)


async def bump_generation(conn: asyncpg.Connection, metrics: Mapping[str, float] | None = None) -> int:
    """The next generation, and ``metrics`` added to the counters, in one statement."""
    names = sorted(metrics or {})
    # pg_notify is transactional: listeners hear the new generation only on commit.
    return int(
        await conn.fetchval(
            "WITH g AS (UPDATE memory_meta SET value = value + 1 WHERE name = 'generation' RETURNING value),"
            " m AS (INSERT INTO memory_metrics (name, value) SELECT * FROM unnest($2::text[], $3::float8[])"
            " ON CONFLICT (name) DO UPDATE SET value = memory_metrics.value + excluded.value)"
            " SELECT value FROM g, pg_notify($1, (SELECT value FROM g)::text)",
            CHANNEL,
            names,
            [float((metrics or {})[n]) for n in names],
        )
    )


async def add_metric_deltas(conn: asyncpg.Connection, deltas: Mapping[str, float]) -> None:
    if not deltas:
        return
    # Sorted: two transactions updating the same counters lock them in the same order.
    names = sorted(deltas)
    await conn.execute(
        "INSERT INTO memory_metrics (name, value) SELECT * FROM unnest($1::text[], $2::float8[])"
        " ON CONFLICT (name) DO UPDATE SET value = memory_metrics.value + excluded.value",
        names,
        [float(deltas[n]) for n in names],
    )
