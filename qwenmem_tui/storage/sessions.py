"""Sessions and their items: every chat message plus display-only items.

An item is one row of a conversation as the user saw it. Items that are part of the
model's history carry the OpenAI message dict in `message`; display-only items (info,
error, away_recap, compaction markers, ...) have `message=None`. Each `add_item`
commits before it returns, so whatever the UI has shown as finished survives a crash.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import aiosqlite

from qwenmem_tui import secrets
from qwenmem_tui.llm.wire import JSONObject, Message
from qwenmem_tui.storage.database import Database, StorageError

TITLE_MAX_CHARS = 60


@dataclass
class SessionInfo:
    id: str
    project: str
    title: str
    created_at: float
    updated_at: float
    message_count: int
    """Items that are chat messages (user, assistant, tool); display items excluded."""


@dataclass
class Item:
    id: int | None
    session_id: str
    type: str
    content: str
    message: Message | None = None
    meta: JSONObject = field(default_factory=dict)
    created_at: float = 0.0


class SessionNotFoundError(StorageError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f'No session with id "{session_id}"')
        self.session_id = session_id


def make_title(text: str) -> str:
    """A session title from the first user message: its first non-blank line, secrets
    cut out (a title is shown in every listing: ``qwenmem sessions``, ``GET /sessions``,
    the resume picker). The scan never waits for detect-secrets to load (this runs on
    the event loop); our own rules cover the usual formats until it has."""
    for line in text.splitlines():
        line = secrets.redact(" ".join(line.split()), complete=False)
        if line:
            if len(line) > TITLE_MAX_CHARS:
                return line[: TITLE_MAX_CHARS - 1].rstrip() + "…"
            return line
    return ""


def _session_from_row(row: sqlite3.Row) -> SessionInfo:
    return SessionInfo(
        id=row["id"],
        project=row["project"],
        # Titles stored before they were scanned are cleaned on the way out.
        title=secrets.redact(row["title"], complete=False),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        message_count=row["message_count"],
    )


def _item_from_row(row: sqlite3.Row) -> Item:
    return Item(
        id=row["id"],
        session_id=row["session_id"],
        type=row["type"],
        content=row["content"],
        message=json.loads(row["message"]) if row["message"] is not None else None,
        meta=json.loads(row["meta"]),
        created_at=row["created_at"],
    )


def _dump(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_SESSION_COLUMNS = "id, project, title, created_at, updated_at, message_count"
_ITEM_COLUMNS = "id, session_id, type, content, message, meta, created_at"
_MAX_ID = 2**63 - 1


async def _insert_session(
    conn: aiosqlite.Connection, info: SessionInfo, *, if_missing: bool = False
) -> None:
    # if_missing: two first items of a lazy session may race to store it.
    verb = "INSERT OR IGNORE" if if_missing else "INSERT"
    await conn.execute(
        f"{verb} INTO sessions ({_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        (info.id, info.project, info.title, info.created_at, info.updated_at, 0),
    )


class SessionStore:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock
        # Sessions created lazily, not stored until their first item (see create_session).
        self._unstored: dict[str, SessionInfo] = {}

    async def create_session(
        self, project: str, title: str = "", *, lazy: bool = False
    ) -> SessionInfo:
        """A new session. `lazy`: stored only with its first item, in the same
        transaction, so a TUI opened and killed (kill -9) before a word leaves no empty
        "(untitled)" session behind; the close-time cleanup never runs then."""
        now = self.clock()
        info = SessionInfo(
            id=uuid.uuid4().hex,
            project=project,
            title=make_title(title),
            created_at=now,
            updated_at=now,
            message_count=0,
        )
        if lazy:
            self._unstored[info.id] = info
            return info

        async def insert(conn: aiosqlite.Connection) -> None:
            await _insert_session(conn, info)

        await self.db.write(insert)
        return info

    async def get_session(self, session_id: str) -> SessionInfo | None:
        row = await self.db.fetchone(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        )
        return _session_from_row(row) if row else None

    async def list_sessions(self, project: str | None = None) -> list[SessionInfo]:
        """Sessions, most recently updated first (all projects when `project` is None)."""
        if project is None:
            rows = await self.db.fetchall(
                f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY updated_at DESC, rowid DESC"
            )
        else:
            rows = await self.db.fetchall(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE project = ? "
                "ORDER BY updated_at DESC, rowid DESC",
                (project,),
            )
        return [_session_from_row(row) for row in rows]

    async def find_session(self, project: str, ref: str) -> list[SessionInfo]:
        """The sessions of `project` that `ref` names: its exact id, else the (at most
        two) whose id starts with it, so a caller can tell unique from ambiguous."""
        exact = await self.get_session(ref)
        if exact is not None and exact.project == project:
            return [exact]
        pattern = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = await self.db.fetchall(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE project = ? "
            "AND id LIKE ? ESCAPE '\\' ORDER BY updated_at DESC LIMIT 2",
            (project, pattern),
        )
        return [_session_from_row(row) for row in rows]

    async def latest_session(self, project: str) -> SessionInfo | None:
        """The session `--resume` opens: the newest one that has any item.

        A TUI opened and quit without typing leaves an empty session behind;
        resuming into that would hide the conversation the user meant.
        """
        row = await self.db.fetchone(
            f"SELECT {_SESSION_COLUMNS} FROM sessions s WHERE project = ? "
            "AND EXISTS (SELECT 1 FROM items i WHERE i.session_id = s.id) "
            "ORDER BY updated_at DESC, rowid DESC LIMIT 1",
            (project,),
        )
        return _session_from_row(row) if row else None

    async def add_item(self, item: Item) -> Item:
        """Insert and commit `item`; returns it with `id` filled in.

        The first user item also titles an untitled session, in the same
        transaction, so every writer (TUI, daemon) gets titles the same way.
        """
        created_at = item.created_at or self.clock()
        is_message = 1 if item.message is not None else 0
        title = make_title(item.content) if item.type == "user" else ""

        unstored = self._unstored.get(item.session_id)

        async def insert(conn: aiosqlite.Connection) -> int:
            if unstored is not None:
                await _insert_session(conn, unstored, if_missing=True)
            cursor = await conn.execute(
                "INSERT INTO items (session_id, type, content, message, meta, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    item.session_id,
                    item.type,
                    item.content,
                    _dump(item.message) if item.message is not None else None,
                    _dump(item.meta),
                    created_at,
                ),
            )
            item_id = cursor.lastrowid
            await conn.execute(
                "UPDATE sessions SET updated_at = max(updated_at, ?), "
                "message_count = message_count + ?, "
                "title = CASE WHEN title = '' THEN ? ELSE title END WHERE id = ?",
                (created_at, is_message, title, item.session_id),
            )
            assert item_id is not None
            return item_id

        try:
            item_id = await self.db.write(insert)
        except sqlite3.IntegrityError as exc:
            raise SessionNotFoundError(item.session_id) from exc
        self._unstored.pop(item.session_id, None)
        return Item(
            id=item_id,
            session_id=item.session_id,
            type=item.type,
            content=item.content,
            message=item.message,
            meta=dict(item.meta),
            created_at=created_at,
        )

    async def update_item(self, item: Item) -> None:
        """Rewrite an item's content, message and meta (e.g. pin it)."""
        if item.id is None:
            raise ValueError("update_item needs a persisted item (id is None)")

        async def update(conn: aiosqlite.Connection) -> None:
            # The count follows the one row (a message becoming display-only or back),
            # first, while the row is as it was: recounting the session's items made
            # each streamed reply's commit O(items) (issue 41's soak).
            await conn.execute(
                "UPDATE sessions SET message_count = message_count + ? - "
                "(SELECT count(*) FROM items WHERE id = ? AND message IS NOT NULL) "
                "WHERE id = ? AND EXISTS (SELECT 1 FROM items WHERE id = ?)",
                (1 if item.message is not None else 0, item.id, item.session_id, item.id),
            )
            await conn.execute(
                "UPDATE items SET type = ?, content = ?, message = ?, meta = ? WHERE id = ?",
                (
                    item.type,
                    item.content,
                    _dump(item.message) if item.message is not None else None,
                    _dump(item.meta),
                    item.id,
                ),
            )

        await self.db.write(update)

    async def delete_if_empty(self, session_id: str) -> bool:
        """Delete the session if nothing was ever stored in it; True if it was.

        One statement, so an item another process adds meanwhile keeps the session.
        """
        if self._unstored.pop(session_id, None) is not None:
            return True  # never stored

        async def delete(conn: aiosqlite.Connection) -> int:
            cursor = await conn.execute(
                "DELETE FROM sessions WHERE id = ? "
                "AND NOT EXISTS (SELECT 1 FROM items WHERE session_id = ?)",
                (session_id, session_id),
            )
            return cursor.rowcount

        return await self.db.write(delete) == 1

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session and its items (one transaction); True if it existed."""
        if self._unstored.pop(session_id, None) is not None:
            return True

        async def delete(conn: aiosqlite.Connection) -> int:
            cursor = await conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            return cursor.rowcount

        return await self.db.write(delete) == 1

    async def load_items(
        self, session_id: str, *, after: int = 0, offset: int = 0, limit: int | None = None
    ) -> list[Item]:
        """The session's items in order: those with an id past `after`, skipping
        `offset` of them, at most `limit` (all when None)."""
        rows = await self.db.fetchall(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE session_id = ? AND id > ? "
            "ORDER BY id LIMIT ? OFFSET ?",
            (session_id, after, -1 if limit is None else limit, offset),
        )
        return [_item_from_row(row) for row in rows]

    async def get_item(self, session_id: str, item_id: int) -> Item | None:
        row = await self.db.fetchone(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE session_id = ? AND id = ?", (session_id, item_id)
        )
        return _item_from_row(row) if row else None

    async def count_items(self, session_id: str, *, through: int | None = None) -> int:
        """How many items the session has (with an id up to `through`, if given)."""
        row = await self.db.fetchone(
            "SELECT count(*) FROM items WHERE session_id = ? AND id <= ?",
            (session_id, _MAX_ID if through is None else through),
        )
        return int(row[0]) if row else 0

    async def tail_start(self, session_id: str, tail: int) -> int:
        """The id just before the session's newest `tail` items (0 when it has no more)."""
        row = await self.db.fetchone(
            "SELECT id FROM items WHERE session_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?",
            (session_id, tail),
        )
        return int(row[0]) if row else 0

    async def last_item(
        self, session_id: str, *, type: str | None = None, meta_key: str | None = None, after: int = 0  # noqa: A002
    ) -> Item | None:
        """The newest item past `after` of `type`, or whose meta has `meta_key` set true."""
        where, params = ["session_id = ?", "id > ?"], [session_id, after]
        if type is not None:
            where.append("type = ?")
            params.append(type)
        if meta_key is not None:
            where.append("json_extract(meta, ?) = 1")
            params.append(f'$."{meta_key}"')
        row = await self.db.fetchone(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT 1",
            params,
        )
        return _item_from_row(row) if row else None

    async def latest_by_type(self, session_id: str) -> dict[str, Item]:
        """The newest item of each type the session has."""
        rows = await self.db.fetchall(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE id IN "
            "(SELECT max(id) FROM items WHERE session_id = ? GROUP BY type)",
            (session_id,),
        )
        return {row["type"]: _item_from_row(row) for row in rows}

    async def pinned_items(
        self, session_id: str, *, after: int, through: int, ids: set[int]
    ) -> list[Item]:
        """Messages with an id in (`after`, `through`] pinned by the user or in `ids`."""
        marks = ",".join("?" * len(ids))
        rows = await self.db.fetchall(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE session_id = ? AND id > ? AND id <= ? "
            "AND message IS NOT NULL AND (json_extract(meta, '$.pinned') = 1"
            + (f" OR id IN ({marks})" if ids else "")
            + ") ORDER BY id",
            (session_id, after, through, *sorted(ids)),
        )
        return [_item_from_row(row) for row in rows]

    async def usage_total(self, session_id: str) -> tuple[int, int]:
        """(prompt, completion) tokens the endpoint reported on the session's replies."""
        row = await self.db.fetchone(
            "SELECT coalesce(sum(json_extract(meta, '$.usage.prompt_tokens')), 0), "
            "coalesce(sum(json_extract(meta, '$.usage.completion_tokens')), 0) "
            "FROM items WHERE session_id = ? AND type = 'assistant'",
            (session_id,),
        )
        return (int(row[0]), int(row[1])) if row else (0, 0)

    async def set_title(self, session_id: str, title: str) -> None:
        async def update(conn: aiosqlite.Connection) -> None:
            await conn.execute(
                "UPDATE sessions SET title = ? WHERE id = ?", (make_title(title), session_id)
            )

        await self.db.write(update)
