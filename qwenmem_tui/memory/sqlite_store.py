"""The default MemoryStore: the ``memories`` tables of qwenmem.db (WAL, aiosqlite).

Writes run as ``BEGIN IMMEDIATE`` transactions (``Database.write``): the write lock is taken before the
supersede check reads the key's active row, so two processes saving the same key
serialise instead of both seeing "no active row" (the partial unique index would
then reject the second one; it is the backstop, not the mechanism).
"""

from __future__ import annotations

import builtins

import json
import re
import sqlite3
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import aiosqlite

from qwenmem_tui.memory import write_plan
from qwenmem_tui.memory.lexical import rank_newest
from qwenmem_tui.memory.model import (
    FLAG_DIALOGUE,
    FLAG_FROM_FILE,
    AuditAction,
    AuditEntry,
    Memory,
    MemoryDraft,
    Origin,
    Status,
)
from qwenmem_tui.memory.store import (
    AUDIT_SELECT,
    AllowedIds,
    NewestMatches,
    RowQuery,
    lexical_cap,
    audit_from_row,
    memory_from_row,
    no_vectors,
    status_counts,
    vector_blob,
)

if TYPE_CHECKING:  # numpy loads where vectors are handled: `memory list` never needs it
    import numpy as np

    from qwenmem_tui.storage.database import Database

T = TypeVar("T")

BASE_COLUMNS = (
    "id, user, scope, category, key, value, origin, status, flags, created_at, updated_at, "
    "expires_at, last_recalled_at, recall_count, superseded_by, content_hash, embedding_model"
)
"""The columns every memory database has had (salvage reads old ones too)."""
MEMORY_COLUMNS = BASE_COLUMNS + ", restates, stated_at, valid_until"
_ACTIVE = Status.ACTIVE.value
MODEL_WRITTEN = f"(origin != 'user' OR instr(flags, '\"{FLAG_FROM_FILE}\"') > 0)"
"""Rows a model wrote or read from a file (store.model_written), in SQL."""


def _by_place(query: RowQuery) -> bool:
    """Whether ``rows`` reads ``query`` place by place: one user's rows of given scopes,
    in id order, a page of them (statuses not given: each status in turn)."""
    return (
        query.user is not None
        and query.scopes is not None
        and 0 < len(query.scopes) * len(query.statuses or Status) <= 16
        and query.limit is not None
        and not query.oldest_first
        and not query.linked
    )


def _of_user(user: str | None) -> tuple[str, tuple[str, ...]]:
    """The SQL condition and parameter that keep one user's rows (none: every user's)."""
    return ("", ()) if user is None else (" AND user = ?", (user,))


def _chunks(values: builtins.list[int], size: int) -> Iterable[builtins.list[int]]:
    """``values`` in lists of ``size`` (SQLite caps a statement's bound parameters)."""
    return (values[start : start + size] for start in range(0, len(values), size))


def _fold(text: str | None) -> str:
    return "" if text is None else text.casefold()


def row_to_memory(row: Sequence[Any]) -> Memory:
    return memory_from_row(row, json.loads(row[8]))


class SqliteMemoryStore(write_plan.PlannedStore):
    def __init__(self, db: Database) -> None:
        self._db = db
        self._folding = False  # qm_fold registered on the connection

    @property
    def _conn(self) -> aiosqlite.Connection:
        return self._db.conn

    async def _tx(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        # Database.write_now runs fn inside BEGIN IMMEDIATE ... COMMIT, serialised with
        # every other writer on this connection and retried while another process
        # holds the lock; fn only touches the database, so a retry is safe. Its
        # statements are answered at once on the connection's thread (``_Immediate``):
        # the whole transaction is one hop there and back, not one per statement.
        return await self._db.write_now(lambda raw: _drive(fn(_Immediate(raw))))

    # writes ------------------------------------------------------------------------
    async def _in_transaction(
        self, plan: Callable[[write_plan.WriteSteps], Awaitable[T]], what: str
    ) -> T:
        return await self._tx(lambda conn: plan(_Steps(conn)))

    async def record_recall(
        self, ids: Sequence[int], *, now: float, metrics: Mapping[str, float]
    ) -> None:
        async def body(conn: Conn) -> None:
            if ids:
                await conn.executemany(
                    "UPDATE memories SET last_recalled_at = ?, recall_count = recall_count + 1 WHERE id = ?",
                    [(now, i) for i in ids],
                )
            await _add_metrics(conn, metrics)

        await self._tx(body)

    async def sweep_expired(self, *, now: float) -> list[int]:
        async def body(conn: Conn) -> list[int]:
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
            steps = _Steps(conn)
            for memory_id, value in rows:
                await steps.audit(
                    memory_id, AuditAction.EXPIRE, "system", now, "ttl elapsed", value, None
                )
            await _bump(conn)
            return [r[0] for r in rows]

        return await self._tx(body)

    async def set_vectors(
        self, ids: Sequence[int], vectors: np.ndarray, embedding_model: str
    ) -> None:
        async def body(conn: Conn) -> None:
            await conn.executemany(
                # Only rows that can still be recalled: a row superseded while a batch
                # was being embedded keeps no vector (it left every index).
                "UPDATE memories SET embedding = ?, embedding_model = ? WHERE id = ?"
                " AND status IN (?, ?)",
                [
                    (vector_blob(v), embedding_model, i, _ACTIVE, Status.QUARANTINED.value)
                    for i, v in zip(ids, vectors, strict=True)
                ],
            )
            await _bump(conn)

        await self._tx(body)

    async def add_metrics(self, deltas: Mapping[str, float]) -> None:
        async def body(conn: Conn) -> None:
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
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id IN ({marks})", list(ids)
        )
        by_id = {m.id: m for m in map(row_to_memory, await cur.fetchall())}
        return [by_id[i] for i in ids if i in by_id]

    async def list(
        self,
        *,
        user: str | None = None,
        scopes: Collection[str] | None = None,
        statuses: Collection[Status] | None = None,
        key_prefix: str | None = None,
        linked: bool = False,
    ) -> builtins.list[Memory]:
        where: builtins.list[str] = []
        params: builtins.list[object] = []
        if user is not None:
            where.append("user = ?")
            params.append(user)
        if scopes is not None:
            where.append(f"scope IN ({','.join('?' * len(scopes))})")
            params.extend(scopes)
        if statuses is not None:
            # One status as an equality, so a partial index on it (migration 11) serves.
            where.append("status = ?" if len(statuses) == 1 else f"status IN ({','.join('?' * len(statuses))})")
            params.extend(s.value for s in statuses)
        if key_prefix is not None:  # a range: the active keys index (migration 11) serves it
            where.append("key >= ? AND key < ?")
            params.extend((key_prefix, key_prefix + "\U0010ffff"))
        if linked:
            where.append("restates IS NOT NULL")
        sql = f"SELECT {MEMORY_COLUMNS} FROM memories"
        if linked:
            # The open links are few: read through their index. Without this SQLite
            # picks the (user, status) index and reads every active row (recall asks
            # at every store generation, ``Recaller._open_links``).
            sql += " INDEXED BY memories_by_restated"
        if where:
            sql += " WHERE " + " AND ".join(where)
        cur = await self._conn.execute(sql + " ORDER BY id", params)
        return [row_to_memory(r) for r in await cur.fetchall()]

    async def rows(self, query: RowQuery) -> builtins.list[Memory]:
        sql, params = await self._rows_sql(query)
        return [row_to_memory(r) for r in await self._conn.execute_fetchall(sql, params)]

    async def _rows_sql(self, query: RowQuery) -> tuple[str, builtins.list[object]]:
        """``rows``' query. A page of one user's places (statuses x scopes, as /memory
        asks) in id order is the first rows of each place's range of the place index,
        merged: never every matching row read and sorted to keep the first few."""
        if not _by_place(query):
            where, params = await self._row_filter(query)
            order = " ORDER BY created_at, id" if query.oldest_first else " ORDER BY id"
            if query.limit is not None:
                order += " LIMIT ?"
                params.append(query.limit)
            return f"SELECT {MEMORY_COLUMNS} FROM memories{where}{order}", params
        assert query.scopes is not None and query.limit is not None
        statuses = list(Status) if query.statuses is None else [Status(s) for s in query.statuses]
        parts: builtins.list[str] = []
        params = []
        for status in statuses:
            for scope in query.scopes:
                where, more = await self._row_filter(replace(query, statuses=[status], scopes=[scope]))
                parts.append(
                    f"SELECT * FROM (SELECT {MEMORY_COLUMNS} FROM memories"
                    f" INDEXED BY memories_by_place{where} ORDER BY id LIMIT ?)"
                )
                params += [*more, query.limit]
        return " UNION ALL ".join(parts) + " ORDER BY 1 LIMIT ?", [*params, query.limit]

    async def count(self, query: RowQuery) -> int:
        where, params = await self._row_filter(query)
        rows = await self._conn.execute_fetchall(f"SELECT count(*) FROM memories{where}", params)
        return int(next(iter(rows))[0])

    async def _row_filter(self, q: RowQuery) -> tuple[str, builtins.list[object]]:
        """``q``'s filters as a WHERE clause and its parameters."""
        where: builtins.list[str] = []
        params: builtins.list[object] = []

        def cond(sql: str, *values: object) -> None:
            where.append(sql)
            params.extend(values)

        def marks(values: Collection[object]) -> str:
            return ",".join("?" * len(values))

        # A fact's links name a few rows: they must be looked up by them, not by the
        # user's index (unary + keeps SQLite from reading every row of the user).
        plus = "+" if q.linked else ""
        if q.user is not None:
            cond(f"{plus}user = ?", q.user)
        if q.scopes is not None:
            cond(f"{plus}scope IN ({marks(q.scopes)})", *q.scopes)
        if q.statuses is not None:
            cond(f"{plus}status IN ({marks(q.statuses)})", *(Status(s).value for s in q.statuses))
        if q.key is not None:
            cond("key = ?", q.key)
        if q.after is not None:
            cond("id > ?", q.after)
        if q.exclude:
            cond(f"id NOT IN ({marks(q.exclude)})", *q.exclude)
        if q.linked:
            ids = [int(i) for i in q.linked]
            m = marks(ids)
            cond(f"(id IN ({m}) OR superseded_by IN ({m}) OR restates IN ({m}))", *ids, *ids, *ids)
        if q.created_after is not None:
            cond("created_at > ?", q.created_after)
        if q.created_until is not None:
            cond("created_at <= ?", q.created_until)
        if q.model_written is not None:
            # As written in migration 8's partial index, which serves it only then.
            cond(("" if q.model_written else "NOT ") + MODEL_WRITTEN)
        if q.words:
            await self._fold_function()
            for word in q.words:
                cond("instr(qm_fold(key || ' ' || value || ' ' || category || ' ' || status), ?) > 0", word)
        return (" WHERE " + " AND ".join(where) if where else ""), params

    async def _fold_function(self) -> None:
        """Python's casefold in SQL (SQLite's lower() folds ASCII only): the filter
        matches as ``memory_matches`` does, in every script."""
        if not self._folding:
            await self._conn.create_function("qm_fold", 1, _fold, deterministic=True)
            self._folding = True

    async def allowed_ids(self, *, user: str, scopes: Collection[str], now: float) -> AllowedIds:
        import numpy as np  # only recall asks, and recall has numpy loaded anyway

        generation = await self.generation()
        # One row with the ids joined: a hundred thousand Row objects through the
        # aiosqlite thread cost ~25x more than parsing one string.
        cur = await self._conn.execute(
            "SELECT group_concat(id), min(expires_at) FROM ("
            # Its covering index: the place index (migration 10) has the ids in order
            # but not the expiry, and read each row for it (300-700 ms at 100k).
            f" SELECT id, expires_at FROM memories INDEXED BY memories_by_status WHERE status = ? AND user = ?"
            f" AND scope IN ({','.join('?' * len(scopes))}) AND (expires_at IS NULL OR expires_at > ?)"
            " ORDER BY id)",
            (_ACTIVE, user, *scopes, now),
        )
        row = await cur.fetchone()
        joined, valid_until = (row[0], row[1]) if row else (None, None)
        ids = np.array(joined.split(","), dtype=np.int64) if joined else np.zeros(0, dtype=np.int64)
        return AllowedIds(ids=ids, generation=generation, valid_until=valid_until)

    async def _lexical_search(
        self, terms: Sequence[str], user: str, scopes: Collection[str], now: float,
        exclude: Collection[int], limit: int,
    ) -> builtins.list[tuple[int, float]]:
        # FTS5 ranks a match only after scoring every match (8k rows for a common name
        # in a store of years: 40-80 ms, before the hard filters). So each word brings
        # its newest matches that pass the filters, at most a cap (a rarer word all of
        # its matches), and bm25 ranks that bounded set (lexical.bm25_rank).
        # Terms are letters and digits only (lexical.query_terms): quoting each makes
        # it a plain phrase, never FTS5 syntax.
        cap = lexical_cap(len(terms), limit)
        # One thread hop for every word: this runs on every recall.
        rows = await self._newest_matches({t: cap for t in terms}, user, scopes, now, exclude)
        matches: dict[str, builtins.list[tuple[int, str, str]]] = {t: [] for t in terms}
        top = 0
        for index, memory_id, key, value, last in rows:
            matches[terms[index]].append((memory_id, key, value))
            top = max(top, int(last))
        return rank_newest(matches, cap=cap, top=top, limit=limit)

    async def _newest_matches(
        self, caps: Mapping[str, int], user: str, scopes: Collection[str], now: float,
        exclude: Collection[int] = (),
    ) -> Iterable[Any]:
        """(term's index in ``caps``, id, key, value, max id) of each term's newest
        ``caps[term]`` matches passing the hard filters, newest first, in one query."""
        excluded = [int(i) for i in exclude]
        one = (
            "SELECT * FROM (SELECT ? AS term, f.rowid, m.key, m.value,"
            " (SELECT max(id) FROM memories) FROM memories_fts AS f"
            " JOIN memories AS m ON m.id = f.rowid WHERE memories_fts MATCH ? AND m.status = ?"
            f" AND m.user = ? AND m.scope IN ({','.join('?' * len(scopes))})"
            " AND (m.expires_at IS NULL OR m.expires_at > ?)"
            + (f" AND m.id NOT IN ({','.join('?' * len(excluded))})" if excluded else "")
            + " ORDER BY f.rowid DESC LIMIT ?)"
        )
        params: builtins.list[object] = []
        for i, (term, cap) in enumerate(caps.items()):
            params += [i, f'"{term}"', _ACTIVE, user, *scopes, now, *excluded, cap]
        return await self._conn.execute_fetchall(" UNION ALL ".join([one] * len(caps)), params)

    async def newest_matches(
        self, caps: Mapping[str, int], *, user: str, scope: str, now: float
    ) -> NewestMatches | None:
        if not caps:
            return NewestMatches({}, await self._max_id())
        found: dict[str, builtins.list[tuple[int, str, str]]] = {t: [] for t in caps}
        terms, top = list(caps), 0
        for index, memory_id, key, value, last in await self._newest_matches(caps, user, [scope], now):
            found[terms[index]].append((memory_id, key, value))
            top = max(top, int(last))
        return NewestMatches(found, top or await self._max_id())

    async def _max_id(self) -> int:
        rows = await self._conn.execute_fetchall("SELECT max(id) FROM memories")
        return int(next(iter(rows))[0] or 0)

    async def text_matches(
        self, texts: Sequence[tuple[str, str]], terms: Collection[str]
    ) -> dict[str, set[int]] | None:
        # A private scratch FTS5 table with the index's own tokenizer: which of
        # ``texts`` each term matches is then exactly what memories_fts would say.
        if not texts or not terms:
            return {t: set() for t in terms}

        def match(conn: sqlite3.Connection) -> dict[str, set[int]]:
            [(sql,)] = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'")
            tokenize = re.search(r"tokenize\s*=\s*'[^']*'", sql)
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.qm_batch_fts USING fts5("
                f"key, value{', ' + tokenize.group(0) if tokenize else ''})"
            )
            conn.execute("DELETE FROM temp.qm_batch_fts")
            conn.executemany(
                "INSERT INTO temp.qm_batch_fts (rowid, key, value) VALUES (?, ?, ?)",
                [(i, k, v) for i, (k, v) in enumerate(texts)],
            )
            out: dict[str, set[int]] = {}
            for term in terms:
                rows = conn.execute(
                    "SELECT rowid FROM temp.qm_batch_fts WHERE qm_batch_fts MATCH ?", (f'"{term}"',)
                )
                out[term] = {int(r[0]) for r in rows}
            conn.execute("DELETE FROM temp.qm_batch_fts")
            return out

        return await self._db.on_thread(match)

    async def generation(self) -> int:
        return await _generation(self._conn)

    async def vector_ids(self, embedding_model: str, *, user: str | None = None) -> np.ndarray:
        import numpy as np

        mine, params = _of_user(user)
        # `(embedding IS NULL) = 0` as migration 9's index says it: read from the
        # index, not from every row's vector.
        cur = await self._conn.execute(
            "SELECT id FROM memories WHERE status = ? AND embedding_model = ?"
            f" AND (embedding IS NULL) = 0{mine} ORDER BY id",
            (_ACTIVE, embedding_model, *params),
        )
        rows = list(await cur.fetchall())
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    async def vectors(
        self, embedding_model: str, ids: Sequence[int] | None = None, *, user: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        mine, of_user = _of_user(user)
        # Given ids, SQLite must look each up by rowid: a term on status or user let it
        # pick their index and read every active row (80 ms at 100k, per recall).
        plus = "" if ids is None else "+"
        sql = (
            "SELECT id, embedding FROM memories"
            f" WHERE {plus}status = ? AND embedding_model = ? AND embedding IS NOT NULL"
            + mine.replace(" user", f" {plus}user")
        )
        return await self._vector_rows(sql, [_ACTIVE, embedding_model, *of_user], ids, "id")

    async def _vector_rows(
        self, sql: str, params: builtins.list[object], ids: Sequence[int] | None, id_column: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of ``sql``'s (id, float32 blob) rows, of ``ids`` only when
        given: SQLite caps bound parameters, so a long list goes in chunks."""
        rows: builtins.list[Any] = []
        for chunk in [None] if ids is None else _chunks([int(i) for i in ids], 500):
            where = "" if chunk is None else f" AND {id_column} IN ({','.join('?' * len(chunk))})"
            cur = await self._conn.execute(sql + where + f" ORDER BY {id_column}", params + (chunk or []))
            rows.extend(await cur.fetchall())
        if not rows:
            return no_vectors()
        import numpy as np

        out_ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
        return out_ids, vectors.astype(np.float32, copy=False)

    async def missing_vectors(self, embedding_model: str, *, user: str | None = None) -> builtins.list[Memory]:
        mine, params = _of_user(user)
        # Found in migration 9's index (this runs at every start), then read by id.
        cur = await self._conn.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id IN (SELECT id FROM memories"
            " WHERE status IN (?, ?) AND NOT (embedding_model IS ? AND (embedding IS NULL) = 0)"
            f"{mine}) ORDER BY id",
            (_ACTIVE, Status.QUARANTINED.value, embedding_model, *params),
        )
        return [row_to_memory(r) for r in await cur.fetchall()]

    # a dialogue turn's second vector (memory/turns.py) ---------------------------------
    def keeps_turn_vectors(self) -> bool:
        return True

    async def turn_vector_ids(self, embedding_model: str, *, user: str | None = None) -> np.ndarray:
        import numpy as np

        mine, params = _of_user(user)
        cur = await self._conn.execute(
            "SELECT t.id FROM memory_turn_vectors AS t JOIN memories AS m ON m.id = t.id"
            f" WHERE t.embedding_model = ? AND m.status = ?{mine.replace(' user', ' m.user')}"
            " ORDER BY t.id",
            (embedding_model, _ACTIVE, *params),
        )
        rows = list(await cur.fetchall())
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    async def turn_vectors(
        self, embedding_model: str, ids: Sequence[int] | None = None, *, user: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        mine, of_user = _of_user(user)
        sql = (
            "SELECT t.id, t.embedding FROM memory_turn_vectors AS t JOIN memories AS m"
            f" ON m.id = t.id WHERE t.embedding_model = ? AND m.status = ?"
            + mine.replace(" user", " m.user")
        )
        return await self._vector_rows(sql, [embedding_model, _ACTIVE, *of_user], ids, "t.id")

    async def missing_turn_vectors(
        self, embedding_model: str, *, user: str | None = None
    ) -> builtins.list[Memory]:
        mine, params = _of_user(user)
        # Migration 13's partial index, its condition said as it says it (literals).
        cur = await self._conn.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE status = '{_ACTIVE}'"
            f" AND instr(flags, '\"{FLAG_DIALOGUE}\"') > 0{mine} AND id NOT IN"
            " (SELECT id FROM memory_turn_vectors WHERE embedding_model = ?) ORDER BY id",
            (*params, embedding_model),
        )
        return [row_to_memory(r) for r in await cur.fetchall()]

    async def set_turn_vectors(
        self, ids: Sequence[int], vectors: np.ndarray, embedding_model: str
    ) -> None:
        async def body(conn: Conn) -> None:
            await conn.executemany(
                # A row that left the active set while it was embedded keeps none.
                "INSERT OR REPLACE INTO memory_turn_vectors (id, embedding_model, embedding)"
                " SELECT id, ?, ? FROM memories WHERE id = ? AND status = ?",
                [
                    (embedding_model, vector_blob(v), i, _ACTIVE)
                    for i, v in zip(ids, vectors, strict=True)
                ],
            )

        await self._tx(body)

    async def dismiss(
        self, memory_id: int, *, user: str, project: str, query: str, now: float, reason: str
    ) -> None:
        async def body(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO memory_dismissals (memory_id, user, project, query, at)"
                " VALUES (?, ?, ?, ?, ?)",
                (memory_id, user, project, query, now),
            )
            await _Steps(conn).insert_audit(
                (memory_id, AuditAction.DISMISS.value, Origin.USER.value, now, reason, None, query)
            )

        await self._tx(body)

    async def dismissals(self, *, user: str, project: str) -> builtins.list[tuple[int, str]]:
        cur = await self._conn.execute(
            "SELECT memory_id, query FROM memory_dismissals WHERE user = ? AND project = ?"
            " ORDER BY id",
            (user, project),
        )
        return [(int(i), str(q)) for i, q in await cur.fetchall()]

    async def audit(
        self, memory_id: int | None = None, *, action: AuditAction | None = None
    ) -> builtins.list[AuditEntry]:
        where: builtins.list[str] = []
        params: builtins.list[object] = []
        if memory_id is not None:
            where.append("memory_id = ?")
            params.append(memory_id)
        if action is not None:
            where.append("action = ?")
            params.append(AuditAction(action).value)
        sql = AUDIT_SELECT + (" WHERE " + " AND ".join(where) if where else "")
        cur = await self._conn.execute(sql + " ORDER BY id", params)
        return [audit_from_row(r) for r in await cur.fetchall()]

    async def metrics(self) -> dict[str, float]:
        cur = await self._conn.execute("SELECT name, value FROM memory_metrics")
        return {name: value for name, value in await cur.fetchall()}

    async def counts_by_status(self) -> dict[str, int]:
        cur = await self._conn.execute("SELECT status, COUNT(*) FROM memories GROUP BY status")
        return status_counts((str(status), int(count)) for status, count in await cur.fetchall())

    async def close(self) -> None:
        await self._db.close()


async def _one(conn: Conn, sql: str, params: Sequence[object]) -> Memory | None:
    cur = await conn.execute(sql, params)
    row = await cur.fetchone()
    return row_to_memory(row) if row else None


async def _get(conn: Conn, memory_id: int) -> Memory | None:
    return await _one(conn, f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?", (memory_id,))


class _Steps(write_plan.WriteSteps):
    """``write_plan``'s statements in SQLite, inside ``Database.write``'s transaction."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def lock(self, user: str | None = None) -> int:
        # BEGIN IMMEDIATE already holds the write lock (of every user: one file).
        return await _generation(self._conn)

    async def get(self, memory_id: int) -> Memory | None:
        return await _get(self._conn, memory_id)

    async def active(self, user: str, scope: str, category: str, key: str) -> Memory | None:
        return await _one(
            self._conn,
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE user = ? AND scope = ? AND category = ?"
            " AND key = ? AND status = ?",
            (user, scope, category, key, _ACTIVE),
        )

    async def active_and_twin(
        self, draft: MemoryDraft, chash: str
    ) -> tuple[Memory | None, Memory | None]:
        current = await self.active(draft.user, draft.scope, draft.category.value, draft.key)
        if current is not None and current.content_hash == chash:
            return current, None
        twin = await _one(
            self._conn,
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE user = ? AND scope = ? AND content_hash = ?"
            " AND status = ? AND NOT (key = ? AND category = ?)",
            (draft.user, draft.scope, chash, _ACTIVE, draft.key, draft.category.value),
        )
        return current, twin

    async def insert(self, row: write_plan.NewRow) -> Memory:
        cur = await self._conn.execute(
            "INSERT INTO memories (user, scope, category, key, value, origin, status, flags,"
            " created_at, updated_at, expires_at, content_hash, embedding_model, embedding,"
            " stated_at, restates) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*row[: row._fields.index("flags")], json.dumps(row.flags), *row[row._fields.index("flags") + 1 :]),
        )
        assert cur.lastrowid is not None
        return await write_plan.must_get(self, cur.lastrowid)

    async def set_status(self, memory_id: int, status: Status, now: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET status = ?, updated_at = ? WHERE id = ?",
            (status.value, now, memory_id),
        )

    async def mark_superseded(self, memory_id: int, by: int, now: float, until: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET status = ?, superseded_by = ?, updated_at = ?, valid_until = ?,"
            " embedding = NULL WHERE id = ?",
            (Status.SUPERSEDED.value, by, now, until, memory_id),
        )

    async def mark_deleted(self, memory_id: int, now: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET status = ?, updated_at = ?, embedding = NULL WHERE id = ?",
            (Status.DELETED.value, now, memory_id),
        )

    async def reactivate(self, memory_id: int, now: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET status = ?, superseded_by = NULL, valid_until = NULL,"
            " updated_at = ? WHERE id = ?",
            (_ACTIVE, now, memory_id),
        )

    async def set_history(
        self, memory_id: int, superseded_by: int | None, valid_until: float | None
    ) -> None:
        await self._conn.execute(
            "UPDATE memories SET superseded_by = ?, valid_until = ? WHERE id = ?",
            (superseded_by, valid_until, memory_id),
        )

    async def set_place(self, memory_id: int, category: str, scope: str, now: float) -> None:
        await self._conn.execute(
            "UPDATE memories SET category = ?, scope = ?, updated_at = ? WHERE id = ?",
            (category, scope, now, memory_id),
        )

    async def touch(self, memory_id: int, now: float, expires_at: float | None) -> None:
        await self._conn.execute(
            "UPDATE memories SET updated_at = ?, expires_at = ? WHERE id = ?",
            (now, expires_at, memory_id),
        )

    async def set_restates(self, memory_id: int, restates: int | None) -> None:
        await self._conn.execute(
            "UPDATE memories SET restates = ? WHERE id = ?", (restates, memory_id)
        )

    async def insert_audit(self, values: tuple[object, ...]) -> None:
        await self._conn.execute(
            "INSERT INTO memory_audit (memory_id, action, origin, at, reason, old_value, new_value)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            values,
        )

    async def add_metrics(self, deltas: Mapping[str, float]) -> None:
        await _add_metrics(self._conn, deltas)

    async def bump(self) -> int:
        return await _bump(self._conn)


async def _generation(conn: Conn) -> int:
    cur = await conn.execute("SELECT value FROM memory_meta WHERE name = 'generation'")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _bump(conn: Conn) -> int:
    cur = await conn.execute(
        "UPDATE memory_meta SET value = value + 1 WHERE name = 'generation' RETURNING value"
    )
    row = await cur.fetchone()
    assert row is not None, "memory_meta lost its generation row"
    return int(row[0])


async def _add_metrics(conn: Conn, deltas: Mapping[str, float]) -> None:
    await conn.executemany(
        "INSERT INTO memory_metrics (name, value) VALUES (?, ?)"
        " ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
        list(deltas.items()),
    )


class _Cursor:
    """A sqlite3 cursor behind aiosqlite's awaitable reads (``_Immediate``)."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor
        self.lastrowid = cursor.lastrowid

    async def fetchone(self) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self._cursor.fetchone()
        return row

    async def fetchall(self) -> builtins.list[sqlite3.Row]:
        return self._cursor.fetchall()


class _Immediate:
    """The calls a transaction's body makes of aiosqlite, answered at once by the
    sqlite3 connection on its own thread (``SqliteMemoryStore._tx``): the same body,
    none of its awaits suspends."""

    def __init__(self, raw: sqlite3.Connection) -> None:
        self._raw = raw

    async def execute(self, sql: str, parameters: Iterable[Any] = ()) -> _Cursor:
        return _Cursor(self._raw.execute(sql, tuple(parameters)))

    async def executemany(self, sql: str, parameters: Iterable[Sequence[Any]]) -> _Cursor:
        return _Cursor(self._raw.executemany(sql, parameters))


Conn = aiosqlite.Connection | _Immediate
"""What a transaction's body runs its statements on."""


def _drive(body: Awaitable[T]) -> T:
    """Run a transaction's body whose every await is answered at once to its end."""
    steps = body.__await__()
    try:
        steps.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    steps.close()
    raise RuntimeError("a memory write awaited something other than its own statements")
