"""``qwenmem memory migrate --to postgres``: copy a SQLite memory into the server.

Idempotent by ``(source, source_id)``, one transaction under the generation lock;
other processes' caches follow by NOTIFY.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg

from qwenmem_tui.memory import write_plan
from qwenmem_tui.memory.model import AuditAction, Status
from qwenmem_tui.memory.postgres.steps import (
    ACTIVE,
    PgSteps,
    add_metric_deltas,
    bump_generation,
)
from qwenmem_tui.memory.postgres.store import PostgresMemoryStore
from qwenmem_tui.memory.store import AUDIT_SELECT

if TYPE_CHECKING:
    from qwenmem_tui.storage.database import Database


@dataclass
class MigrationReport:
    memories: int = 0  # rows copied this run
    audit: int = 0  # audit entries copied this run
    already: int = 0  # rows a previous run had copied
    conflicts: list[str] = field(default_factory=list)  # facts (category/key) active on both sides

    def to_text(self) -> str:
        text = f"copied {self.memories} memories and {self.audit} audit entries ({self.already} already copied)"
        if self.conflicts:
            text += f"; {len(self.conflicts)} keys were active on both sides, the newer value kept"
        return text


def sqlite_source(db_file: Path) -> str:
    """Names a SQLite memory for idempotent migration: this machine and that file."""
    return f"sqlite:{socket.gethostname()}:{db_file.resolve()}"


_SOURCE_COLUMNS = (
    "id, user, scope, category, key, value, origin, status, flags, created_at, updated_at,"
    " expires_at, last_recalled_at, recall_count, superseded_by, content_hash, embedding_model, embedding,"
    " restates, stated_at, valid_until"
)
"""The SQLite row as read; `_Migration` addresses its columns by these positions."""
_INSERT = (
    "INSERT INTO memories (username, scope, category, key, value, origin, status, flags, created_at,"
    " updated_at, expires_at, last_recalled_at, recall_count, content_hash, embedding_model, embedding,"
    " source, source_id, stated_at, valid_until) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,"
    " $12, $13, $14, $15, $16, $17, $18, $19, $20) RETURNING id"
)


async def migrate_from_sqlite(
    db: Database, store: PostgresMemoryStore, *, source: str
) -> MigrationReport:
    """Copy every memory row (with its vector) and audit entry of ``db`` into ``store``.

    Idempotent: rows and audit entries carry ``(source, source_id)`` under a unique
    index, so a second run copies only what is new. One transaction, holding the
    generation lock; other processes' caches follow by NOTIFY. A key active on both
    sides keeps the newer value active and records the other as superseded (audited).
    """
    migration = _Migration(
        source=source,
        rows=await db.fetchall(f"SELECT {_SOURCE_COLUMNS} FROM memories ORDER BY id"),
        audit=await db.fetchall(AUDIT_SELECT + " ORDER BY id"),
        metrics={
            r[0]: float(r[1]) for r in await db.fetchall("SELECT name, value FROM memory_metrics")
        },
    )
    await store._tx(migration.run, "memory migration")
    return migration.report


@dataclass
class _Migration:
    """One run's copy, step by step, inside the store's transaction (``run``)."""

    source: str
    rows: list[Any]
    audit: list[Any]
    metrics: dict[str, float]
    report: MigrationReport = field(default_factory=MigrationReport)
    mapping: dict[int, int] = field(default_factory=dict)
    """SQLite id -> PostgreSQL id, of this run's rows and a previous run's."""

    async def run(self, conn: asyncpg.Connection) -> None:
        steps = PgSteps(conn)
        await steps.lock()
        self.mapping = {
            r["source_id"]: r["id"]
            for r in await conn.fetch(
                "SELECT source_id, id FROM memories WHERE source = $1", self.source
            )
        }
        self.report.already = len(self.mapping)
        new_rows = [r for r in self.rows if r[0] not in self.mapping]
        now = max((float(r[10]) for r in self.rows), default=0.0)
        for row in new_rows:
            await self._copy_row(conn, steps, row, now)
        self.report.memories = len(new_rows)
        await self._link_supersessions(conn, new_rows)
        await self._link_restatements(conn, new_rows)
        await self._copy_audit(conn)
        first = await conn.fetchval(
            "INSERT INTO memory_imports (source, first_at) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING source",
            self.source,
            now,
        )
        if first is not None:  # counters are cumulative: add them once per source
            await add_metric_deltas(conn, self.metrics)
        if self.report.memories:
            await bump_generation(conn)

    def _fields(self, r: Any) -> list[Any]:
        """The INSERT's values for SQLite row `r` (positions of `_SOURCE_COLUMNS`)."""
        return [
            r[1], r[2], r[3], r[4], r[5], r[6], r[7], json.loads(r[8]), r[9], r[10],
            r[11], r[12], r[13], r[15], r[16], r[17], self.source, r[0], r[19] or r[9], r[20],
        ]  # fmt: skip

    async def _copy_row(
        self, conn: asyncpg.Connection, steps: PgSteps, r: Any, now: float
    ) -> None:
        """Insert one row; an active key already active here keeps the newer value."""
        fields = self._fields(r)
        existing = await steps.active(r[1], r[2], r[3], r[4]) if r[7] == ACTIVE else None
        if existing is None:
            self.mapping[r[0]] = await conn.fetchval(_INSERT, *fields)
        elif float(r[10]) >= existing.updated_at:
            self.report.conflicts.append(f"{r[3]}/{r[4]}")
            await conn.execute(
                "UPDATE memories SET status = $1 WHERE id = $2",
                Status.SUPERSEDED.value,
                existing.id,
            )
            self.mapping[r[0]] = await conn.fetchval(_INSERT, *fields)
            await write_plan.supersede(
                steps, existing, self.mapping[r[0]], "system", r[5], float(r[10])
            )
        else:
            self.report.conflicts.append(f"{r[3]}/{r[4]}")
            fields[6], fields[15] = Status.SUPERSEDED.value, None
            fields[19] = max(fields[18], existing.stated_at)  # held until the kept one was said
            self.mapping[r[0]] = new_id = await conn.fetchval(_INSERT, *fields)
            await conn.execute(
                "UPDATE memories SET superseded_by = $1 WHERE id = $2", existing.id, new_id
            )
            await steps.audit(
                new_id,
                AuditAction.SUPERSEDE,
                "system",
                now,
                f"migrate: #{existing.id} was already active for this key",
                r[5],
                existing.value,
            )

    async def _link_supersessions(self, conn: asyncpg.Connection, new_rows: list[Any]) -> None:
        """The copied rows' superseded_by, now that every id has its new number."""
        links = [
            (self.mapping[r[14]], self.mapping[r[0]])
            for r in new_rows
            if r[14] is not None and r[14] in self.mapping
        ]
        if links:
            await conn.execute(
                "UPDATE memories AS m SET superseded_by = v.target FROM unnest($1::bigint[], $2::bigint[])"
                " AS v(target, id) WHERE m.id = v.id AND m.superseded_by IS NULL",
                [t for t, _ in links],
                [i for _, i in links],
            )

    async def _link_restatements(self, conn: asyncpg.Connection, new_rows: list[Any]) -> None:
        """The copied rows' undecided ``restates`` links, in the new ids."""
        links = [
            (self.mapping[r[18]], self.mapping[r[0]])
            for r in new_rows
            if r[18] is not None and r[18] in self.mapping
        ]
        if links:
            await conn.execute(
                "UPDATE memories AS m SET restates = v.target FROM unnest($1::bigint[], $2::bigint[])"
                " AS v(target, id) WHERE m.id = v.id AND m.restates IS NULL",
                [t for t, _ in links],
                [i for _, i in links],
            )

    async def _copy_audit(self, conn: asyncpg.Connection) -> None:
        """The audit entries of copied rows that an earlier run did not copy."""
        done = {
            r["source_id"]
            for r in await conn.fetch(
                "SELECT source_id FROM memory_audit WHERE source = $1", self.source
            )
        }
        entries = [a for a in self.audit if a[0] not in done and a[1] in self.mapping]
        await conn.executemany(
            "INSERT INTO memory_audit (memory_id, action, origin, at, reason, old_value, new_value, source, source_id)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            [
                (self.mapping[a[1]], a[2], a[3], a[4], a[5], a[6], a[7], self.source, a[0])
                for a in entries
            ],
        )
        self.report.audit = len(entries)
