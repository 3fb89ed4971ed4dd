"""The sampled human review: now and then a person looks at a few memories.

Guards and identity catch what they can; a wrong fact that reads well gets through and
sticks. So every ``memory.review_every_days`` (7 by default; 0: never) qwenmem offers a
short review of ``memory.review_sample`` memories written since the last one — the
model's and those read from files first (nobody in the chat wrote them), then the
oldest not yet reviewed — on /memory, and the status line says how many wait. The
offer is passive: it is counted when the app is idle and never interrupts a reply.

Keeping a memory adds a ``review`` entry to its audit trail; editing or forgetting it
there goes through the usual paths (audited too). The last review is the latest
``review`` entry; ``memory stats`` shows the share of active memories reviewed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from qwenmem_tui.memory.model import (
    DAY,
    AuditAction,
    AuditEntry,
    Memory,
    Origin,
    Status,
)
from qwenmem_tui.memory.store import RowQuery, model_written

if TYPE_CHECKING:
    from qwenmem_tui.memory.service import MemoryService


@dataclass(frozen=True)
class ReviewPlan:
    """What the review offers now: the sample (empty when none is due)."""

    sample: tuple[Memory, ...]
    last_review: float | None
    reviewed: frozenset[int]  # ids kept in a review so far

    @property
    def due(self) -> bool:
        return bool(self.sample)


def review_round(
    reviews: Sequence[float], *, now: float, every_days: float
) -> tuple[float | None, float | None, int]:
    """Pure: (when the open round began, None if none is open; the review before it
    — the last one when none is open; how many the open round reviewed), from the
    times of the ``review`` entries, oldest first."""
    in_round = [at for at in reviews if now - at < every_days * DAY]
    if not in_round:
        return None, (reviews[-1] if reviews else None), 0
    before = [at for at in reviews if at < in_round[0]]
    return in_round[0], (before[-1] if before else None), len(in_round)


def plan_review(
    memories: Sequence[Memory],
    audit: Sequence[AuditEntry],
    *,
    now: float,
    every_days: float,
    size: int,
) -> ReviewPlan:
    """Pure: the sample due at ``now`` for these memories and their audit trail.

    A round falls due ``every_days`` after the previous one began (the first one that
    long after the oldest memory was written, not on the first day of use) and offers
    ``size`` memories; it stays open, with what is left of its sample, until they are
    all reviewed or the next round is due. A round began with its first ``review``.
    """
    reviews = sorted(e.at for e in audit if e.action is AuditAction.REVIEW)
    reviewed = frozenset(e.memory_id for e in audit if e.action is AuditAction.REVIEW)
    last = reviews[-1] if reviews else None
    active = [m for m in memories if m.status is Status.ACTIVE and m.id not in reviewed]
    period = every_days * DAY
    if period <= 0 or not active:
        return ReviewPlan((), last, reviewed)
    start, previous, done = review_round(reviews, now=now, every_days=every_days)
    left = size - done
    if start is not None:  # a round is open: what is left of its sample
        active = [m for m in active if m.created_at <= start]
    else:
        since = last if last is not None else min(m.created_at for m in active)
        if now - since < period:
            return ReviewPlan((), last, reviewed)
    if left <= 0:
        return ReviewPlan((), last, reviewed)
    fresh = [m for m in active if previous is None or m.created_at > previous]
    # Model and file-derived writes since the last round first, oldest first in each.
    fresh.sort(key=lambda m: (not model_written(m), m.created_at, m.id))
    sample = fresh[:left]
    if len(sample) < left:
        older = sorted((m for m in active if m not in sample), key=lambda m: (m.created_at, m.id))
        sample += older[: left - len(sample)]
    return ReviewPlan(tuple(sample), last, reviewed)


def waiting_label(count: int) -> str:
    """The status line's badge while a review is offered."""
    return f"{count} memor{'y' if count == 1 else 'ies'} to review (/memory)"


async def review_plan(
    service: MemoryService, *, project: str, every_days: float, size: int
) -> ReviewPlan:
    """The review due now for this user's memories visible from ``project``.

    Reads the reviews and at most ``3 * size`` rows, never the whole store: the
    ``size`` oldest not yet reviewed, and since the last round the ``size`` oldest a
    model wrote and the ``size`` oldest the person did, hold every sample
    ``plan_review`` can draw from them all (each read through an index by age)."""
    audit = await service.reviewed(project=project)
    now = service.clock()
    if every_days <= 0 or size <= 0:
        return plan_review([], audit, now=now, every_days=every_days, size=size)
    start, previous, _ = review_round(sorted(e.at for e in audit), now=now, every_days=every_days)
    unreviewed = RowQuery(
        statuses=(Status.ACTIVE,), exclude=frozenset(e.memory_id for e in audit),
        created_until=start, limit=size,
    )  # fmt: skip
    oldest = await service.rows(replace(unreviewed, oldest_first=True), project=project)
    since = replace(unreviewed, created_after=previous, oldest_first=True)
    theirs = await service.rows(replace(since, model_written=True), project=project)
    yours = await service.rows(replace(since, model_written=False), project=project)
    rows = {m.id: m for m in [*oldest, *theirs, *yours]}
    return plan_review(list(rows.values()), audit, now=now, every_days=every_days, size=size)


async def keep(service: MemoryService, memory_id: int, *, project: str) -> Memory | None:
    """The person looked at it in the review and kept it as it is (audited)."""
    memory = await service.get(memory_id, project=project)
    if memory is None or memory.status is not Status.ACTIVE:
        return None
    await service.store.note(
        memory_id,
        AuditAction.REVIEW.value,
        origin=Origin.USER.value,
        reason="kept in the sampled review",
        now=service.clock(),
    )
    service.announce_review_change()
    return memory
