"""``qwenmem memory export --salvage``: every memory still readable in a damaged database.

SQLite fails a whole statement when it meets a damaged page, so the plain export (one
``SELECT``) of a database with a single bad page exports nothing, although almost every
row is intact. Here the ``memories`` table is read in rowid order; when the scan meets
damage, single-row lookups step past it one id at a time (a lookup only reads the pages
on the path to its row) and the scan resumes at the first id that reads again. Every
row on a readable page comes back; the ids in damaged pages are counted.

The file is opened read-only (``mode=ro``): a damaged database is evidence, never
repaired or rewritten here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from qwenmem_tui.memory.model import AuditEntry, export_line
from qwenmem_tui.memory.sqlite_store import (
    BASE_COLUMNS,
    MEMORY_COLUMNS,
    row_to_memory,
)
from qwenmem_tui.memory.store import AUDIT_SELECT, audit_from_row

PROBE_WITHOUT_BOUND = 100_000
"""How far past the last readable id lookups go when neither ``max(id)`` nor the
AUTOINCREMENT counter can be read: a damaged stretch of that many ids ends the salvage."""

_SCAN = "SELECT {columns} FROM memories WHERE id > ? ORDER BY id"
_ONE = "SELECT {columns} FROM memories WHERE id = ?"


@dataclass
class SalvageReport:
    """What a salvage read: export lines of one user's memories, and what it could not."""

    lines: list[str] = field(default_factory=list)
    unreadable_ids: int = 0
    """Ids whose lookup failed: rows on damaged pages (and deleted ids among them)."""
    undecodable: int = 0
    """Rows read whose columns are not a memory any more (a damaged value)."""
    unreadable_file: str | None = None
    """Why nothing could be read at all (a damaged header or schema), if so."""

    def summary(self, where: str) -> str:
        """The one line the command prints."""
        if self.unreadable_file is not None:
            return f"nothing could be salvaged: {self.unreadable_file}"
        lost = []
        if self.unreadable_ids:
            lost.append(f"{self.unreadable_ids} ids on damaged pages could not be read")
        if self.undecodable:
            lost.append(f"{self.undecodable} damaged rows skipped")
        tail = f" ({'; '.join(lost)})" if lost else " (no damaged rows met)"
        return f"salvaged {len(self.lines)} memories to {where}{tail}"


def salvage(db_file: Path, *, user: str) -> SalvageReport:
    """Read every readable memory of ``user`` from ``db_file`` (blocking: run in a thread)."""
    report = SalvageReport()
    try:
        conn = sqlite3.connect(f"file:{quote(str(db_file))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        report.unreadable_file = f"cannot open {db_file}: {exc}"
        return report
    try:
        try:
            conn.execute("SELECT 1 FROM memories LIMIT 0")
        except sqlite3.DatabaseError as exc:  # the header or the schema page is damaged
            report.unreadable_file = f"{db_file} has no readable memories table ({exc})"
            return report

        def keep(row: Sequence[object]) -> None:
            try:
                memory = row_to_memory(row)
            except (ValueError, TypeError, KeyError):  # JSON, enum or shape of a bad row
                report.undecodable += 1
                return
            if memory.user == user:
                report.lines.append(export_line(memory, audit=trail.get(memory.id, ())))

        trail = _audit_trail(conn)
        _read_rows(conn, _upper_bound(conn), keep, report, _columns(conn))
    finally:
        conn.close()
    return report


def _audit_trail(conn: sqlite3.Connection) -> dict[int, list[AuditEntry]]:
    """Every memory's audit trail, if the audit table still reads whole (best effort:
    the rows matter more than their story)."""
    trail: dict[int, list[AuditEntry]] = {}
    try:
        for row in conn.execute(AUDIT_SELECT + " ORDER BY id"):
            entry = audit_from_row(row)
            trail.setdefault(entry.memory_id, []).append(entry)
    except (sqlite3.DatabaseError, ValueError):
        return {}
    return trail


def _columns(conn: sqlite3.Connection) -> str:
    """Every column this database's version has: its facts' times when it has them."""
    try:
        conn.execute("SELECT restates, stated_at, valid_until FROM memories LIMIT 0")
    except sqlite3.DatabaseError:
        return BASE_COLUMNS
    return MEMORY_COLUMNS


def _read_rows(
    conn: sqlite3.Connection,
    bound: int | None,
    keep: Callable[[Sequence[object]], None],
    report: SalvageReport,
    columns: str,
) -> None:
    """Scan in id order; at damage, look ids up one by one until one reads, then scan on.

    Strictly advancing: each round starts past the id the previous one ended at.
    """
    last = 0  # the scan reads ids above this
    while True:
        try:
            for row in conn.execute(_SCAN.format(columns=columns), (last,)):
                last = row[0]
                keep(row)
            return  # the scan reached the end of the table
        except sqlite3.DatabaseError:
            pass  # a damaged page right after `last`
        limit = bound if bound is not None else last + PROBE_WITHOUT_BOUND
        probe = last + 1
        while probe <= limit:
            try:
                row = conn.execute(_ONE.format(columns=columns), (probe,)).fetchone()
            except sqlite3.DatabaseError:
                report.unreadable_ids += 1
                probe += 1
                continue
            if row is not None:
                keep(row)
            break
        else:
            return  # damage up to the last id there is
        last = probe


def _upper_bound(conn: sqlite3.Connection) -> int | None:
    """The highest id the table can hold, from whichever of two sources still reads."""
    bounds = []
    for sql in (
        "SELECT max(id) FROM memories",
        "SELECT seq FROM sqlite_sequence WHERE name = 'memories'",
    ):
        try:
            row = conn.execute(sql).fetchone()
        except sqlite3.DatabaseError:
            continue
        if row is not None and isinstance(row[0], int):
            bounds.append(row[0])
    return max(bounds) if bounds else None
