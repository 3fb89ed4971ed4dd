"""A possible restatement is linked, never merged: the newer row names the older in
``restates`` (schema 6) until a decision supersedes the older (restorable) or drops the
link (both kept) — each audited."""

from __future__ import annotations

from memtest_support import PROJECT_A

from qwenmem_tui.memory.model import (
    GLOBAL_SCOPE,
    AuditAction,
    Category,
    MemoryDraft,
    Origin,
    Status,
    WriteRequest,
)
from qwenmem_tui.memory.service import MemoryService


async def _linked(service: MemoryService, older: str, newer: str) -> tuple[int, int]:
    first = await service.save(
        WriteRequest("user", "home_city", older, origin="user", project=PROJECT_A)
    )
    draft = MemoryDraft(
        Category.USER, "moved_to", newer, Origin.USER, GLOBAL_SCOPE, service.user,
        restates=first.memory.id, dedupe=False,
    )
    second = await service.store.write(
        draft, flags=[], expires_at=None, vector=None, embedding_model="", now=service.clock()
    )
    return first.memory.id, second.memory.id


async def test_a_link_keeps_both_active_and_names_the_older(service: MemoryService) -> None:
    older, newer = await _linked(service, "Ich wohne in München", "Ich bin nach Hamburg gezogen")
    row = await service.get(newer)
    assert row is not None and row.restates == older and row.status is Status.ACTIVE
    assert (await service.get(older)).status is Status.ACTIVE
    assert row.to_json()["restates"] == older
    # The idle pass reads only the open links, not every memory.
    assert [m.id for m in await service.store.list(user=service.user, linked=True)] == [newer]


async def test_the_same_fact_supersedes_the_older_restorably(service: MemoryService) -> None:
    older, newer = await _linked(service, "J'habite à Lyon", "J'ai déménagé à Marseille")
    assert await service.settle(newer, same_fact=True, origin="agent", reason="decided later by the model") == [older]
    old_row, new_row = await service.get(older), await service.get(newer)
    assert old_row.status is Status.SUPERSEDED and old_row.superseded_by == newer
    assert new_row.restates is None
    [entry] = [e for e in await service.audit(older) if e.action is AuditAction.SUPERSEDE]
    assert "decided later by the model" in entry.reason
    restored, _ = await service.restore(older)
    assert restored.status is Status.ACTIVE
    # Decided once: a second decision finds no open link.
    assert await service.settle(newer, same_fact=True, origin="agent", reason="again") is None


async def test_another_fact_only_drops_the_link(service: MemoryService) -> None:
    older, newer = await _linked(service, "我住在北京", "我喜欢喝咖啡")
    assert await service.settle(newer, same_fact=False, origin="agent", reason="decided later by the model") == []
    assert (await service.get(older)).status is Status.ACTIVE
    assert (await service.get(newer)).restates is None
    assert [e.action for e in await service.audit(newer)][-1] is AuditAction.UNLINK
