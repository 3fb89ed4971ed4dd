"""The MemoryStore interface: SQL rows, vectors and the audit trail, nothing else.

A store persists; it does not search. Vectors are stored with their rows so every
process can (re)build its local FAISS cache from the store without re-embedding, and
a monotonically increasing *generation* tells a process that another one changed the
indexable set. SQLite implements it today (``sqlite_store.py``); PostgreSQL will
implement the same interface with the same semantics (issue 10), and a pgvector
search could later replace the local index without touching callers.

Every mutating call is one transaction that also appends to the audit trail and
bumps the generation, so a supersede and its removal from every index happen in
one step. What write, approve and forget decide is written once, in ``write_plan.py``;
the row conversions below are shared too, so the stores differ only in SQL.
"""

from __future__ import annotations

import builtins

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qwenmem_tui.memory.model import (
    FLAG_FROM_FILE,
    AuditAction,
    AuditEntry,
    Category,
    Memory,
    MemoryDraft,
    Origin,
    Status,
    WriteResult,
)

if TYPE_CHECKING:  # numpy loads where vectors are handled: `memory list` never needs it
    import numpy as np


LEXICAL_CANDIDATES = 400
"""The lexical channel's candidates: this many rows over the query's words (each word
at least twice the rows asked for), the newest matches of each."""


def lexical_cap(terms: int, limit: int) -> int:
    """How many newest matches each of ``terms`` words brings to the lexical channel."""
    return max(2 * limit, LEXICAL_CANDIDATES // terms)


@dataclass(frozen=True)
class NewestMatches:
    """Each word's newest matches passing the hard filters, newest first, (id, key,
    value) each, and the store's largest id then (``MemoryStore.newest_matches``)."""

    rows: dict[str, list[tuple[int, str, str]]]
    top: int


@dataclass(frozen=True)
class AllowedIds:
    """The ids passing recall's hard filters, and until when that answer holds.

    ``valid_until`` is the earliest expiry among them: after it the set must be read
    again even if the generation did not move.
    """

    ids: np.ndarray  # int64, sorted
    generation: int
    valid_until: float | None


@dataclass(frozen=True)
class ChannelQuery:
    """What ``MemoryStore.search_channels`` searches: ``query`` (already centred when
    ``centre`` is given: ``p·(q − mean)``) for ``dense_limit`` candidates, ``terms``
    (``lexical.query_terms``) for ``lexical_limit`` hits, both under recall's hard
    filters (user, scopes, active, unexpired at ``now``, minus ``exclude``); and the
    rows of ``rows_for`` dense candidates, best by the centred cosine
    (``dense.debiased``, without the ``remove`` directions when given: orthonormal
    columns; by ``p·query`` without a centre)."""

    query: np.ndarray
    terms: Sequence[str]
    embedding_model: str
    user: str
    scopes: Collection[str]
    now: float
    exclude: Collection[int]
    dense_limit: int
    lexical_limit: int
    centre: np.ndarray | None
    rows_for: int
    links: bool = False  # also the user's links (``StoreChannels.links``)
    remove: np.ndarray | None = None


@dataclass(frozen=True)
class StoreChannels:
    """Both recall channels and the rows they found, from one query of a store that
    searches its own vectors (``MemoryStore.search_channels``).

    ``dense_ids``/``dense_vectors``: the dense search's candidates in its order, with
    their vectors (for the debiased rerank). ``lexical``: (id, score), best first.
    ``rows``: the rows of every lexical hit and of the dense candidates the store
    ranked best (a debiased rerank may pick another: the caller fetches what lacks).
    ``vectors``: this embedder's vector of each lexical hit (their cosines).
    ``links``: when asked, the user's active memories that may restate an older one,
    as {older id: [newer ids]} (``list(linked=True)``'s answer), else None."""

    dense_ids: np.ndarray
    dense_vectors: np.ndarray
    lexical: list[tuple[int, float]]
    rows: dict[int, Memory]
    vectors: dict[int, np.ndarray]
    links: dict[int, list[int]] | None = None


@dataclass(frozen=True)
class RowQuery:
    """Which rows a screen or a plan reads, and how many: filters, order and a limit,
    all in SQL, so a store of years is never read whole to show a page of it.

    ``words``: casefolded; each must occur in the key, value, category or status
    (the /memory filter). ``after``: keyset paging, ids above it. ``linked``: rows
    that are, supersede or restate one of these ids (a fact's versions, one hop).
    ``model_written``: only rows a model wrote or that were read from a file (True),
    or only the others (False). Ordered by creation (``oldest_first``), else by id.
    """

    user: str | None = None
    scopes: Collection[str] | None = None
    statuses: Collection[Status] | None = None
    words: tuple[str, ...] = ()
    key: str | None = None
    after: int | None = None
    exclude: Collection[int] = ()
    linked: Collection[int] = ()
    created_after: float | None = None
    created_until: float | None = None
    model_written: bool | None = None
    oldest_first: bool = False
    limit: int | None = None


def model_written(memory: Memory) -> bool:
    """Written by a model or read from a file: nobody in the chat said it."""
    return memory.origin is not Origin.USER or FLAG_FROM_FILE in memory.flags


def query_rows(rows: Iterable[Memory], q: RowQuery) -> builtins.list[Memory]:
    """``RowQuery`` over rows held in memory (a store's read-only copy): what each
    store's SQL answers, in the same order."""
    linked = set(q.linked)
    exclude = set(q.exclude)

    def keep(m: Memory) -> bool:
        haystack = f"{m.key} {m.value} {m.category} {m.status}".casefold()
        return (
            (q.user is None or m.user == q.user)
            and (q.scopes is None or m.scope in q.scopes)
            and (q.statuses is None or m.status in q.statuses)
            and (q.key is None or m.key == q.key)
            and (q.after is None or m.id > q.after)
            and m.id not in exclude
            and (not linked or bool({m.id, m.superseded_by, m.restates} & linked))
            and (q.created_after is None or m.created_at > q.created_after)
            and (q.created_until is None or m.created_at <= q.created_until)
            and all(word in haystack for word in q.words)
            and (q.model_written is None or model_written(m) == q.model_written)
        )

    found = [m for m in rows if keep(m)]
    if q.oldest_first:
        found.sort(key=lambda m: (m.created_at, m.id))
    else:
        found.sort(key=lambda m: m.id)
    return found if q.limit is None else found[: q.limit]


def memory_from_row(row: Sequence[Any], flags: Sequence[str]) -> Memory:
    """A ``memories`` row selected in the column order every store uses (id, user,
    scope, category, key, value, origin, status, flags, created_at, updated_at,
    expires_at, last_recalled_at, recall_count, superseded_by, content_hash,
    embedding_model, restates, stated_at, valid_until); ``flags`` decoded by the store
    (JSON text or an array). A salvaged database older than those columns has none of
    them: its rows were stated when created and are current unless superseded."""
    extra = len(row) > 17
    return Memory(
        id=row[0],
        user=row[1],
        scope=row[2],
        category=Category(row[3]),
        key=row[4],
        value=row[5],
        origin=Origin(row[6]),
        status=Status(row[7]),
        flags=list(flags),
        created_at=row[9],
        updated_at=row[10],
        expires_at=row[11],
        last_recalled_at=row[12],
        recall_count=row[13],
        superseded_by=row[14],
        content_hash=row[15],
        embedding_model=row[16],
        # Absent from a salvaged database older than the link (migration 6) and the
        # times (migration 7).
        restates=row[17] if extra else None,
        stated_at=(row[18] if extra else None) or row[9],
        valid_until=row[19] if extra else None,
    )


AUDIT_SELECT = (
    "SELECT id, memory_id, action, origin, at, reason, old_value, new_value FROM memory_audit"
)


def audit_from_row(row: Sequence[Any]) -> AuditEntry:
    """A ``memory_audit`` row selected by ``AUDIT_SELECT``."""
    return AuditEntry(
        row[0], row[1], AuditAction(row[2]), row[3], row[4], row[5], row[6], row[7]
    )


def vector_blob(vector: np.ndarray | None) -> bytes | None:
    """How every store keeps a vector: little-endian float32 bytes."""
    import numpy as np

    return None if vector is None else np.asarray(vector, dtype="<f4").tobytes()


def no_vectors() -> tuple[np.ndarray, np.ndarray]:
    """``MemoryStore.vectors`` when no row matches."""
    import numpy as np

    return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)


def status_counts(counted: Iterable[tuple[str, int]]) -> dict[str, int]:
    """``MemoryStore.counts_by_status``: every status present, zero unless counted."""
    counts = {s.value: 0 for s in Status}
    counts.update(counted)
    return counts


class MemoryStore(ABC):
    """Persistence of memories. Times are unix seconds supplied by the caller."""

    @abstractmethod
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
        """Create, supersede, refresh or deduplicate by key — deterministically.

        Non-empty ``flags`` store the row as quarantined. Otherwise: same key and same
        value refreshes the active row; the same value already active under another key
        refreshes that row instead (deduplicated); a new value supersedes the active
        row of the key in the same transaction.
        """

    @abstractmethod
    async def get(self, memory_id: int) -> Memory | None: ...

    @abstractmethod
    async def fetch(self, ids: Sequence[int]) -> list[Memory]:
        """Rows by id, in the order given (missing ids skipped)."""

    @abstractmethod
    async def list(
        self,
        *,
        user: str | None = None,
        scopes: Collection[str] | None = None,
        statuses: Collection[Status] | None = None,
        key_prefix: str | None = None,
        linked: bool = False,
    ) -> builtins.list[Memory]:
        """Rows matching every given filter, oldest first (``key_prefix``: keys that
        start with it — a write's key and its numbered forms, without reading a store
        of years; ``linked``: only rows with an open ``restates`` link)."""

    @abstractmethod
    async def rows(self, query: RowQuery) -> builtins.list[Memory]:
        """Rows matching ``query``, in its order, at most its limit."""

    @abstractmethod
    async def count(self, query: RowQuery) -> int:
        """How many rows match ``query``'s filters (its order and limit ignored)."""

    @abstractmethod
    async def allowed_ids(self, *, user: str, scopes: Collection[str], now: float) -> AllowedIds:
        """Recall's hard filters, in SQL: user, scope, active, not expired."""

    async def lexical_search(
        self,
        terms: Sequence[str],
        *,
        user: str,
        scopes: Collection[str],
        now: float,
        exclude: Collection[int] = (),
        limit: int,
    ) -> builtins.list[tuple[int, float]]:
        """The lexical channel: up to ``limit`` (id, score) of rows matching any of
        ``terms`` (``lexical.query_terms``), best first, higher is better.

        The hard filters of ``allowed_ids`` (user, scope, active, unexpired) and
        ``exclude`` are part of the same query, so the limit applies to rows that
        passed them: never a search first and a filter after. No terms, no scopes or
        no room answer nothing here, once, so a store's query never sees them.
        """
        if not terms or not scopes or limit <= 0:
            return []
        return await self._lexical_search(terms, user, scopes, now, exclude, limit)

    async def newest_matches(
        self, caps: Mapping[str, int], *, user: str, scope: str, now: float
    ) -> NewestMatches | None:
        """For a batch of lookups at once (an import): each word's newest ``caps[word]``
        matches in ``scope`` passing the hard filters, as the lexical channel reads
        them. None: this store answers one lookup at a time only."""
        return None

    async def text_matches(
        self, texts: Sequence[tuple[str, str]], terms: Collection[str]
    ) -> dict[str, set[int]] | None:
        """Which of ``texts`` ((key, value) each, by index) each word matches, by the
        lexical channel's own matching. None: not answered here."""
        return None

    @abstractmethod
    async def _lexical_search(
        self, terms: Sequence[str], user: str, scopes: Collection[str], now: float,
        exclude: Collection[int], limit: int,
    ) -> builtins.list[tuple[int, float]]:
        """``lexical_search`` in the store's own query; terms, scopes and limit non-empty."""

    @abstractmethod
    async def record_recall(
        self, ids: Sequence[int], *, now: float, metrics: Mapping[str, float]
    ) -> None:
        """These memories reached a prompt (count, last recall); add to metric counters."""

    @abstractmethod
    async def approve(
        self, memory_id: int, *, now: float, reason: str = "", replaces: Sequence[int] = ()
    ) -> Memory | None:
        """Quarantined -> active (superseding the key's active row and ``replaces``,
        the same fact's rows under other keys); None if not quarantined."""

    @abstractmethod
    async def restore(
        self, memory_id: int, *, now: float, reason: str = ""
    ) -> tuple[Memory, builtins.list[int]] | None:
        """Superseded -> active again (audited), superseding whatever holds its key
        now; (the row, the ids that left the active set), None if not superseded."""

    @abstractmethod
    async def move(
        self,
        memory_id: int,
        *,
        category: Category,
        scope: str,
        now: float,
        reason: str = "",
        ttl_days: int | None = None,
    ) -> Memory | None:
        """An active or held row to another category and scope (audited); None if
        there is no such row. ValueError when its key is active there already.
        ``ttl_days``: its lifetime from now on (None: its expiry stays)."""

    @abstractmethod
    async def forget(
        self, memory_id: int, *, origin: Origin | str, now: float, reason: str = ""
    ) -> Memory | None:
        """Mark deleted (audited); None if no such row or already deleted."""

    @abstractmethod
    async def settle(
        self, memory_id: int, *, same_fact: bool, origin: Origin | str, now: float, reason: str
    ) -> builtins.list[int] | None:
        """Decide memory ``memory_id``'s ``restates`` link (audited): the same fact
        supersedes the older memory (the ids that left the active set), another fact
        only unlinks ([]); None when there is no open link to decide."""

    @abstractmethod
    async def sweep_expired(self, *, now: float) -> builtins.list[int]:
        """Mark active rows past their expiry as expired; the ids that changed."""

    @abstractmethod
    async def generation(self) -> int:
        """Bumped by every change of the indexable set, in the same transaction."""

    @abstractmethod
    async def vector_ids(self, embedding_model: str, *, user: str | None = None) -> np.ndarray:
        """Sorted int64 ids of active rows holding a vector from ``embedding_model``
        (``user``'s only, when given: a client loads what it can see, not a team's
        million rows)."""

    @abstractmethod
    async def vectors(
        self, embedding_model: str, ids: Sequence[int] | None = None, *, user: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64, vectors float32) of active rows embedded with ``embedding_model``,
        all of them (``user``'s, when given) or only ``ids``."""

    @abstractmethod
    async def missing_vectors(self, embedding_model: str, *, user: str | None = None) -> builtins.list[Memory]:
        """Active or quarantined rows (``user``'s, when given) with no vector from
        ``embedding_model``."""

    @abstractmethod
    async def set_vectors(
        self, ids: Sequence[int], vectors: np.ndarray, embedding_model: str
    ) -> None: ...

    def keeps_turn_vectors(self) -> bool:
        """The store keeps a dialogue turn's second vector, its words alone
        (``memory/turns.py``); without it a turn is ranked by its own vector only."""
        return False

    async def turn_vector_ids(self, embedding_model: str, *, user: str | None = None) -> np.ndarray:
        """Sorted int64 ids of active rows with a second vector from ``embedding_model``."""
        raise NotImplementedError("this store keeps no second vectors")

    async def turn_vectors(
        self, embedding_model: str, ids: Sequence[int] | None = None, *, user: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64, vectors float32) of active rows' second vectors from
        ``embedding_model``, all of them (``user``'s, when given) or only ``ids``."""
        raise NotImplementedError("this store keeps no second vectors")

    async def missing_turn_vectors(
        self, embedding_model: str, *, user: str | None = None
    ) -> builtins.list[Memory]:
        """Active dialogue turns (``user``'s, when given) with no second vector from
        ``embedding_model``."""
        raise NotImplementedError("this store keeps no second vectors")

    async def set_turn_vectors(
        self, ids: Sequence[int], vectors: np.ndarray, embedding_model: str
    ) -> None:
        """Keep these rows' second vectors (only of rows still active)."""
        raise NotImplementedError("this store keeps no second vectors")

    @abstractmethod
    async def audit(
        self, memory_id: int | None = None, *, action: AuditAction | None = None
    ) -> builtins.list[AuditEntry]:
        """The audit trail, of one memory or all (``action``'s entries only, when
        given: the reviews, without reading a trail of years), oldest first."""

    @abstractmethod
    async def add_metrics(self, deltas: Mapping[str, float]) -> None:
        """Add to named counters (recalls, hits, staleness sums, deliveries)."""

    @abstractmethod
    async def metrics(self) -> dict[str, float]: ...

    @abstractmethod
    async def counts_by_status(self) -> dict[str, int]: ...

    async def note(
        self, memory_id: int, action: str, *, origin: str, reason: str, now: float
    ) -> None:
        """An audit entry that changes no row (a review that kept the memory)."""
        raise NotImplementedError("this store keeps no audit notes")

    async def dismiss(
        self, memory_id: int, *, user: str, project: str, query: str, now: float, reason: str
    ) -> None:
        """Record that ``memory_id`` was not relevant to ``query`` in ``project`` (audited)."""
        raise NotImplementedError("'not relevant here' needs the SQLite memory store")

    async def dismissals(self, *, user: str, project: str) -> builtins.list[tuple[int, str]]:
        """(memory_id, query) of every dismissal of this user in ``project``."""
        return []

    def searches_vectors(self) -> bool:
        """The store answers the dense channel itself (``nearest_vectors``), hard
        filters in the same query; otherwise each process searches a local index."""
        return False

    async def nearest_vectors(
        self,
        query: np.ndarray,
        *,
        embedding_model: str,
        user: str,
        scopes: Collection[str],
        now: float,
        exclude: Collection[int],
        limit: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of up to ``limit`` rows passing ``allowed_ids``' filters
        (minus ``exclude``) with the largest ``p·query``, best first."""
        raise NotImplementedError("this store searches no vectors: use a local index")

    async def search_channels(self, request: ChannelQuery) -> StoreChannels:
        """``nearest_vectors`` and ``lexical_search`` in one round trip, with the rows
        of the lexical hits and of the best dense candidates (``ChannelQuery``)."""
        raise NotImplementedError("this store searches no vectors: use a local index")

    async def vector_mean(
        self, embedding_model: str, *, user: str, dim: int
    ) -> tuple[np.ndarray | None, int]:
        """Mean of ``user``'s active ``dim``-wide vectors from ``embedding_model``
        (None: none), and how many there are."""
        raise NotImplementedError("this store searches no vectors: use a local index")

    async def watch(self, on_change: Callable[[int], Awaitable[None]]) -> None:
        """Call ``on_change(generation)`` when any process changes the store.

        A store that can push changes (PostgreSQL's LISTEN/NOTIFY) keeps every
        process's index current between recalls; the default does nothing and
        recall's generation check catches up instead (SQLite).
        """
        return None

    @abstractmethod
    async def close(self) -> None: ...
