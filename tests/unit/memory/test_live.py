"""Delivered memories as they stand now (issue 14 item 2), on the real SQLite store."""

from __future__ import annotations

from memtest_support import PROJECT_A, PROJECT_B, Clock

from qwenmem_tui.memory.model import DAY, RememberRequest, WriteRequest
from qwenmem_tui.memory.service import MemoryService


async def deploy(service: MemoryService, where: str, project: str = PROJECT_A) -> int:
    result = await service.save(
        WriteRequest(
            "project", "deploy_target", f"Deploys go to {where}", origin="user", project=project
        )
    )
    return result.memory.id


async def test_a_chain_of_restatements_stands_as_its_latest_value(service: MemoryService) -> None:
    first = await deploy(service, "staging")
    await deploy(service, "canary")
    last = await deploy(service, "prod")
    answer = await service.live([(first,)], None, project=PROJECT_A)
    assert answer is not None
    [group] = answer.groups
    assert group.ids == (last,) and "Deploys go to prod" in group.block
    assert "staging" not in group.block and "canary" not in group.block


async def test_one_memory_is_shown_once_and_gone_ones_leave(service: MemoryService) -> None:
    staging = await deploy(service, "staging")
    editor = (await service.remember(RememberRequest("my favourite editor is vim", project=PROJECT_A))).memory.id
    prod = await deploy(service, "prod")
    await service.forget(editor)
    answer = await service.live([(staging, editor), (prod,)], None, project=PROJECT_A)
    assert answer is not None
    assert [g.ids for g in answer.groups] == [(prod,), ()]
    assert answer.groups[1].block == ""


async def test_nothing_changed_costs_no_row_read_until_an_expiry(
    service: MemoryService, clock: Clock
) -> None:
    staging = await service.save(
        WriteRequest(
            "reference", "runbook", "Runbook at wiki/runbook", origin="user", project=PROJECT_A,
            ttl_days=2,
        )
    )
    first = await service.live([(staging.memory.id,)], None, project=PROJECT_A)
    assert first is not None and first.freshness.valid_until == staging.memory.expires_at
    assert await service.live([(staging.memory.id,)], first.freshness, project=PROJECT_A) is None
    clock.advance(3 * DAY)
    expired = await service.live([(staging.memory.id,)], first.freshness, project=PROJECT_A)
    assert expired is not None and expired.groups[0].ids == ()


async def test_another_project_s_memory_never_stands_in(service: MemoryService) -> None:
    here = await deploy(service, "staging")
    await deploy(service, "prod", project=PROJECT_B)  # same key, another scope: no successor
    answer = await service.live([(here,)], None, project=PROJECT_A)
    assert answer is not None and answer.groups[0].ids == (here,)
    elsewhere = await service.live([(here,)], None, project=PROJECT_B)
    assert elsewhere is not None and elsewhere.groups[0].ids == ()
