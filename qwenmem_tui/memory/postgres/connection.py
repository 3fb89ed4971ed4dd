"""Talking to the memory server: its one-line errors, its name in messages, retries.

Connection loss: a transaction that fails because the server went away is retried
with exponential backoff on a fresh pooled connection (``RetryPolicy``); what counts
as "went away" is ``transient``. Messages name the server with ``describe_dsn``,
never its password.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import asyncpg

from qwenmem_tui.storage.database import StorageError


class MemoryStoreUnavailable(StorageError):
    """The memory database cannot be reached (or is read-only); ``str(e)`` is one line."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long a transaction keeps trying while the server is away (~12 s by default)."""

    attempts: int = 8
    backoff: float = 0.1
    max_backoff: float = 2.0
    read_attempts: int = 3  # recall should not hang the chat for long

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))


def describe_dsn(dsn: str) -> str:
    """``postgresql://user@host:port/db`` without the password, for messages and logs."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
        user = f"{unquote(parts.username)}@" if parts.username else ""
        database = parts.path.lstrip("/") or "(default database)"
        return f"postgresql://{user}{host}:{port}/{database}"
    except ValueError:
        return "postgresql://(unparsable DSN)"


def transient(exc: BaseException) -> bool:
    """Errors a retry on a fresh connection can fix: the server or the link went away."""
    if isinstance(exc, asyncpg.InterfaceError):
        # "connection is closed", "connection was closed in the middle of operation".
        return "closed" in str(exc) or isinstance(
            exc, asyncpg.exceptions.ConnectionDoesNotExistError
        )
    return isinstance(
        exc,
        (
            OSError,
            TimeoutError,
            asyncpg.PostgresConnectionError,
            asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, cannot connect now
            asyncpg.exceptions.DeadlockDetectedError,
            asyncpg.exceptions.SerializationError,
        ),
    )


def one_line_reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:120]
