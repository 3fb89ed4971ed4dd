"""``qwenmem memory migrate --to postgres``: copy a SQLite memory into the server.

Idempotent by ``(source, source_id)``, one transaction under the generation lock;
other processes' caches follow by NOTIFY.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

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
    conflicts: list[str] = field(default_factory=list)  # keys active on both sides

    def to_text(self) -> str:
        text = f"copied {self.memories} memories and {self.audit} audit entries ({self.already} already copied)"
        if self.conflicts:
            text += f"; {len(self.conflicts)} keys were active on both sides, the newer value kept"
        return text


def sqlite_source(db_file: Path) -> str:
    """Names a SQLite memory for idempotent migration: this machine and that file."""
    return f"sqlite:{socket.gethostname()}:{db_file.resolve()}"


async def migrate_from_sqlite(
    db: Database, store: PostgresMemoryStore, *, source: str
) -> MigrationReport:
    """Copy every memory row (with its vector) and audit entry of ``db`` into ``store``.

    Idempotent: rows and audit entries carry ``(source, source_id)`` under a unique
    index, so a second run copies only what is new. One transaction, holding the
    generation lock; other processes' caches follow by NOTIFY. A key active on both
    sides keeps the newer value active and records the other as superseded (audited).
    """
    rows = await db.fetchall(
        "SELECT id, user, scope, category, key, value, origin, status, flags, created_at, updated_at,"
        " expires_at, last_recalled_at, recall_count, superseded_by, content_hash, embedding_model, embedding"
        " FROM memories ORDER BY id"
    )
    audit = await db.fetchall(
        AUDIT_SELECT + " ORDER BY id"
    )
    metrics = {
        r[0]: float(r[1]) for r in await db.fetchall("SELECT name, value FROM memory_metrics")
    }
    report = MigrationReport()

    async def body(conn: asyncpg.Connection) -> None:
        steps = PgSteps(conn)
        await steps.lock()
        mapping: dict[int, int] = {
            r["source_id"]: r["id"]
            for r in await conn.fetch(
                "SELECT source_id, id FROM memories WHERE source = $1", source
            )
        }
        report.already = len(mapping)
        new_rows = [r for r in rows if r[0] not in mapping]
        now = max((float(r[10]) for r in rows), default=0.0)
        for r in new_rows:
            status = r[7]
            fields = [
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                status,
                json.loads(r[8]),
                r[9],
                r[10],
                r[11],
                r[12],
                r[13],
                r[15],
                r[16],
                r[17],
                source,
                r[0],
            ]
            insert = (
                "INSERT INTO memories (username, scope, category, key, value, origin, status, flags, created_at,"
                " updated_at, expires_at, last_recalled_at, recall_count, content_hash, embedding_model, embedding,"
                " source, source_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,"
                " $17, $18) RETURNING id"
            )
            existing = None
            if status == ACTIVE:
                existing = await steps.active(r[1], r[2], r[4])
            if existing is None:
                mapping[r[0]] = await conn.fetchval(insert, *fields)
            elif float(r[10]) >= existing.updated_at:
                report.conflicts.append(r[4])
                await conn.execute(
                    "UPDATE memories SET status = $1 WHERE id = $2",
                    Status.SUPERSEDED.value,
                    existing.id,
                )
                mapping[r[0]] = await conn.fetchval(insert, *fields)
                await write_plan.supersede(
                    steps, existing, mapping[r[0]], "system", r[5], float(r[10])
                )
            else:
                report.conflicts.append(r[4])
                fields[6], fields[15] = Status.SUPERSEDED.value, None
                mapping[r[0]] = new_id = await conn.fetchval(insert, *fields)
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
        report.memories = len(new_rows)
        links = [
            (mapping[r[14]], mapping[r[0]])
            for r in new_rows
            if r[14] is not None and r[14] in mapping
        ]
        if links:
            await conn.execute(
                "UPDATE memories AS m SET superseded_by = v.target FROM unnest($1::bigint[], $2::bigint[])"
                " AS v(target, id) WHERE m.id = v.id AND m.superseded_by IS NULL",
                [t for t, _ in links],
                [i for _, i in links],
            )
        done = {
            r["source_id"]
            for r in await conn.fetch(
                "SELECT source_id FROM memory_audit WHERE source = $1", source
            )
        }
        entries = [a for a in audit if a[0] not in done and a[1] in mapping]
        await conn.executemany(
            "INSERT INTO memory_audit (memory_id, action, origin, at, reason, old_value, new_value, source, source_id)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            [(mapping[a[1]], a[2], a[3], a[4], a[5], a[6], a[7], source, a[0]) for a in entries],
        )
        report.audit = len(entries)
        first = await conn.fetchval(
            "INSERT INTO memory_imports (source, first_at) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING source",
            source,
            now,
        )
        if first is not None:  # counters are cumulative: add them once per source
            await add_metric_deltas(conn, metrics)
        if report.memories:
            await bump_generation(conn)

    await store._tx(body, "memory migration")
    return report
