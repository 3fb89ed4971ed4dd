"""The offline copy: recall from this machine's last view of the server while it is down.

When a connected process closes it saves this user's active rows and vectors beside
the local index (``LocalCache``). If the server is down at the next start,
``memory.postgres_unavailable = "read_only"`` serves recall from that copy through
``ReadOnlyCacheStore``; writes are refused with a one-line reason, never queued and
lost. The cache lives in ``<index_dir>/postgres-<fingerprint>/`` so it never mixes
with the SQLite index or another server's.
"""

from __future__ import annotations

import builtins

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from qwenmem_tui.memory import write_plan
from qwenmem_tui.memory.lexical import coverage
from qwenmem_tui.memory.model import (
    AuditAction,
    AuditEntry,
    Category,
    Memory,
    Origin,
    Status,
)
from qwenmem_tui.memory.postgres.connection import (
    MemoryStoreUnavailable,
    describe_dsn,
)
from qwenmem_tui.memory.store import (
    AllowedIds,
    RowQuery,
    no_vectors,
    query_rows,
    status_counts,
)

log = logging.getLogger("qwenmem.memory")

T = TypeVar("T")


class CacheSource(Protocol):
    """What the cache reads from a connected store (``PostgresMemoryStore``)."""

    instance_id: str

    async def generation(self) -> int: ...

    async def active_rows(self, user: str) -> tuple[list[Memory], dict[int, tuple[str, bytes]]]: ...


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

    async def refresh_from(self, store: CacheSource) -> None:
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
        np.savez(tmp, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
        os.replace(tmp, self.path)
        self._saved_generation = generation
        self._write_state({"instance": store.instance_id, "user": self.user, "generation": generation})


class ReadOnlyCacheStore(write_plan.PlannedStore):
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

    async def _in_transaction(
        self, plan: Callable[[write_plan.WriteSteps], Awaitable[T]], what: str
    ) -> T:
        # write, approve and forget (``PlannedStore``) all end here.
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
        key_prefix: str | None = None,
        linked: bool = False,
    ) -> builtins.list[Memory]:
        return [
            m
            for m in self._rows.values()
            if (user is None or m.user == user)
            and (scopes is None or m.scope in scopes)
            and (not linked or m.restates is not None)
            and (statuses is None or m.status in statuses)
            and (key_prefix is None or m.key.startswith(key_prefix))
        ]

    async def rows(self, query: RowQuery) -> builtins.list[Memory]:
        return query_rows(self._rows.values(), query)

    async def count(self, query: RowQuery) -> int:
        return len(query_rows(self._rows.values(), replace(query, limit=None)))

    async def allowed_ids(self, *, user: str, scopes: Collection[str], now: float) -> AllowedIds:
        allowed = [
            m
            for m in self._rows.values()
            if m.user == user and m.scope in scopes and (m.expires_at is None or m.expires_at > now)
        ]
        expiries = [m.expires_at for m in allowed if m.expires_at is not None]
        ids = np.array(sorted(m.id for m in allowed), dtype=np.int64)
        return AllowedIds(ids, self.snapshot.generation, min(expiries) if expiries else None)

    async def _lexical_search(
        self, terms: Sequence[str], user: str, scopes: Collection[str], now: float,
        exclude: Collection[int], limit: int,
    ) -> builtins.list[tuple[int, float]]:
        # A few thousand cached rows at most: the share of terms each holds will do.
        allowed = await self.allowed_ids(user=user, scopes=scopes, now=now)
        skip = set(exclude)
        scored = [
            (m.id, coverage(terms, m.key, m.value))
            for m in (self._rows[i] for i in allowed.ids.tolist() if i not in skip)
        ]
        ranked = sorted((h for h in scored if h[1] > 0), key=lambda h: (-h[1], h[0]))
        return ranked[:limit]

    async def generation(self) -> int:
        return self.snapshot.generation

    # The snapshot holds one user's rows (``active_rows(user)``): ``user`` filters nothing.
    async def vector_ids(self, embedding_model: str, *, user: str | None = None) -> np.ndarray:
        ids, _ = self.snapshot.vectors.get(embedding_model, (np.zeros(0, dtype=np.int64), None))
        return ids

    async def vectors(
        self, embedding_model: str, ids: Sequence[int] | None = None, *, user: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        if embedding_model not in self.snapshot.vectors:
            return no_vectors()
        all_ids, matrix = self.snapshot.vectors[embedding_model]
        if ids is None:
            return all_ids, matrix
        keep = np.isin(all_ids, np.asarray(ids, dtype=np.int64))
        return all_ids[keep], matrix[keep]

    async def missing_vectors(self, embedding_model: str, *, user: str | None = None) -> builtins.list[Memory]:
        return []  # nothing can be embedded and stored while read-only

    async def audit(
        self, memory_id: int | None = None, *, action: AuditAction | None = None
    ) -> builtins.list[AuditEntry]:
        return []  # the audit trail lives on the server only

    async def metrics(self) -> dict[str, float]:
        return {}

    async def counts_by_status(self) -> dict[str, int]:
        return status_counts([(Status.ACTIVE.value, len(self._rows))])

    async def close(self) -> None:
        return None
