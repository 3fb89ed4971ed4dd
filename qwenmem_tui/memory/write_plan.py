"""What a memory write, approval or forget does, written once for every store.

SQLite and PostgreSQL differ in SQL, locking and round trips, not in what a write
decides: quarantine when the guard flagged it, refresh when the key already holds the
value, deduplicate when another key does, otherwise create and supersede the key's
older value — each step audited, in one transaction. That plan lives here over the
few statements a store implements in ``WriteSteps``; the stores keep their SQL and
their transaction handling (``BEGIN IMMEDIATE`` and busy retries in SQLite, the
generation row lock and reconnects in PostgreSQL).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from qwenmem_tui.memory.model import (
    DAY,
    AuditAction,
    Category,
    Memory,
    MemoryDraft,
    Origin,
    Status,
    WriteAction,
    WriteResult,
    content_hash,
    holds,
)
from qwenmem_tui.memory.store import MemoryStore, vector_blob

if TYPE_CHECKING:  # vectors pass through as arrays; reading rows never loads numpy
    import numpy as np

T = TypeVar("T")


class NewRow(NamedTuple):
    """A ``memories`` row to insert, in the column order of both stores' INSERT."""

    user: str
    scope: str
    category: str
    key: str
    value: str
    origin: str
    status: str
    flags: list[str]
    created_at: float
    updated_at: float
    expires_at: float | None
    content_hash: str
    embedding_model: str
    embedding: bytes | None
    stated_at: float
    restates: int | None = None


class WriteSteps(ABC):
    """One store's statements inside one open write transaction."""

    @abstractmethod
    async def lock(self, user: str | None = None) -> int:
        """Serialise with every other writer of ``user``'s memories (of anyone's, when
        None); the generation before this transaction."""

    @abstractmethod
    async def get(self, memory_id: int) -> Memory | None: ...

    @abstractmethod
    async def active(self, user: str, scope: str, category: str, key: str) -> Memory | None:
        """The fact's active row: a fact is its (user, scope, category, key); the same
        key under another category is another fact."""

    @abstractmethod
    async def active_and_twin(
        self, draft: MemoryDraft, chash: str
    ) -> tuple[Memory | None, Memory | None]:
        """The fact's active row (``active``), and an active row of the scope holding
        ``chash`` under another key.

        The twin may be left out (None) when the key's own row holds ``chash``: the
        write only refreshes that row then.
        """

    @abstractmethod
    async def insert(self, row: NewRow) -> Memory:
        """The new row, as stored."""

    @abstractmethod
    async def set_status(self, memory_id: int, status: Status, now: float) -> None: ...

    @abstractmethod
    async def mark_superseded(self, memory_id: int, by: int, now: float, until: float) -> None:
        """Superseded by row ``by``, having held ``until`` then; its vector is dropped
        (it leaves every index)."""

    @abstractmethod
    async def mark_deleted(self, memory_id: int, now: float) -> None:
        """Deleted, vector dropped."""

    @abstractmethod
    async def reactivate(self, memory_id: int, now: float) -> None:
        """Active again, no longer superseded by anything and current again (its vector
        is re-embedded by the service: superseding dropped it)."""

    @abstractmethod
    async def set_history(
        self, memory_id: int, superseded_by: int | None, valid_until: float | None
    ) -> None:
        """A restored older version's link to what replaced it, and until when it held."""

    @abstractmethod
    async def set_place(self, memory_id: int, category: str, scope: str, now: float) -> None:
        """Another category and scope."""

    @abstractmethod
    async def touch(self, memory_id: int, now: float, expires_at: float | None) -> None:
        """Move ``updated_at`` and the expiry."""

    @abstractmethod
    async def set_restates(self, memory_id: int, restates: int | None) -> None:
        """Link (or unlink, None) the older memory this one may restate."""

    async def audit(
        self,
        memory_id: int,
        action: AuditAction,
        origin: Origin | str,
        at: float,
        reason: str,
        old_value: str | None,
        new_value: str | None,
    ) -> None:
        """Append to the audit trail."""
        await self.insert_audit(
            (memory_id, action.value, str(origin), at, reason, old_value, new_value)
        )

    @abstractmethod
    async def insert_audit(self, values: tuple[object, ...]) -> None:
        """One ``memory_audit`` row: (memory_id, action, origin, at, reason, old_value,
        new_value)."""

    @abstractmethod
    async def add_metrics(self, deltas: Mapping[str, float]) -> None: ...

    @abstractmethod
    async def bump(self) -> int:
        """The next generation (the indexable set changed)."""


AuditValues = tuple[str, str, float, str, str | None, str | None]
"""An audit entry without its memory: (action, origin, at, reason, old_value, new_value)."""


@dataclass(frozen=True)
class HistoryRow:
    """An older version from a backup (superseded, expired or deleted), restored as it
    was: ids are the backup's, renumbered on the way in."""

    backup_id: int
    row: NewRow
    superseded_by: int | None
    valid_until: float | None
    audit: tuple[AuditValues, ...] = ()
    restates: int | None = None  # an undecided link to an older version (a backup id)


class PlannedStore(MemoryStore):
    """A store whose write, approve and forget follow this module's plans: it only
    says how to run one over its ``WriteSteps`` in a single transaction."""

    @abstractmethod
    async def _in_transaction(self, plan: Callable[[WriteSteps], Awaitable[T]], what: str) -> T:
        """Run ``plan`` in one write transaction (it only touches the database, so a
        retry is safe)."""

    async def note(
        self, memory_id: int, action: str, *, origin: str, reason: str, now: float
    ) -> None:
        """An audit entry that changes no row (a review that kept the memory)."""

        async def plan(steps: WriteSteps) -> None:
            await steps.insert_audit((memory_id, action, origin, now, reason, None, None))

        await self._in_transaction(plan, "memory audit note")

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
        return await self._in_transaction(
            lambda steps: _write(
                steps,
                draft,
                flags=flags,
                expires_at=expires_at,
                vector=vector,
                embedding_model=embedding_model,
                now=now,
            ),
            "memory write",
        )

    async def approve(
        self, memory_id: int, *, now: float, reason: str = "", replaces: Sequence[int] = ()
    ) -> Memory | None:
        return await self._in_transaction(
            lambda steps: _approve(steps, memory_id, now=now, reason=reason, replaces=replaces),
            "memory approval",
        )

    async def restore(
        self, memory_id: int, *, now: float, reason: str = ""
    ) -> tuple[Memory, list[int]] | None:
        return await self._in_transaction(
            lambda steps: _restore(steps, memory_id, now=now, reason=reason), "memory restore"
        )

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
        return await self._in_transaction(
            lambda steps: _move(
                steps, memory_id, category, scope, now=now, reason=reason, ttl_days=ttl_days
            ),
            "memory move",
        )

    async def restore_history(
        self,
        rows: Sequence[HistoryRow],
        renumbered: Mapping[int, int],
        audit: Mapping[int, Sequence[AuditValues]],
        links: Mapping[int, int] | None = None,
    ) -> dict[int, int]:
        """Insert a backup's older versions, link each to what replaced it (a row of
        ``rows`` or one already restored: ``renumbered``, backup id -> id), and append
        the backup's audit trail of both (``audit``: id -> entries); the backup ids in
        the trail's reasons ("superseded by #12") follow. ``links`` (id -> backup id)
        are the restored rows' undecided ``restates`` links, renumbered the same way.
        Backup id -> id of ``rows``."""
        return await self._in_transaction(
            lambda steps: _restore_history(steps, rows, renumbered, audit, links or {}),
            "history restore",
        )

    async def forget(
        self, memory_id: int, *, origin: Origin | str, now: float, reason: str = ""
    ) -> Memory | None:
        return await self._in_transaction(
            lambda steps: _forget(steps, memory_id, origin=origin, now=now, reason=reason),
            "memory forget",
        )

    async def settle(
        self, memory_id: int, *, same_fact: bool, origin: Origin | str, now: float, reason: str
    ) -> list[int] | None:
        return await self._in_transaction(
            lambda steps: _settle(
                steps, memory_id, same_fact=same_fact, origin=origin, now=now, reason=reason
            ),
            "memory link decision",
        )


def join_reasons(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def refreshed_expiry(current: float | None, requested: float | None) -> float | None:
    """Refreshing moves the expiry forward only: a shorter TTL on a repeat must not
    make a fact the user stated twice expire sooner (None never expires)."""
    if current is None or (requested is not None and current > requested):
        return current
    return requested


async def must_get(steps: WriteSteps, memory_id: int) -> Memory:
    row = await steps.get(memory_id)
    assert row is not None, f"memory #{memory_id} vanished inside its own transaction"
    return row


async def supersede(
    steps: WriteSteps,
    old: Memory,
    new_id: int,
    origin: Origin | str,
    new_value: str,
    now: float,
    *,
    stated_at: float | None = None,
) -> None:
    """``old`` gives way to row ``new_id``: it held until the newer version was stated
    (``stated_at``, default ``now``), and never before it was itself stated."""
    until = max(old.stated_at, now if stated_at is None else stated_at)
    await steps.mark_superseded(old.id, new_id, now, until)
    await steps.audit(
        old.id, AuditAction.SUPERSEDE, origin, now, f"superseded by #{new_id}", old.value, new_value
    )


async def _write(
    steps: WriteSteps,
    draft: MemoryDraft,
    *,
    flags: Sequence[str],
    expires_at: float | None,
    vector: np.ndarray | None,
    embedding_model: str,
    now: float,
) -> WriteResult:
    write = _Write(steps, draft, list(flags), expires_at, vector, embedding_model, now)
    generation = await steps.lock(draft.user)
    if holds(flags):
        return await write.hold(generation)
    current, twin = await steps.active_and_twin(draft, write.chash)
    if not draft.dedupe:
        twin = None
    if current is not None and current.content_hash == write.chash:
        return await write.refresh_current(current)
    if twin is not None:
        return await write.deduplicate(current, twin)
    return await write.create(current)


@dataclass
class _Write:
    """One write's steps inside its transaction (``_write`` picks which apply)."""

    steps: WriteSteps
    draft: MemoryDraft
    flags: list[str]
    expires_at: float | None
    vector: np.ndarray | None
    embedding_model: str
    now: float
    writes: dict[str, float] = field(default_factory=lambda: {"writes": 1.0})

    @property
    def chash(self) -> str:
        return content_hash(self.draft.value)

    @property
    def stated_at(self) -> float:
        """When this write's fact was said: the draft's date, its creation, or now."""
        draft = self.draft
        if draft.stated_at is not None:
            return draft.stated_at
        return draft.created_at if draft.created_at is not None else self.now

    async def insert(self, status: Status) -> Memory:
        draft, now = self.draft, self.now
        return await self.steps.insert(
            NewRow(
                draft.user,
                draft.scope,
                draft.category.value,
                draft.key,
                draft.value,
                draft.origin.value,
                status.value,
                list(self.flags),
                draft.created_at if draft.created_at is not None else now,
                now,
                self.expires_at,
                self.chash,
                self.embedding_model if self.vector is not None else "",
                vector_blob(self.vector),
                self.stated_at,
                draft.restates,
            )
        )

    async def refresh(self, row: Memory, why: str) -> None:
        await self.steps.touch(row.id, self.now, refreshed_expiry(row.expires_at, self.expires_at))
        await self.steps.audit(
            row.id, AuditAction.REFRESH, self.draft.origin, self.now, why, row.value, self.draft.value
        )

    async def hold(self, generation: int) -> WriteResult:
        """Quarantined: stored for review, superseding nothing."""
        draft = self.draft
        held = await self.insert(Status.QUARANTINED)
        await self.steps.audit(
            held.id,
            AuditAction.QUARANTINE,
            draft.origin,
            self.now,
            join_reasons(draft.reason, "flags: " + ", ".join(self.flags)),
            None,
            draft.value,
        )
        await self.steps.add_metrics({**self.writes, "quarantined_writes": 1.0})
        return WriteResult(held, WriteAction.QUARANTINED, generation=generation)

    async def replace_others(self, survivor: int) -> list[int]:
        """The same subject's rows under other keys give way to ``survivor`` (issue 14)."""
        draft, steps = self.draft, self.steps
        gone = []
        for other_id in draft.replaces:
            other = await steps.get(other_id)
            if (
                other is None
                or other.id == survivor
                or other.status is not Status.ACTIVE
                or other.user != draft.user
                or other.scope != draft.scope
            ):
                continue  # changed since the lookup, or never ours to replace
            await supersede(
                steps, other, survivor, draft.origin, draft.value, self.now, stated_at=self.stated_at
            )
            gone.append(other.id)
        return gone

    async def refresh_current(self, current: Memory) -> WriteResult:
        """The key already holds this value: refresh it."""
        steps = self.steps
        await self.refresh(current, join_reasons(self.draft.reason, "same value saved again"))
        replaced = await self.replace_others(current.id)
        await steps.add_metrics(self.writes)
        return WriteResult(
            await must_get(steps, current.id),
            WriteAction.REFRESHED,
            replaced,
            generation=await steps.bump(),
        )

    async def deduplicate(self, current: Memory | None, twin: Memory) -> WriteResult:
        """The value is stored under another key: that row is refreshed instead."""
        steps, draft = self.steps, self.draft
        superseded: list[int] = []
        if current is not None:
            await supersede(
                steps, current, twin.id, draft.origin, draft.value, self.now, stated_at=self.stated_at
            )
            superseded.append(current.id)
        await self.refresh(twin, join_reasons(draft.reason, f"deduplicated: saved again under key {draft.key}"))
        superseded += await self.replace_others(twin.id)
        await steps.add_metrics(self.writes)
        return WriteResult(
            await must_get(steps, twin.id), WriteAction.DEDUPLICATED, superseded, await steps.bump()
        )

    async def create(self, current: Memory | None) -> WriteResult:
        """A new active row, superseding the key's current one if any — unless that one
        was said after the date this write gives (an old statement imported late):
        then this is stored as the earlier version it is, and the current one stays.
        A write without a date is said now, whatever another process's clock says."""
        steps, draft, now = self.steps, self.draft, self.now
        dated = draft.stated_at is not None
        if current is not None and dated and current.stated_at > self.stated_at:
            return await self.earlier(current)
        superseded: list[int] = []
        if current is not None:
            # Leave the partial unique index room for the new row first.
            await steps.set_status(current.id, Status.SUPERSEDED, now)
        new = await self.insert(Status.ACTIVE)
        reason = draft.reason
        if dated and new.restates is not None:
            new, reason = await _thread_link(steps, new, reason)
        await steps.audit(new.id, AuditAction.CREATE, draft.origin, now, reason, None, draft.value)
        action = WriteAction.CREATED
        if current is not None:
            await supersede(
                steps, current, new.id, draft.origin, draft.value, now, stated_at=new.stated_at
            )
            superseded.append(current.id)
        superseded += await self.replace_others(new.id)
        if superseded:
            action = WriteAction.SUPERSEDED
        await steps.add_metrics(self.writes)
        return WriteResult(new, action, superseded, await steps.bump())


    async def earlier(self, current: Memory) -> WriteResult:
        """Stored as an earlier version of ``current``: superseded by it from the moment
        it was said, never indexed; the current value stays active."""
        steps, draft, now = self.steps, self.draft, self.now
        self.vector = None  # never recalled as current: no vector, no index entry
        old = await self.insert(Status.SUPERSEDED)
        await steps.set_history(old.id, current.id, current.stated_at)
        why = join_reasons(draft.reason, f"said before #{current.id}'s value: an earlier version")
        await steps.audit(old.id, AuditAction.CREATE, draft.origin, now, why, None, draft.value)
        await steps.audit(
            old.id, AuditAction.SUPERSEDE, draft.origin, now, f"superseded by #{current.id}",
            draft.value, current.value,
        )  # fmt: skip
        await steps.add_metrics(self.writes)
        return WriteResult(await must_get(steps, old.id), WriteAction.CREATED, [], await steps.bump())


async def _thread_link(steps: WriteSteps, new: Memory, reason: str) -> tuple[Memory, str]:
    """A dated write linked as the newer version of a fact stated after it (an old
    statement imported late) is that fact's earlier version instead: threaded into
    the fact's chain of ``restates`` links by when each was said, so the newest stated
    is delivered as current. The row and its audit reason, as threaded."""
    later = await steps.get(new.restates) if new.restates is not None else None
    if later is None or later.stated_at <= new.stated_at:
        return new, reason
    seen = {new.id, later.id}
    while later.restates is not None:  # down the chain to the first said after ``new``
        below = await steps.get(later.restates)
        if below is None or below.id in seen or below.stated_at <= new.stated_at:
            break
        seen.add(below.id)
        later = below
    await steps.set_restates(new.id, later.restates if later.restates not in seen else None)
    await steps.set_restates(later.id, new.id)
    threaded = await must_get(steps, new.id)
    return threaded, join_reasons(reason, f"said before #{later.id}: linked as its earlier version")


async def _approve(
    steps: WriteSteps, memory_id: int, *, now: float, reason: str, replaces: Sequence[int]
) -> Memory | None:
    await steps.lock()
    row = await steps.get(memory_id)
    if row is None or row.status is not Status.QUARANTINED:
        return None
    current = await steps.active(row.user, row.scope, row.category.value, row.key)
    if current is not None:
        await steps.set_status(current.id, Status.SUPERSEDED, now)
    await steps.set_status(memory_id, Status.ACTIVE, now)
    await steps.audit(memory_id, AuditAction.APPROVE, Origin.USER, now, reason, None, row.value)
    if current is not None:
        await supersede(steps, current, memory_id, Origin.USER, row.value, now)
    for other_id in replaces:  # the same fact under other keys (memory/identity.py)
        other = await steps.get(other_id)
        if _replaceable(other, row):
            assert other is not None
            await supersede(steps, other, memory_id, Origin.USER, row.value, now)
    await steps.bump()
    return await must_get(steps, memory_id)


def _replaceable(other: Memory | None, by: Memory) -> bool:
    """Still active, this user's, this scope's, and not ``by`` itself."""
    return (
        other is not None
        and other.id != by.id
        and other.status is Status.ACTIVE
        and other.user == by.user
        and other.scope == by.scope
    )


async def _restore(
    steps: WriteSteps, memory_id: int, *, now: float, reason: str
) -> tuple[Memory, list[int]] | None:
    """A person says a superseded value was right after all: it is active again, and
    the value that replaced it under its key gives way (both audited)."""
    await steps.lock()
    row = await steps.get(memory_id)
    if row is None or row.status is not Status.SUPERSEDED:
        return None
    current = await steps.active(row.user, row.scope, row.category.value, row.key)
    if current is not None:  # leave the partial unique index room first
        await steps.set_status(current.id, Status.SUPERSEDED, now)
    await steps.reactivate(memory_id, now)
    why = join_reasons(reason, f"restored (was superseded by #{row.superseded_by})")
    await steps.audit(memory_id, AuditAction.RESTORE, Origin.USER, now, why, None, row.value)
    gone: list[int] = []
    if current is not None:
        await supersede(steps, current, memory_id, Origin.USER, row.value, now)
        gone.append(current.id)
    await steps.bump()
    return await must_get(steps, memory_id), gone


async def _move(
    steps: WriteSteps,
    memory_id: int,
    category: Category,
    scope: str,
    *,
    now: float,
    reason: str,
    ttl_days: int | None = None,
) -> Memory | None:
    await steps.lock()
    row = await steps.get(memory_id)
    if row is None or row.status not in (Status.ACTIVE, Status.QUARANTINED):
        return None
    if (row.category, row.scope) == (category, scope):
        return row
    if row.status is Status.ACTIVE:
        clash = await steps.active(row.user, scope, category.value, row.key)
        if clash is not None and clash.id != row.id:
            raise ValueError(f"#{clash.id} already holds {category}/{row.key} there")
    await steps.set_place(memory_id, category.value, scope, now)
    where = f"moved from {row.category}/{row.scope} to {category}/{scope}"
    if ttl_days is not None:  # the new category's lifetime, counted from the move
        await steps.touch(memory_id, now, now + ttl_days * DAY)
        where += f", expires in {ttl_days} days"
    await steps.audit(
        memory_id, AuditAction.MOVE, Origin.USER, now, join_reasons(reason, where), row.value, row.value
    )
    await steps.bump()
    return await must_get(steps, memory_id)


async def _settle(
    steps: WriteSteps,
    memory_id: int,
    *,
    same_fact: bool,
    origin: Origin | str,
    now: float,
    reason: str,
) -> list[int] | None:
    """A ``restates`` link decided: the same fact supersedes the older memory by this
    one (restorable), another fact only drops the link; audited either way. None when
    the link is gone or either side is no longer active (nothing to decide)."""
    await steps.lock()
    row = await steps.get(memory_id)
    if row is None or row.restates is None or row.status is not Status.ACTIVE:
        return None
    older = await steps.get(row.restates)
    await steps.set_restates(memory_id, None)
    if not same_fact or not _replaceable(older, row):
        kept = join_reasons(reason, f"not the same fact as #{row.restates}: both kept")
        await steps.audit(memory_id, AuditAction.UNLINK, origin, now, kept, None, None)
        await steps.bump()
        return []
    assert older is not None
    await steps.mark_superseded(older.id, memory_id, now, max(older.stated_at, row.stated_at))
    why = join_reasons(reason, f"superseded by #{memory_id}")
    await steps.audit(older.id, AuditAction.SUPERSEDE, origin, now, why, older.value, row.value)
    await steps.bump()
    return [older.id]


async def _forget(
    steps: WriteSteps, memory_id: int, *, origin: Origin | str, now: float, reason: str
) -> Memory | None:
    await steps.lock()
    row = await steps.get(memory_id)
    if row is None or row.status is Status.DELETED:
        return None
    await steps.mark_deleted(memory_id, now)
    await steps.audit(memory_id, AuditAction.FORGET, str(origin), now, reason, row.value, None)
    await steps.bump()
    return await must_get(steps, memory_id)


_MEMORY_REF = re.compile(r"#(\d+)")


async def _restore_history(
    steps: WriteSteps,
    rows: Sequence[HistoryRow],
    renumbered: Mapping[int, int],
    audit: Mapping[int, Sequence[AuditValues]],
    links: Mapping[int, int],
) -> dict[int, int]:
    await steps.lock()
    ids = dict(renumbered)
    added: dict[int, int] = {}
    for history in rows:
        added[history.backup_id] = ids[history.backup_id] = (await steps.insert(history.row)).id
    for history in rows:
        later = ids.get(history.superseded_by) if history.superseded_by is not None else None
        await steps.set_history(added[history.backup_id], later, history.valid_until)
    restated = {**links, **{added[h.backup_id]: h.restates for h in rows if h.restates is not None}}
    for memory_id, older in restated.items():
        if ids.get(older) not in (None, memory_id):  # the older version came with the backup
            await steps.set_restates(memory_id, ids[older])

    def renumber(reason: str) -> str:
        return _MEMORY_REF.sub(lambda m: f"#{ids.get(int(m.group(1)), m.group(1))}", reason)

    trails = [(added[h.backup_id], h.audit) for h in rows] + list(audit.items())
    for memory_id, entries in trails:
        for action, origin, at, reason, old, new in entries:
            await steps.insert_audit((memory_id, action, origin, at, renumber(reason), old, new))
    await steps.bump()
    return added
