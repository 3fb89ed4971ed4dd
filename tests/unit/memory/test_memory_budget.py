"""A memory budget (issue 39): `memory.max_tokens` bounds the recalled block, the
receipt says what its memories cost, and `memory stats` the tokens per reply."""

from __future__ import annotations

import logging

import pytest
from memtest_support import PROJECT_A, make_settings

from qwenmem_tui.memory.metrics import compute_stats, token_bucket
from qwenmem_tui.features.memory.receipts import Receipt, count_line
from qwenmem_tui.memory.model import Category, Memory, Origin, Status
from qwenmem_tui.memory.recall import (
    CLIP_MARK,
    MIN_CLIPPED_CHARS,
    Candidate,
    fitted_block,
    within_budget,
)
from qwenmem_tui.memory.render import render_block
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths
from qwenmem_tui.text import estimate_text_tokens
from qwenmem_tui.memory.model import WriteRequest

LONG = "The deploy checklist: " + "verify the staging smoke tests and the canary dashboards, " * 12


async def test_the_block_stays_within_max_tokens(mem_paths: Paths) -> None:
    service = await MemoryService.open(make_settings(max_tokens=150), mem_paths)
    try:
        await service.save(
            WriteRequest("project", "deploy_checklist", LONG, origin="user", project=PROJECT_A)
        )
        await service.save(
            WriteRequest(
                "project",
                "deploy_day",
                "We deploy on Fridays",
                origin="user",
                project=PROJECT_A,
            )
        )
        found = await service.recall("deploy checklist Fridays", project=PROJECT_A)
    finally:
        await service.close()
    # The long note alone would pass the budget: it is left out, the short one kept.
    assert [m.key for m in found.memories] == ["deploy_day"]
    assert found.tokens == estimate_text_tokens(found.block) <= 150


async def test_without_a_budget_both_come(mem_paths: Paths) -> None:
    service = await MemoryService.open(make_settings(max_tokens=0), mem_paths)
    try:
        await service.save(
            WriteRequest("project", "deploy_checklist", LONG, origin="user", project=PROJECT_A)
        )
        await service.save(
            WriteRequest(
                "project",
                "deploy_day",
                "We deploy on Fridays",
                origin="user",
                project=PROJECT_A,
            )
        )
        found = await service.recall("deploy checklist Fridays", project=PROJECT_A)
    finally:
        await service.close()
    assert sorted(m.key for m in found.memories) == ["deploy_checklist", "deploy_day"]
    assert found.tokens > 150


def test_the_receipt_line_says_the_tokens_and_keeps_them() -> None:
    assert count_line(2, 86) == "⌁ 2 memories · 86 tokens"
    assert count_line(1) == "⌁ 1 memory"
    assert Receipt.from_meta(Receipt(tokens=86).to_meta()).tokens == 86


def test_stats_report_tokens_per_reply_p50_and_p95() -> None:
    counters = {token_bucket(t): 0.0 for t in ()}
    for tokens in [40] * 10 + [120] * 9 + [700]:
        key = token_bucket(tokens)
        counters[key] = counters.get(key, 0.0) + 1
    stats = compute_stats(counters, {})
    assert (stats.tokens_at(0.5), stats.tokens_at(0.95)) == (50, 125)
    assert stats.to_json()["memory_tokens_per_reply"] == {"replies": 20, "p50": 50, "p95": 125}
    assert "memory tokens/reply  p50 ≤50, p95 ≤125" in stats.to_text()


def _noted(memory_id: int, value: str) -> Candidate:
    memory = Memory(
        id=memory_id, category=Category.PROJECT, key=f"deploy_step_{memory_id}", value=value,
        origin=Origin.USER, status=Status.ACTIVE, scope="p", user="u", created_at=100.0 + memory_id,
        updated_at=100.0 + memory_id, flags=[], expires_at=None,
    )
    return Candidate(memory, 1.0 / memory_id, 0.9, None, 0.0)


def test_the_notes_that_mark_earlier_versions_count_against_the_budget() -> None:
    """e2e9: three linked versions of a long note, each costed without its "an earlier
    version: …, may replace it" note, made a block of 322 tokens for a budget of 300."""
    step = "A telepítési folyamatunk lépései: először lefut a teljes tesztkészlet. "
    ranked = [_noted(1, step * 3), _noted(2, step * 5), _noted(3, step * 3)]
    newer = ranked[0].memory
    marks = {2: newer, 3: newer}  # both older versions of the first
    now = 200.0
    plain = within_budget(ranked, now, 0)
    budget = estimate_text_tokens(render_block([c.memory for c in plain], now)) + 5
    assert estimate_text_tokens(render_block([c.memory for c in plain], now, marks)) > budget
    kept, later, block = fitted_block(within_budget(ranked, now, budget), [], marks, now, budget)
    assert estimate_text_tokens(block) <= budget
    assert [c.memory.id for c in kept] == [1, 2]  # the lowest ranked left out, the order kept
    assert later == {2: newer} and "an earlier version" in block


async def test_a_memory_longer_than_the_budget_comes_cut_to_it(mem_paths: Paths) -> None:
    """e2e10: every deploy note longer than `max_tokens = 300` left the model with no
    memory at all while recall found five: the best one comes, cut to what fits."""
    service = await MemoryService.open(make_settings(max_tokens=150), mem_paths)
    try:
        await service.save(
            WriteRequest("project", "deploy_checklist", LONG, origin="user", project=PROJECT_A)
        )
        found = await service.recall("deploy checklist canary", project=PROJECT_A)
    finally:
        await service.close()
    [memory] = found.memories
    assert memory.key == "deploy_checklist" and memory.value.endswith(CLIP_MARK)
    assert LONG.startswith(memory.value.removesuffix(CLIP_MARK))
    assert len(memory.value) > MIN_CLIPPED_CHARS
    assert found.tokens == estimate_text_tokens(found.block) <= 150


async def test_a_budget_nothing_fits_says_so(
    mem_paths: Paths, caplog: pytest.LogCaptureFixture
) -> None:
    """A budget smaller than the block's own header holds no memory: none comes, and
    the debug log says the budget was why (not that nothing was found)."""
    service = await MemoryService.open(make_settings(max_tokens=40), mem_paths)
    try:
        await service.save(
            WriteRequest("project", "deploy_checklist", LONG, origin="user", project=PROJECT_A)
        )
        with caplog.at_level(logging.INFO, logger="qwenmem.memory"):
            found = await service.recall("deploy checklist canary", project=PROJECT_A)
    finally:
        await service.close()
    assert found.memories == [] and found.block == ""
    assert "none of 1 memories found fits memory.max_tokens = 40" in caplog.text
