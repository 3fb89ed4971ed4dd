"""Keeping every process's local memory cache in step with PostgreSQL.

Each process keeps the FAISS index as a local cache (``index.py``); with PostgreSQL
as the store that cache lives in ``<index_dir>/postgres-<fingerprint>/`` so it never
mixes with the SQLite one or another server's. Two things keep it honest:

* ``GenerationListener`` — ``LISTEN qwenmem_memory`` on a dedicated connection. Every
  mutating transaction ends with ``NOTIFY qwenmem_memory, '<generation>'``, so a
  write or supersede in one process reaches every other process's index within
  milliseconds, not at its next recall. Notifications are only a wake-up call: the
  generation counter decides what changed, so a lost or coalesced one costs nothing,
  and after a reconnect the listener always triggers one catch-up sync.
* ``LocalCache`` — when a connected process closes it saves this user's active rows
  and vectors beside the index. If the server is down at the next start,
  ``memory.postgres_unavailable = "read_only"`` serves recall from that copy through
  ``ReadOnlyCacheStore``; writes are refused with a one-line reason, never queued
  and lost.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import numpy as np

from qwenmem_tui.memory.model import (
    AuditEntry,
    Category,
    Memory,
    MemoryDraft,
    Origin,
    Status,
    WriteResult,
)
from qwenmem_tui.memory.postgres_store import (
    CHANNEL,
    MemoryStoreUnavailable,
    PostgresMemoryStore,
    describe_dsn,
)
from qwenmem_tui.memory.store import AllowedIds, MemoryStore, no_vectors, status_counts

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings
    from qwenmem_tui.paths import Paths

log = logging.getLogger("qwenmem.memory")

Notice = Callable[[str], None]
ChangeCallback = Callable[[int], Awaitable[None]]


class GenerationListener:
    """Calls ``on_change(generation)`` whenever any process commits a memory change.

    Callbacks never overlap: notifications arriving while one runs are coalesced
    into one more call. A dropped connection is re-established with backoff for as
    long as the listener lives, and the user is told once when it drops and once
    when it is back.
    """

    def __init__(
        self,
        dsn: str,
        on_change: ChangeCallback,
        *,
        on_notice: Notice,
        connect_timeout: float = 5.0,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        ignore_pid: Callable[[int], bool] = lambda _pid: False,
    ) -> None:
        self._dsn = dsn
        self._ignore_pid = ignore_pid
        self._on_change = on_change
        self._notice = on_notice
        self._connect_timeout = connect_timeout
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._conn: asyncpg.Connection | None = None
        self._pending = False
        self._latest = -1
        self._drain_task: asyncio.Task[None] | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        """Listen now; if the server is already gone, keep trying in the background."""
        try:
            await self._connect()
        except Exception as exc:
            log.warning("[MEMORY_SYNC] cannot listen on %s yet: %s", describe_dsn(self._dsn), exc)
            self._reconnect_task = asyncio.create_task(self._reconnect())

    async def _connect(self) -> None:
        conn = await asyncpg.connect(self._dsn, timeout=self._connect_timeout)
        try:
            await conn.add_listener(CHANNEL, self._on_notify)
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn

    def _on_notify(self, _conn: object, pid: int, _channel: str, payload: str) -> None:
        if self._ignore_pid(pid):
            return
        try:
            self._latest = max(self._latest, int(payload))
        except ValueError:
            log.warning("[MEMORY_SYNC] ignoring a malformed notification %r", payload[:40])
            return
        self._kick()

    def _kick(self) -> None:
        self._pending = True
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending and not self._closed:
            self._pending = False
            try:
                await self._on_change(self._latest)
            except Exception as exc:  # the next notification or recall syncs again
                log.warning("[MEMORY_SYNC] sync after a notification failed: %s", exc)

    def _on_terminated(self, _conn: object) -> None:
        self._conn = None
        if self._closed or (self._reconnect_task is not None and not self._reconnect_task.done()):
            return
        self._notice(f"memory: lost the change feed from {describe_dsn(self._dsn)}; reconnecting")
        self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        attempt = 0
        while not self._closed:
            attempt += 1
            await asyncio.sleep(min(self._max_backoff, self._backoff * 2 ** (attempt - 1)))
            try:
                await self._connect()
            except Exception as exc:
                log.info("[MEMORY_SYNC] reconnect %d failed: %s", attempt, exc)
                continue
            self._notice(f"memory: change feed from {describe_dsn(self._dsn)} restored")
            self._kick()  # changes made while we were away sent notifications nobody heard
            return

    async def close(self) -> None:
        self._closed = True
        for task in (self._reconnect_task, self._drain_task):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.remove_termination_listener(self._on_terminated)
            try:
                await asyncio.wait_for(conn.close(), timeout=self._connect_timeout)
            except Exception:
                conn.terminate()


# the offline copy ---------------------------------------------------------------------
@dataclass
class CacheSnapshot:
    """What ``LocalCache`` saved: this user's active rows and their vectors."""

    instance_id: str
    generation: int
    saved_at: float
    rows: list[Memory]
    vectors: dict[str, tuple[np.ndarray, np.ndarray]]  # embedding model -> (ids, matrix)


def dsn_fingerprint(dsn: str) -> str:
    """Names the cache directory of one server and database (never the password)."""
    return hashlib.sha256(describe_dsn(dsn).encode()).hexdigest()[:12]


class LocalCache:
    """``<dir>/snapshot.npz``: rows as JSON plus one vector matrix per embedding model."""

    def __init__(self, directory: Path, user: str) -> None:
        self.directory = directory
        self.user = user
        self.path = directory / "snapshot.npz"
        # Small sidecar naming the database and the saved generation, so that opening
        # never has to read the whole snapshot.
        self._state_file = directory / "state.json"
        self._saved_generation: int | None = None

    def bind(self, instance_id: str) -> None:
        """A cache built from another database (dropped and re-created, say) is wiped:
        its generation numbers would otherwise look current by coincidence."""
        try:
            state = json.loads(self._state_file.read_text())
        except (FileNotFoundError, ValueError):
            state = {}
        if state.get("instance", instance_id) != instance_id:
            log.info("[MEMORY_SYNC] %s belongs to another database; clearing it", self.directory)
            shutil.rmtree(self.directory, ignore_errors=True)
            state = {}
        if state.get("user") == self.user:
            self._saved_generation = state.get("generation")
        self._write_state({"instance": instance_id, "user": self.user, "generation": self._saved_generation})

    def _write_state(self, state: dict[str, object]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self._state_file.with_name(f"state.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self._state_file)

    def load(self) -> CacheSnapshot | None:
        try:
            with np.load(self.path, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                vectors = {
                    model: (data[f"ids_{i}"].astype(np.int64), data[f"vec_{i}"].astype(np.float32))
                    for i, model in enumerate(meta["models"])
                }
        except FileNotFoundError:
            return None
        except Exception as exc:  # a damaged cache is no cache
            log.warning("[MEMORY_SYNC] unreadable cache %s: %s", self.path, exc)
            return None
        if meta.get("user") != self.user:
            return None
        rows = [
            Memory(
                **{
                    **r,
                    "category": Category(r["category"]),
                    "origin": Origin(r["origin"]),
                    "status": Status(r["status"]),
                }
            )
            for r in meta["rows"]
        ]
        return CacheSnapshot(meta["instance"], meta["generation"], meta["saved_at"], rows, vectors)

    async def refresh_from(self, store: PostgresMemoryStore) -> None:
        """Save the store's current state for this user, unless already saved."""
        generation = await store.generation()
        if generation == self._saved_generation:
            return
        rows, blobs = await store.active_rows(self.user)
        by_model: dict[str, list[int]] = {}
        for memory_id, (model, _) in blobs.items():
            by_model.setdefault(model, []).append(memory_id)
        models = sorted(by_model)
        arrays: dict[str, np.ndarray] = {}
        for i, model in enumerate(models):
            ids = sorted(by_model[model])
            arrays[f"ids_{i}"] = np.array(ids, dtype=np.int64)
            arrays[f"vec_{i}"] = np.stack([np.frombuffer(blobs[m][1], dtype="<f4") for m in ids])
        meta = {
            "instance": store.instance_id,
            "generation": generation,
            "saved_at": time.time(),
            "user": self.user,
            "models": models,
            "rows": [asdict(m) for m in rows],
        }
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f"snapshot.{os.getpid()}.tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, self.path)
        self._saved_generation = generation
        self._write_state({"instance": store.instance_id, "user": self.user, "generation": generation})


class ReadOnlyCacheStore(MemoryStore):
    """Recall from the last saved copy while PostgreSQL is unreachable.

    Every write raises ``MemoryStoreUnavailable`` with the reason (so the model, the
    /remember command and the CLI all tell the user); recall bookkeeping and metric
    counters are not kept meanwhile.
    """

    def __init__(self, snapshot: CacheSnapshot, reason: str) -> None:
        self.snapshot = snapshot
        self.reason = reason
        self._rows = {m.id: m for m in snapshot.rows}

    def _refuse(self) -> MemoryStoreUnavailable:
        return MemoryStoreUnavailable(f"memory is read-only: {self.reason}")

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
        raise self._refuse()

    async def approve(self, memory_id: int, *, now: float, reason: str = "") -> Memory | None:
        raise self._refuse()

    async def forget(
        self, memory_id: int, *, origin: Origin | str, now: float, reason: str = ""
    ) -> Memory | None:
        raise self._refuse()

    async def set_vectors(
        self, ids: Sequence[int], vectors: np.ndarray, embedding_model: str
    ) -> None:
        raise self._refuse()

    async def record_recall(
        self, ids: Sequence[int], *, now: float, metrics: Mapping[str, float]
    ) -> None:
        return None

    async def add_metrics(self, deltas: Mapping[str, float]) -> None:
        return None

    async def sweep_expired(self, *, now: float) -> list[int]:
        return []  # recall filters expiry itself; marking rows needs the server

    async def get(self, memory_id: int) -> Memory | None:
        return self._rows.get(memory_id)

    async def fetch(self, ids: Sequence[int]) -> list[Memory]:
        return [self._rows[i] for i in ids if i in self._rows]

    async def list(
        self,
        *,
        user: str | None = None,
        scopes: Collection[str] | None = None,
        statuses: Collection[Status] | None = None,
    ) -> list[Memory]:
        return [
            m
            for m in self._rows.values()
            if (user is None or m.user == user)
            and (scopes is None or m.scope in scopes)
            and (statuses is None or m.status in statuses)
        ]

    async def allowed_ids(self, *, user: str, scopes: Collection[str], now: float) -> AllowedIds:
        allowed = [
            m
            for m in self._rows.values()
            if m.user == user and m.scope in scopes and (m.expires_at is None or m.expires_at > now)
        ]
        expiries = [m.expires_at for m in allowed if m.expires_at is not None]
        ids = np.array(sorted(m.id for m in allowed), dtype=np.int64)
        return AllowedIds(ids, self.snapshot.generation, min(expiries) if expiries else None)

    async def generation(self) -> int:
        return self.snapshot.generation

    async def vector_ids(self, embedding_model: str) -> np.ndarray:
        ids, _ = self.snapshot.vectors.get(embedding_model, (np.zeros(0, dtype=np.int64), None))
        return ids

    async def vectors(
        self, embedding_model: str, ids: Sequence[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        if embedding_model not in self.snapshot.vectors:
            return no_vectors()
        all_ids, matrix = self.snapshot.vectors[embedding_model]
        if ids is None:
            return all_ids, matrix
        keep = np.isin(all_ids, np.asarray(ids, dtype=np.int64))
        return all_ids[keep], matrix[keep]

    async def missing_vectors(self, embedding_model: str) -> list[Memory]:
        return []  # nothing can be embedded and stored while read-only

    async def audit(self, memory_id: int | None = None) -> list[AuditEntry]:
        return []  # the audit trail lives on the server only

    async def metrics(self) -> dict[str, float]:
        return {}

    async def counts_by_status(self) -> dict[str, int]:
        return status_counts([(Status.ACTIVE.value, len(self._rows))])

    async def close(self) -> None:
        return None


async def open_postgres_store(
    settings: Settings, paths: Paths, *, user: str, on_notice: Notice | None = None
) -> tuple[MemoryStore, Path]:
    """The store for ``memory.store = "postgres"`` and the directory of its local cache.

    Server down at start: ``memory.postgres_unavailable = "refuse"`` raises
    ``MemoryStoreUnavailable``; ``"read_only"`` (the default) tells ``on_notice`` one
    line and serves recall from the local cache, if this machine has one.
    """
    dsn = settings.memory.postgres_dsn
    if not dsn:
        raise MemoryStoreUnavailable(
            'memory.store is "postgres" but no memory.postgres_dsn (or QWENMEM_POSTGRES_DSN) is set'
        )
    cache_dir = paths.index_dir / f"postgres-{dsn_fingerprint(dsn)}"
    cache = LocalCache(cache_dir, user)
    try:
        store = await PostgresMemoryStore.open(dsn, on_notice=on_notice)
    except MemoryStoreUnavailable as exc:
        if settings.memory.postgres_unavailable == "refuse":
            raise
        snapshot = cache.load()
        if snapshot is None:
            raise MemoryStoreUnavailable(
                f"{exc}; no local memory cache on this machine to read from"
            ) from exc
        saved = time.strftime("%Y-%m-%d %H:%M", time.localtime(snapshot.saved_at))
        message = f"{exc}; memory is read-only from the local cache of {saved}"
        log.warning("[MEMORY_PG] %s", message)
        if on_notice is not None:
            on_notice(message)
        return ReadOnlyCacheStore(snapshot, str(exc)), cache_dir
    cache.bind(store.instance_id)
    store.cache = cache
    return store, cache_dir
