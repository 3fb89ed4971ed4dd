"""The current fact first (issue 39): recall ranks a fact's newest version before any
older one, whatever their own scores, and between equals the more recent."""

from __future__ import annotations

from memtest_support import PROJECT_A

from qwenmem_tui.memory.model import GLOBAL_SCOPE, Category, MemoryDraft, Origin, WriteRequest
from qwenmem_tui.memory.service import MemoryService


async def linked(service: MemoryService, older: str, newer: str) -> tuple[int, int]:
    """Two active rows, the newer naming the older as the fact it may restate (the
    identity link, left undecided)."""
    first = await service.save(
        WriteRequest("user", "home_city", older, origin="user", project=PROJECT_A)
    )
    draft = MemoryDraft(
        Category.USER, "moved_to", newer, Origin.USER, GLOBAL_SCOPE, service.user,
        restates=first.memory.id, dedupe=False,
    )
    second = await service.store.write(
        draft, flags=[], expires_at=None, vector=None, embedding_model="", now=service.clock() + 60
    )
    return first.memory.id, second.memory.id


async def test_the_newer_version_ranks_before_the_older_that_matches_better(
    service: MemoryService,
) -> None:
    older, newer = await linked(service, "I live in Sao Paulo, Brazil", "I moved to Berlin")
    # The older one holds more of the question's words: on its own it ranks first.
    found = await service.recall("do I live in Sao Paulo or in Berlin?", project=PROJECT_A)
    assert found.ids[:2] == [newer, older]


async def test_a_newer_version_neither_channel_found_still_goes_first(service: MemoryService) -> None:
    """The newer version says nothing the question says (other words, no vector yet):
    recall still shows it before the older one, which is marked as earlier."""
    older, newer = await linked(service, "I live in Sao Paulo, Brazil", "Berlin since March")
    found = await service.recall("do I live in Sao Paulo?", project=PROJECT_A)
    assert found.ids[:2] == [newer, older]
    assert found.later[older].id == newer
    assert "an earlier version: moved_to" in found.block
