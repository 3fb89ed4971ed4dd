"""Live truth for a running session (issue 14): delivered memories as they stand now.

The prefetch hook keeps the reminder blocks it delivered in the model's view for the
rest of the session (and keeps their memories out of later recalls). A block copied
verbatim would keep a value that has since been superseded, forgotten or has expired —
by this process or another one — in every later request. So before each request the
hook asks ``live_blocks`` for the delivered ids as they stand: each one is the same
memory when still active, its successor when superseded (following ``superseded_by``),
or gone. A memory appears once, in the earliest block that holds it.

The check is cheap when nothing changed: one read of the store's generation (bumped in
the same transaction as every supersede, forget, approval and expiry sweep, by any
process), compared with the generation of the last answer; rows are read only when it
moved or a delivered memory's expiry passed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from qwenmem_tui.memory.model import GLOBAL_SCOPE, Memory, Status
from qwenmem_tui.memory.render import render_block
from qwenmem_tui.memory.store import MemoryStore

MAX_HOPS = 16
"""Successor links followed per delivered memory (a chain of restatements)."""


@dataclass(frozen=True)
class Freshness:
    """What the last answer was read at: valid while the generation stays and until the
    earliest expiry among the memories it returned."""

    generation: int
    valid_until: float | None


@dataclass(frozen=True)
class LiveGroup:
    """One delivered block as it stands: its memories' ids and the block to send."""

    ids: tuple[int, ...]
    block: str  # "" when none of its memories is current any more


@dataclass(frozen=True)
class LiveBlocks:
    freshness: Freshness
    groups: list[LiveGroup]  # aligned with the groups asked about


def _current(memory: Memory, *, user: str, scopes: Collection[str], now: float) -> bool:
    """Recall's hard filters, on one row."""
    return (
        memory.status is Status.ACTIVE
        and memory.user == user
        and memory.scope in scopes
        and (memory.expires_at is None or memory.expires_at > now)
    )


async def standing_for(
    store: MemoryStore, ids: Collection[int], *, user: str, scopes: Collection[str], now: float
) -> dict[int, Memory | None]:
    """For each id, the current memory standing for it: itself, its latest successor,
    or None (forgotten, expired, quarantined, another user's or project's)."""
    standing = {i: i for i in ids}
    rows: dict[int, Memory] = {}
    answer: dict[int, Memory | None] = {}
    for _ in range(MAX_HOPS):
        needed = sorted({r for r in standing.values() if r not in rows})
        if needed:
            rows.update({m.id: m for m in await store.fetch(needed)})
        following: dict[int, int] = {}
        for delivered, row_id in standing.items():
            row = rows.get(row_id)
            if row is not None and _current(row, user=user, scopes=scopes, now=now):
                answer[delivered] = row
            elif row is not None and row.status is Status.SUPERSEDED and row.superseded_by:
                following[delivered] = row.superseded_by
            else:
                answer[delivered] = None
        standing = following
        if not standing:
            break
    answer.update(dict.fromkeys(standing))  # a chain longer than MAX_HOPS: drop it
    return answer


async def live_blocks(
    store: MemoryStore,
    groups: Sequence[Sequence[int]],
    since: Freshness | None,
    *,
    user: str,
    project: str,
    clock: Callable[[], float],
) -> LiveBlocks | None:
    """``groups`` (the ids of each delivered block, oldest first) as they stand now;
    None when nothing can have changed since ``since`` (the previous answer)."""
    generation = await store.generation()  # read before the rows: a racing change re-checks
    now = clock()
    if (
        since is not None
        and since.generation == generation
        and (since.valid_until is None or now < since.valid_until)
    ):
        return None
    scopes = (GLOBAL_SCOPE, project)
    standing = await standing_for(
        store, {i for group in groups for i in group}, user=user, scopes=scopes, now=now
    )
    shown: set[int] = set()
    answer: list[LiveGroup] = []
    valid_until: float | None = None
    for group in groups:
        memories: list[Memory] = []
        for delivered in group:
            memory = standing.get(delivered)
            if memory is None or memory.id in shown:
                continue
            shown.add(memory.id)
            memories.append(memory)
            if memory.expires_at is not None:
                valid_until = (
                    memory.expires_at if valid_until is None else min(valid_until, memory.expires_at)
                )
        answer.append(LiveGroup(tuple(m.id for m in memories), render_block(memories, now)))
    return LiveBlocks(Freshness(generation, valid_until), answer)
