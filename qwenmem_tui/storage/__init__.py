"""SQLite persistence: one database file, sessions and their items."""

from qwenmem_tui.storage.database import Database, RetryCallback, StorageError
from qwenmem_tui.storage.migrations import MIGRATIONS
from qwenmem_tui.storage.sessions import (
    Item,
    SessionInfo,
    SessionNotFoundError,
    SessionStore,
    make_title,
)

__all__ = [
    "MIGRATIONS",
    "Database",
    "Item",
    "RetryCallback",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStore",
    "StorageError",
    "make_title",
]
