"""A fact is (user, scope, category, key): the same key under two categories is two facts.

"ana" under feedback (how Ana wants meetings) and "ana" under user (what she drinks)
are different facts that happen to share a name; before schema 5 the store's
one-active-row index was (user, scope, key), so the second write superseded the first.
Every lookup by key — write, approve, restore, move, import — goes by the whole
identity; a database made by the previous schema migrates without losing a row.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from memtest_support import PROJECT_A, Clock, make_settings

from qwenmem_tui.memory.backup import import_lines
from qwenmem_tui.memory.identity import POSSIBLE_DUPLICATE
from qwenmem_tui.memory.model import Category, Status, WriteAction, WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage import MIGRATIONS, Database


def _active(rows: list) -> list[tuple[str, str, str]]:
    return sorted((str(m.category), m.key, m.value) for m in rows if m.status is Status.ACTIVE)


async def test_one_key_under_two_categories_is_two_active_facts(service: MemoryService) -> None:
    meetings = await service.save(
        WriteRequest(
            "feedback",
            "ana",
            "prefers short meetings before noon",
            origin="tool",
            project=PROJECT_A,
        )
    )
    tea = await service.save(
        WriteRequest("user", "ana", "drinks green tea, no sugar", origin="tool", project=PROJECT_A)
    )
    assert tea.action is WriteAction.CREATED and tea.superseded == []
    assert _active(await service.list(project=PROJECT_A)) == [
        ("feedback", "ana", "prefers short meetings before noon"),
        ("user", "ana", "drinks green tea, no sugar"),
    ]
    # A restatement of one of them still supersedes that one only.
    again = await service.save(
        WriteRequest("user", "ana", "drinks black coffee now", origin="tool", project=PROJECT_A)
    )
    assert again.action is WriteAction.SUPERSEDED and again.superseded == [tea.memory.id]
    assert (await service.get(meetings.memory.id)).status is Status.ACTIVE
    assert POSSIBLE_DUPLICATE not in again.memory.flags and POSSIBLE_DUPLICATE not in tea.memory.flags


async def test_the_database_allows_both_and_still_refuses_a_second_active_row_of_one_fact(
    service: MemoryService, mem_paths: Paths
) -> None:
    await service.save(
        WriteRequest("project", "build_cmd", "make build", origin="tool", project=PROJECT_A)
    )
    await service.save(
        WriteRequest(
            "reference",
            "build_cmd",
            "https://ci.example.org/build",
            origin="tool",
            project=PROJECT_A,
        )
    )
    assert len(_active(await service.list(project=PROJECT_A))) == 2
    conn = sqlite3.connect(mem_paths.db_file)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO memories (user, scope, category, key, value, origin, status, created_at,"
                " updated_at, content_hash) VALUES (?, ?, 'project', 'build_cmd', 'x', 'user', 'active', 0, 0, 'h')",
                ("ana", PROJECT_A),
            )
    finally:
        conn.close()


async def test_import_keeps_the_same_key_under_two_categories(service: MemoryService) -> None:
    lines = [
        json.dumps({"category": "feedback", "key": "rui", "value": "Rui wants code reviews within a day"}),
        json.dumps({"category": "user", "key": "rui", "value": "Rui is my brother-in-law"}),
        json.dumps({"category": "project", "key": "rui", "value": "Rui owns the payments service"}),
        json.dumps({"category": "reference", "key": "rui", "value": "Rui's runbook: https://wiki.example.org/rui"}),
    ]
    report = await import_lines(service, lines, project=PROJECT_A, trusted=True)
    assert report.counts.get("created") == 4 and not report.counts.get("superseded")
    assert [c for c, _, _ in _active(await service.list(project=PROJECT_A))] == [
        "feedback", "project", "reference", "user"
    ]


async def test_approve_restore_and_move_go_by_the_whole_identity(service: MemoryService) -> None:
    user_row = await service.save(
        WriteRequest("user", "lia", "Lia is my neighbour", origin="tool", project=PROJECT_A)
    )
    first = await service.save(
        WriteRequest(
            "feedback",
            "lia",
            "call Lia only after 10am",
            origin="tool",
            project=PROJECT_A,
        )
    )
    second = await service.save(
        WriteRequest(
            "feedback",
            "lia",
            "call Lia only after 11am",
            origin="tool",
            project=PROJECT_A,
        )
    )
    assert second.superseded == [first.memory.id]
    # Restoring the feedback row displaces the feedback row only.
    restored = await service.restore(first.memory.id, project=PROJECT_A)
    assert restored is not None and restored[1] == [second.memory.id]
    assert (await service.get(user_row.memory.id)).status is Status.ACTIVE
    # Approving a held feedback/lia replaces the feedback value, not the user one.
    held = await service.save(
        WriteRequest(
            "feedback", "lia", "call Lia only after noon", origin="tool", project=PROJECT_A, hold=["held_for_test"]
        )
    )
    assert held.action is WriteAction.QUARANTINED
    approved = await service.approve(held.memory.id, project=PROJECT_A)
    assert approved is not None and approved.status is Status.ACTIVE
    assert (await service.get(first.memory.id)).status is Status.SUPERSEDED
    assert (await service.get(user_row.memory.id)).status is Status.ACTIVE
    # Moving the user fact into feedback, where lia is taken, says so; to project it goes.
    with pytest.raises(ValueError, match="feedback/lia"):
        await service.store.move(
            user_row.memory.id, category=Category.FEEDBACK, scope="global", now=service.clock()
        )
    moved = await service.move(user_row.memory.id, "project", project=PROJECT_A)
    assert moved is not None and (moved.category, moved.scope) == (Category.PROJECT, PROJECT_A)


async def test_the_same_attribute_under_another_category_is_kept_and_flagged(service: MemoryService) -> None:
    """Evidence it may be one fact filed twice: both kept, the new one flagged."""
    await service.save(
        WriteRequest("user", "editor", "my editor is vim", origin="tool", project=PROJECT_A)
    )
    later = await service.save(
        WriteRequest("feedback", "editor", "my editor is helix", origin="tool", project=PROJECT_A)
    )
    assert later.action is WriteAction.CREATED and later.superseded == []
    assert POSSIBLE_DUPLICATE in later.memory.flags
    assert len(_active(await service.list(project=PROJECT_A))) == 2
    # A shared name with short values is no such evidence: both kept, nothing flagged.
    await service.save(
        WriteRequest("feedback", "rui", "short answers", origin="tool", project=PROJECT_A)
    )
    other = await service.save(
        WriteRequest("user", "rui", "green tea", origin="tool", project=PROJECT_A)
    )
    assert other.action is WriteAction.CREATED and POSSIBLE_DUPLICATE not in other.memory.flags


async def test_a_database_of_the_previous_schema_migrates_without_losing_a_row(
    tmp_path: Path,
) -> None:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    old = await Database.open(paths.db_file, migrations=MIGRATIONS[:4])
    rows = [
        # (category, key, value, status, superseded_by): feedback/ana was superseded by
        # user/ana under the old identity, a held row and a deleted one beside them.
        ("feedback", "ana", "Ana prefers short meetings", "superseded", 2),
        ("user", "ana", "Ana likes tea", "active", None),
        ("project", "build_cmd", "make build", "active", None),
        ("project", "deploy", "fly deploy", "quarantined", None),
        ("user", "city", "Porto", "deleted", None),
    ]

    async def fill(conn) -> None:  # type: ignore[no-untyped-def]
        for category, key, value, status, by in rows:
            await conn.execute(
                "INSERT INTO memories (user, scope, category, key, value, origin, status, flags,"
                " created_at, updated_at, content_hash)"
                " VALUES ('ana', ?, ?, ?, ?, 'user', ?, '[]', 1.8e9, 1.8e9, ?)",
                ("global" if category in ("user", "feedback") else PROJECT_A, category, key, value, status, value),
            )
        for number, (*_, by) in enumerate(rows, start=1):
            await conn.execute("UPDATE memories SET superseded_by = ? WHERE id = ?", (by, number))
        await conn.execute(
            "INSERT INTO memory_audit (memory_id, action, origin, at, reason) VALUES (1, 'supersede', 'user', 1.8e9, 'old')"
        )

    await old.write(fill)
    before = await old.fetchall("SELECT * FROM memories ORDER BY id")
    await old.close()

    service = await MemoryService.open(make_settings(), paths, clock=Clock())
    try:
        conn = sqlite3.connect(paths.db_file)
        try:
            after = conn.execute("SELECT * FROM memories ORDER BY id").fetchall()
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            audit = conn.execute("SELECT count(*) FROM memory_audit").fetchone()[0]
        finally:
            conn.close()
        # Every row and column as it was (the service only embedded the missing vectors).
        assert version == len(MIGRATIONS) and audit == 1
        assert [tuple(r)[:16] for r in before] == [r[:16] for r in after]
        # The wrongly superseded row can now come back beside the other fact.
        restored = await service.restore(1)
        assert restored is not None and restored[1] == []
        assert _active(await service.list(project=PROJECT_A)) == [
            ("feedback", "ana", "Ana prefers short meetings"),
            ("project", "build_cmd", "make build"),
            ("user", "ana", "Ana likes tea"),
        ]
    finally:
        await service.close()


async def test_editing_one_fact_leaves_the_same_key_of_another_category(service: MemoryService) -> None:
    """A receipt's or /memory's edit supersedes the edited fact, not its namesake."""
    meetings = await service.save(
        WriteRequest(
            "feedback",
            "noor",
            "Noor wants meeting notes in Slack",
            origin="tool",
            project=PROJECT_A,
        )
    )
    fact = await service.save(
        WriteRequest("user", "noor", "Noor is my cousin", origin="tool", project=PROJECT_A)
    )
    edited = await service.edit(fact.memory.id, "Noor is my cousin from Porto", project=PROJECT_A, reason="receipt")
    assert edited is not None and edited.superseded == [fact.memory.id]
    assert (await service.get(meetings.memory.id)).status is Status.ACTIVE
    assert _active(await service.list(project=PROJECT_A)) == [
        ("feedback", "noor", "Noor wants meeting notes in Slack"),
        ("user", "noor", "Noor is my cousin from Porto"),
    ]
