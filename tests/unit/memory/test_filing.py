"""/remember files a note by rule and, with a fast model, by the model's validated choice.

The model's answer arrives over real HTTP from the loopback fake server, scripted by
system prompt; it is accepted only as one of the four categories with the scope that
category lives in. Late, malformed or inconsistent answers leave the rule's choice and
never lose the note.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from memtest_support import PROJECT_A, PROJECT_B, Clock, make_settings

from qwenmem_tui.features.memory.filing import FILE_SYSTEM_PROMPT, parse_filing
from qwenmem_tui.features.memory.identity import file_note
from qwenmem_tui.features.memory.model import GLOBAL_SCOPE, Category, Status
from qwenmem_tui.features.memory.service import MemoryService
from qwenmem_tui.features.memory.writer import MemoryRejected
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, by_system_prompt


@pytest.fixture
async def filed(mem_paths: Paths, clock: Clock, llm: LLMClient) -> AsyncIterator[MemoryService]:
    svc = await MemoryService.open(make_settings(), mem_paths, clock=clock, llm=llm)
    try:
        yield svc
    finally:
        await svc.close()


def answer_filing(fake: FakeOpenAI, answer: Callable[[dict[str, Any]], Reply]) -> None:
    fake.responder = by_system_prompt({FILE_SYSTEM_PROMPT: answer})


def filing_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [b for b in fake.chat_requests if b["messages"][0]["content"] == FILE_SYSTEM_PROMPT]


def test_only_a_known_category_with_its_own_scope_is_a_choice() -> None:
    assert parse_filing('{"category": "user", "scope": "global"}') is Category.USER
    assert parse_filing('```json\n{"category": " Project ", "scope": "project"}\n```') is Category.PROJECT
    assert parse_filing('Sure! {"category": "reference"}') is Category.REFERENCE  # scope optional
    for bad in (
        '{"category": "user", "scope": "project"}',  # the person's facts live in every project
        '{"category": "project", "scope": "global"}',  # a project fact must not leak
        '{"category": "personal", "scope": "global"}',
        '{"category": ["user"]}',
        '{"scope": "global"}',
        '["user"]',
        "user",
        "",
        '{"category": "user", "scope": 3}',
    ):
        assert parse_filing(bad) is None, bad


async def test_the_model_files_what_the_words_mislead_the_rule_about(
    filed: MemoryService, fake: FakeOpenAI
) -> None:
    note = "Dario is allergic to peanuts"
    assert file_note(note).category is Category.PROJECT  # the rule: another person
    answer_filing(fake, lambda _b: Reply('{"category": "user", "scope": "global"}'))
    result = await filed.remember(note, project=PROJECT_A)
    [request] = filing_requests(fake)
    assert request["model"] == "test-fast" and json.loads(request["messages"][1]["content"]) == {"note": note}
    m = result.memory
    assert (m.category, m.scope, m.status) == (Category.USER, GLOBAL_SCOPE, Status.ACTIVE)
    [created] = [e for e in await filed.audit(m.id) if e.action.value == "create"]
    assert "filed under user by the model (rule: project)" in created.reason
    # A person's own fact follows them to every project.
    assert m.id in [x.id for x in await filed.list(project=PROJECT_B, statuses=[Status.ACTIVE])]


async def test_a_project_fact_the_model_files_stays_in_its_project(
    filed: MemoryService, fake: FakeOpenAI
) -> None:
    note = "my laptop builds the app in four minutes with make fast"
    answer_filing(fake, lambda _b: Reply('{"category": "project", "scope": "project"}'))
    result = await filed.remember(note, project=PROJECT_A)
    m = result.memory
    assert (m.category, m.scope) == (Category.PROJECT, PROJECT_A)
    assert m.id not in [x.id for x in await filed.list(project=PROJECT_B)]


@pytest.mark.parametrize(
    "answer",
    [
        '{"category": "user", "scope": "project"}',
        '{"category": "secrets"}',
        "I would file it under user.",
        '{"category": "feedback", "scope": "global",}',  # not JSON
    ],
)
async def test_an_invalid_answer_leaves_the_rule_s_choice(
    filed: MemoryService, fake: FakeOpenAI, answer: str
) -> None:
    answer_filing(fake, lambda _b: Reply(answer))
    result = await filed.remember("the staging server is stg-7.example.net", project=PROJECT_A)
    assert len(filing_requests(fake)) == 1
    m = result.memory
    assert (m.category, m.scope, m.key, m.status) == (Category.PROJECT, PROJECT_A, "staging_server", Status.ACTIVE)


async def test_a_late_model_or_a_failing_one_never_holds_or_loses_the_note(
    filed: MemoryService, fake: FakeOpenAI
) -> None:
    gate = threading.Event()
    answer_filing(fake, lambda _b: Reply('{"category": "user", "scope": "global"}', gate=gate))
    try:
        late = await filed.writer.remember(
            "the nightly backup runs at 02:00 on db-3", project=PROJECT_A, judge_timeout=0.2
        )
    finally:
        gate.set()
    assert (late.memory.category, late.memory.scope) == (Category.PROJECT, PROJECT_A)
    fake.responder = None
    fake.script(HTTPError(503, {"error": {"message": "overloaded"}}))
    failed = await filed.remember("I am allergic to cashews", project=PROJECT_A)
    assert failed.memory.category is Category.USER and failed.memory.status is Status.ACTIVE


async def test_a_named_category_is_never_asked_and_secrets_never_reach_the_model(
    filed: MemoryService, fake: FakeOpenAI
) -> None:
    answer_filing(fake, lambda _b: Reply('{"category": "user", "scope": "global"}'))
    named = await filed.remember("deploys need two approvals", project=PROJECT_A, category="project")
    assert named.memory.category is Category.PROJECT and filing_requests(fake) == []
    token = "ghp_R2d4F6h8J0k2L4m6N8p0Q2r4S6t8V0w2X4y6"
    await filed.remember(f"the release bot pushes with {token} to the mirror", project=PROJECT_A)
    assert filing_requests(fake) and all(token not in json.dumps(b) for b in fake.chat_requests)
    with pytest.raises(MemoryRejected, match="secret"):
        await filed.remember("my OpenAI key is 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", project=PROJECT_A)
