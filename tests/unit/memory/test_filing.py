"""/remember files a note by rule and, with a fast model, by the model's validated choice.

The choice comes with the identity judgement the write path already asks for (one
call, no new one), over real HTTP from the loopback fake server, scripted by system
prompt; it is accepted only as one of the four categories with the scope that
category lives in. Missing, malformed or inconsistent choices, or a late answer, leave
the rule's and never lose the note.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from memtest_support import PROJECT_A, PROJECT_B

from qwenmem_tui.memory.filing import parse_filing
from qwenmem_tui.memory.judge import JUDGE_SYSTEM_PROMPT
from qwenmem_tui.memory.model import GLOBAL_SCOPE, Category, RememberRequest, Status
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.subject import file_note
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, by_system_prompt


def answer_judge(fake: FakeOpenAI, answer: Callable[[dict[str, Any]], Reply]) -> None:
    fake.responder = by_system_prompt({JUDGE_SYSTEM_PROMPT: answer})


def judge_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [b for b in fake.chat_requests if b["messages"][0]["content"] == JUDGE_SYSTEM_PROMPT]


ADD_AS_USER = '{"action": "add", "id": null, "category": "user", "scope": "global"}'


def test_only_a_known_category_with_its_own_scope_is_a_choice() -> None:
    assert parse_filing('{"category": "user", "scope": "global"}') is Category.USER
    assert parse_filing('```json\n{"category": " Project ", "scope": "project"}\n```') is Category.PROJECT
    assert parse_filing('Sure! {"action": "add", "category": "reference"}') is Category.REFERENCE
    for bad in (
        '{"category": "user", "scope": "project"}',  # the person's facts live in every project
        '{"category": "project", "scope": "global"}',  # a project fact must not leak
        '{"category": "personal", "scope": "global"}',
        '{"category": ["user"]}',
        '{"action": "add", "id": null}',  # no choice made
        '["user"]',
        "user",
        "",
        '{"category": "user", "scope": 3}',
    ):
        assert parse_filing(bad) is None, bad


async def test_with_its_judgement_the_model_files_the_note_where_it_belongs(
    judged: MemoryService, fake: FakeOpenAI
) -> None:
    answer_judge(fake, lambda _b: Reply(ADD_AS_USER))
    first = await judged.remember(RememberRequest("Dario plays football on Sundays", project=PROJECT_A))
    assert judge_requests(fake) == []  # nothing to judge yet: no model call, the rule files it
    assert (first.memory.category, first.memory.key) == (Category.PROJECT, "dario")
    note = "Dario plays the piano"
    assert file_note(note).category is Category.PROJECT  # the rule: another person
    result = await judged.remember(RememberRequest(note, project=PROJECT_A))
    [request] = judge_requests(fake)  # the one call the write path makes anyway
    assert request["model"] == "test-fast" and '"scope"' in request["messages"][0]["content"]
    m = result.memory
    assert (m.category, m.scope, m.key, m.status) == (Category.USER, GLOBAL_SCOPE, "dario", Status.ACTIVE)
    [created] = [e for e in await judged.audit(m.id) if e.action.value == "create"]
    assert "filed under user by the model (rule: project)" in created.reason
    # Both kept; the person's own fact follows them to every project.
    assert (await judged.get(first.memory.id)).status is Status.ACTIVE
    assert m.id in [x.id for x in await judged.list(project=PROJECT_B, statuses=[Status.ACTIVE])]


@pytest.mark.parametrize(
    "answer",
    [
        '{"action": "add", "id": null, "category": "user", "scope": "project"}',
        '{"action": "add", "id": null, "category": "family"}',
        '{"action": "add", "id": null}',
        '{"action": "add", "id": null, "category": "user", "scope": "global",}',  # not JSON
    ],
)
async def test_an_invalid_choice_leaves_the_rule_s(judged: MemoryService, fake: FakeOpenAI, answer: str) -> None:
    answer_judge(fake, lambda _b: Reply(answer))
    await judged.remember(RememberRequest("Dario plays football on Sundays", project=PROJECT_A))
    result = await judged.remember(RememberRequest("Dario plays the piano", project=PROJECT_A))
    assert len(judge_requests(fake)) == 1
    m = result.memory
    assert (m.category, m.scope, m.key, m.status) == (Category.PROJECT, PROJECT_A, "dario_2", Status.ACTIVE)


async def test_an_update_stays_where_its_memory_is_and_a_named_category_is_kept(
    judged: MemoryService, fake: FakeOpenAI
) -> None:
    first = await judged.remember(RememberRequest("my favourite editor is vim", project=PROJECT_A))
    answer_judge(
        fake,
        lambda _b: Reply(json.dumps({"action": "update", "id": first.memory.id, "category": "project", "scope": "project"})),
    )
    result = await judged.remember(RememberRequest("I switched to helix as my editor", project=PROJECT_A))
    assert result.superseded == [first.memory.id] and result.memory.category is Category.USER
    answer_judge(fake, lambda _b: Reply(ADD_AS_USER))
    await judged.remember(RememberRequest("Dario plays football on Sundays", project=PROJECT_A, category="project"))
    named = await judged.remember(RememberRequest("Dario plays the piano", project=PROJECT_A, category="project"))
    assert named.memory.category is Category.PROJECT  # the writer named it: never refiled


async def test_a_late_judgement_never_holds_or_loses_the_note(judged: MemoryService, fake: FakeOpenAI) -> None:
    await judged.remember(RememberRequest("Dario plays football on Sundays", project=PROJECT_A))
    gate = threading.Event()
    answer_judge(fake, lambda _b: Reply(ADD_AS_USER, gate=gate))
    try:
        late = await judged.writer.remember(RememberRequest("Dario plays the piano", project=PROJECT_A, judge_timeout=0.2))
    finally:
        gate.set()
    assert (late.memory.category, late.memory.scope, late.memory.status) == (Category.PROJECT, PROJECT_A, Status.ACTIVE)
