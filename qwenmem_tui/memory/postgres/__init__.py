"""The shared memory store: PostgreSQL through asyncpg, for several processes or machines.

Split by reason to change, with imports in one direction only:

- ``connection`` — one-line errors, the DSN as shown to people, retry policy;
- ``schema`` — DDL and migrations (the change channel, the lexical ``tsvector``);
- ``steps`` — row helpers and ``write_plan``'s statements in SQL;
- ``listener`` — LISTEN/NOTIFY: other processes' changes reach this one at once;
- ``cache`` — the offline copy and the read-only store serving it;
- ``vector_search`` — pgvector, when the server has it: the dense channel in SQL;
- ``store`` — ``PostgresMemoryStore``, the ``MemoryStore`` itself;
- ``migrate`` — copying a SQLite memory into the server.

``open_postgres_store`` below is what ``MemoryService.open`` calls.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from qwenmem_tui.memory.postgres.cache import (
    LocalCache,
    ReadOnlyCacheStore,
    dsn_fingerprint,
)
from qwenmem_tui.memory.postgres.connection import (
    MemoryStoreUnavailable,
    RetryPolicy,
)
from qwenmem_tui.memory.postgres.store import Notice, PostgresMemoryStore
from qwenmem_tui.memory.store import MemoryStore
from qwenmem_tui.memory.settings import MEMORY_SETTINGS

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings
    from qwenmem_tui.paths import Paths

__all__ = [
    "MemoryStoreUnavailable",
    "PostgresMemoryStore",
    "RetryPolicy",
    "open_postgres_store",
]

log = logging.getLogger("qwenmem.memory")


async def open_postgres_store(
    settings: Settings, paths: Paths, *, user: str, on_notice: Notice | None = None
) -> tuple[MemoryStore, Path]:
    """The store for ``memory.store = "postgres"`` and the directory of its local cache.

    Server down at start: ``memory.postgres_unavailable = "refuse"`` raises
    ``MemoryStoreUnavailable``; ``"read_only"`` (the default) tells ``on_notice`` one
    line and serves recall from the local cache, if this machine has one.
    """
    dsn = MEMORY_SETTINGS.of(settings).postgres_dsn
    if not dsn:
        raise MemoryStoreUnavailable(
            'memory.store is "postgres" but no memory.postgres_dsn (or QWENMEM_POSTGRES_DSN) is set'
        )
    cache_dir = paths.index_dir / f"postgres-{dsn_fingerprint(dsn)}"
    cache = LocalCache(cache_dir, user)
    try:
        store = await PostgresMemoryStore.open(
            dsn,
            on_notice=on_notice,
            vector_search=MEMORY_SETTINGS.of(settings).postgres_vector_search,
        )
    except MemoryStoreUnavailable as exc:
        if MEMORY_SETTINGS.of(settings).postgres_unavailable == "refuse":
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
