"""A memory budget (issue 39): `memory.max_tokens` bounds the recalled block, the
receipt says what its memories cost, and `memory stats` the tokens per reply."""

from __future__ import annotations

from memtest_support import PROJECT_A, make_settings

from qwenmem_tui.memory.metrics import compute_stats, token_bucket
from qwenmem_tui.features.memory.receipts import Receipt, count_line
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
