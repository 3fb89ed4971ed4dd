"""The sampled human review (issue 29 item 5): what is offered, when, and the share."""

from __future__ import annotations

import random
import sqlite3

import pytest

from qwenmem_tui.memory import sqlite_store
from qwenmem_tui.memory.model import (
    DAY,
    FLAG_FROM_FILE,
    AuditAction,
    AuditEntry,
    Category,
    Memory,
    Origin,
    Status,
    WriteRequest,
)
from qwenmem_tui.memory.review import keep, plan_review, review_plan, waiting_label
from qwenmem_tui.memory.service import MemoryService

NOW = 1_790_000_000.0


def memory(id: int, *, days_ago: float, origin: Origin = Origin.USER, flags=(), status=Status.ACTIVE) -> Memory:  # noqa: A002
    at = NOW - days_ago * DAY
    return Memory(
        id=id, user="u", scope="global", category=Category.USER, key=f"k{id}", value=f"v{id}",
        origin=origin, status=status, flags=list(flags), created_at=at, updated_at=at,
        expires_at=None,
    )  # fmt: skip


def reviewed(id: int, *, days_ago: float) -> AuditEntry:  # noqa: A002
    return AuditEntry(0, id, AuditAction.REVIEW, "user", NOW - days_ago * DAY, "kept", None, None)


def test_nothing_is_offered_in_the_first_week_nor_when_turned_off() -> None:
    fresh = [memory(1, days_ago=2), memory(2, days_ago=1)]
    assert not plan_review(fresh, [], now=NOW, every_days=7, size=5).due
    old = [memory(1, days_ago=9)]
    assert plan_review(old, [], now=NOW, every_days=7, size=5).due
    assert not plan_review(old, [], now=NOW, every_days=0, size=5).due


def test_model_and_file_writes_since_the_last_review_come_first_then_the_oldest() -> None:
    memories = [
        memory(1, days_ago=30),  # before the last review, never reviewed: the filler
        memory(2, days_ago=5),  # the user's own, since the review
        memory(3, days_ago=4, origin=Origin.TOOL),  # the model's
        memory(4, days_ago=3, flags=[FLAG_FROM_FILE], origin=Origin.USER),  # read in a file
        memory(5, days_ago=40),  # reviewed already
        memory(6, days_ago=2, status=Status.DELETED),  # gone
    ]
    audit = [reviewed(5, days_ago=8)]
    plan = plan_review(memories, audit, now=NOW, every_days=7, size=4)
    assert [m.id for m in plan.sample] == [3, 4, 2, 1]
    assert plan.last_review == NOW - 8 * DAY
    # A round of one begun (and finished) a day ago: the next one is six days away.
    assert not plan_review(memories, [reviewed(5, days_ago=1)], now=NOW, every_days=7, size=1).due


async def test_the_reviewed_share_counts_active_memories_only(service: MemoryService) -> None:
    for i in range(3):
        await service.save(
            WriteRequest("user", f"k{i}", f"fact number {i}", origin="user", project="p")
        )
    await keep(service, 1, project="p")
    await keep(service, 3, project="p")
    await service.forget(3)
    stats = await service.stats()
    assert (stats.reviewed, stats.reviewed_of) == (1, 2)
    assert waiting_label(1) == "1 memory to review (/memory)"


def _plant(db: str, rng: random.Random, user: str, n: int, now: float) -> None:
    """``n`` rows of every origin, some read from files, some held or gone, written
    over sixty days, and reviews among them (some rounds open, some closed)."""
    conn = sqlite3.connect(db)
    with conn:
        for i in range(n):
            at = now - rng.uniform(0, 60) * DAY
            origin = rng.choice(["user", "user", "tool", "agent"])
            flags = '["from_file"]' if rng.random() < 0.2 else "[]"
            status = rng.choice(["active"] * 6 + ["quarantined", "deleted"])
            conn.execute(
                "INSERT INTO memories (user, scope, category, key, value, origin, status, flags,"
                " created_at, updated_at, content_hash) VALUES (?, ?, 'user', ?, ?, ?, ?, ?, ?, ?, ?)",
                (user, rng.choice(["global", "p", "other"]), f"k{i}", f"v{i}", origin, status,
                 flags, at, at, f"h{i}"),  # fmt: skip
            )
        for memory_id in rng.sample(range(1, n + 1), n // 10):
            conn.execute(
                "INSERT INTO memory_audit (memory_id, action, origin, at, reason) VALUES (?, 'review', 'user', ?, 'kept')",
                (memory_id, now - rng.uniform(0, 20) * DAY),
            )
    conn.close()


@pytest.mark.parametrize("seed", range(6))
async def test_the_review_read_in_sql_is_the_review_of_the_whole_store(
    service: MemoryService, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sample drawn from at most twice its size of rows (the oldest unreviewed and
    the first in the review's order since the last round) is the one the plan draws
    from every row and the whole trail. Fails without it: the plan read every row."""
    rng = random.Random(seed)
    now = service.clock()
    _plant(str(service.store._db.path), rng, service.user, 300, now)
    size = rng.choice([1, 3, 5, 12])
    every = rng.choice([3, 7, 30])
    whole = plan_review(
        await service.list(project="p"), await service.audit(project="p"),
        now=now, every_days=every, size=size,
    )  # fmt: skip
    read: list[int] = []
    counted = sqlite_store.row_to_memory
    monkeypatch.setattr(sqlite_store, "row_to_memory", lambda row: read.append(row[0]) or counted(row))
    plan = await review_plan(service, project="p", every_days=every, size=size)
    assert [m.id for m in plan.sample] == [m.id for m in whole.sample]
    assert (plan.last_review, plan.reviewed) == (whole.last_review, whole.reviewed)
    assert len(read) <= 3 * size + 300 // 10  # and each reviewed row, to know whose it is


def test_a_round_stays_open_with_what_is_left_of_its_sample() -> None:
    memories = [memory(1, days_ago=20), memory(2, days_ago=19), memory(3, days_ago=18)]
    first = plan_review(memories, [], now=NOW, every_days=7, size=2)
    assert [m.id for m in first.sample] == [1, 2]
    kept = [reviewed(1, days_ago=0.01)]
    assert [m.id for m in plan_review(memories, kept, now=NOW, every_days=7, size=2).sample] == [2]
    done = [*kept, reviewed(2, days_ago=0.005)]
    assert not plan_review(memories, done, now=NOW, every_days=7, size=2).due
    # A week later the next round offers what is left, and what was written since.
    later = [*memories, memory(4, days_ago=-1)]
    nxt = plan_review(later, done, now=NOW + 8 * DAY, every_days=7, size=2)
    assert [m.id for m in nxt.sample] == [4, 3]


def test_memory_stats_reports_the_reviewed_share(cli_run, home, project) -> None:  # noqa: ANN001
    import json

    done = cli_run("memory", "stats", "--json", home=home, cwd=project)
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["reviewed"], json.loads(done.stdout)["reviewed_share"]) == (0, 0.0)
    text = cli_run("memory", "stats", home=home, cwd=project).stdout
    assert "reviewed" in text and "active memories kept in a sampled review" in text
