"""The first message of a launch carries its memory in its first request (issue #30).

Memory opens behind the first frame (the embedder and the index: ~0.5-2 s), so a
message typed or sent right after launch used to find no recall that could settle in
time. Here the embedder's opening and the model's start are held by events the test
releases, never by sleeps: what was typed while the app started is warmed as soon as
it is idle, and a message sent while memory still opens waits for its recall.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from qwenmem_tui.config import Settings
from qwenmem_tui.features.memory import prefetch as prefetch_module
from qwenmem_tui.memory import service as service_module
from qwenmem_tui.features.memory.feature import MEMORY_SESSION
from qwenmem_tui.memory.recall import Recaller
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.runtime import ModelStarter
from qwenmem_tui.testing.fake_openai import FakeOpenAI
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.widgets.prompt import PromptInput
from qwenmem_tui.memory.model import WriteRequest

from .conftest import FakeClock, settle, started, wait_until

SIZE = (100, 30)
FACT = "The staging database runs on port 6543"
QUESTION = "Which port does the staging database use?"


@pytest.fixture
async def remembered(settings: Settings, paths: Paths, project: Path, clock: FakeClock) -> None:
    """A memory of this project, saved in an earlier session."""
    service = await MemoryService.open(settings, paths, clock=clock)
    try:
        await service.save(
            WriteRequest(
                "project",
                "staging_db_port",
                FACT,
                origin="user",
                project=project_id(project),
            )
        )
    finally:
        await service.close()


@pytest.fixture
def embedder_gate(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Memory's embedder is chosen (and loaded) only once the test sets this event."""
    gate = asyncio.Event()
    choose = service_module._choose_embedder

    async def gated(*args: Any, **kwargs: Any) -> Any:
        await gate.wait()
        return await choose(*args, **kwargs)

    monkeypatch.setattr(service_module, "_choose_embedder", gated)
    # However slow the machine: the test's gates decide the order, not this bound.
    monkeypatch.setattr(prefetch_module, "OPENING_WAIT_S", 60.0)
    return gate


def first_chat_request(fake: FakeOpenAI) -> dict:
    return [body for body in fake.chat_requests if body["model"] == "test-model"][0]


def carries_the_fact(request: dict) -> bool:
    user = request["messages"][-1]
    return user["role"] == "user" and "<system-reminder>" in user["content"] and FACT in user["content"]


async def test_text_typed_while_starting_is_warmed_when_the_app_is_idle(
    remembered: None, embedder_gate: asyncio.Event, fake: FakeOpenAI, llm: LLMClient,
    make_app: Callable[..., QwenmemApp],
) -> None:
    model_gate = asyncio.Event()

    async def start_model(progress: Callable[[str], None]) -> LLMClient:
        await model_gate.wait()
        return llm

    app = make_app(extensions=[memory_extension], llm=None,
                   start_model=ModelStarter(label="gated", start=start_model))
    async with app.run_test(size=SIZE) as pilot:
        try:
            prompt = app.screen.query_one(PromptInput)
            prompt.insert(QUESTION)  # typed at launch; the pause passes while still starting
            await wait_until(pilot, lambda: app.screen._warm_timer is None)
            assert app.state == "starting"
            model_gate.set()
            await started(pilot)
            prefetch = app.session_features.handle(MEMORY_SESSION).prefetch
            assert prefetch is not None
            # Idle: the typed text is warmed without another pause; memory still opens.
            await wait_until(pilot, lambda: prefetch.warm_handle is not None)
            assert prefetch.warm_handle.text == QUESTION and prefetch.memory_opening
        finally:
            embedder_gate.set()  # the embedder became ready while the user was typing
        await wait_until(pilot, lambda: prefetch.warm_handle.settled)
        await pilot.press("enter")
        await settle(pilot)
    assert carries_the_fact(first_chat_request(fake))
    assert prefetch.stats.warm_adopted == 1


async def test_a_message_sent_while_memory_opens_waits_for_its_recall(
    remembered: None, embedder_gate: asyncio.Event, fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
) -> None:
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        try:
            await started(pilot)
            prefetch = app.session_features.handle(MEMORY_SESSION).prefetch
            # The rows are open; the vectors (the embedder) are not: still opening.
            assert prefetch is not None and prefetch.memory_opening
            prompt = app.screen.query_one(PromptInput)
            prompt.insert(QUESTION)
            await pilot.press("enter")  # before any pause could warm it
            await wait_until(pilot, lambda: prefetch.handle is not None)
            assert not fake.chat_requests  # held: memory is still opening
        finally:
            embedder_gate.set()  # a failure must not leave the app's close waiting on it
        await settle(pilot)
    assert carries_the_fact(first_chat_request(fake))


async def test_once_memory_is_open_a_request_never_waits_for_recall(
    remembered: None, embedder_gate: asyncio.Event, fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch,
) -> None:
    embedder_gate.set()
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        prefetch = app.session_features.handle(MEMORY_SESSION).prefetch
        assert prefetch is not None
        await wait_until(pilot, lambda: not prefetch.memory_opening)
        recall_gate = asyncio.Event()
        recall = prefetch._recall

        async def slow_recall(*args: Any, **kwargs: Any) -> Any:
            await recall_gate.wait()
            return await recall(*args, **kwargs)

        monkeypatch.setattr(prefetch, "_recall", slow_recall)
        prompt = app.screen.query_one(PromptInput)
        prompt.insert(QUESTION)
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(fake.chat_requests))  # went without waiting
        recall_gate.set()
        await settle(pilot)
    assert not carries_the_fact(first_chat_request(fake))


async def test_memory_opens_until_one_recall_has_readied_the_embedder(
    remembered: None, embedder_gate: asyncio.Event, fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The embedder's first inference and the spaces recall reads at its first use
    belong to memory's opening: one unrecorded recall runs once the vectors load, and
    a message sent meanwhile waits for its own (slow, as a first one is) recall
    instead of going without (under load, 1 of 8 typed at launch went without)."""
    embedder_gate.set()
    warming, warm_gate, query_gate = asyncio.Event(), asyncio.Event(), asyncio.Event()
    recall = Recaller.recall

    async def gated(self: Recaller, query: str, **kwargs: Any) -> Any:
        if kwargs.get("record") is False:
            warming.set()
            await warm_gate.wait()  # the warm-up, held
        else:
            await query_gate.wait()  # the message's own recall, as slow as a first one
        return await recall(self, query, **kwargs)

    monkeypatch.setattr(Recaller, "recall", gated)
    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        try:
            await started(pilot)
            prefetch = app.session_features.handle(MEMORY_SESSION).prefetch
            assert prefetch is not None
            await wait_until(pilot, warming.is_set)
            assert prefetch.memory_opening  # the vectors are loaded, the warm-up runs
            prompt = app.screen.query_one(PromptInput)
            prompt.insert(QUESTION)
            await pilot.press("enter")
            await wait_until(pilot, lambda: prefetch.handle is not None)
            assert not fake.chat_requests  # held: memory is still opening
            query_gate.set()
            await wait_until(pilot, lambda: bool(fake.chat_requests))
        finally:
            query_gate.set()
            warm_gate.set()
        await settle(pilot)
        assert not prefetch.memory_opening
    assert carries_the_fact(first_chat_request(fake))
