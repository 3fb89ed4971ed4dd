"""The TUI and the daemon get the same features from the one core assembly.

Both faces are started for real on the same home and settings — the Textual app driven
by Pilot, the daemon through its ASGI app with its lifespan — and the chat session each
ends up with is compared: its hooks (types, in order), the tools offered to the model,
the system prompt, and compaction's hand-over going to that session's own extractor.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest
from app_support import started
from starlette.testclient import TestClient

from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.server import create_app as create_daemon
from qwenmem_tui.features.memory.extract import MemoryExtractionHook
from qwenmem_tui.llm.local_server import LocalChatDefaults
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI
from qwenmem_tui.tui.app import create_app

LOCAL = LocalChatDefaults(
    system_prompt="You are a small local model.",
    max_tokens=256,
    context_window=4096,
    supports_tools=False,
)


@dataclass(frozen=True)
class Seen:
    """What a face's chat session was given, in comparable form."""

    hooks: tuple[str, ...]
    tools: tuple[str, ...]
    system_prompt: str
    handed_to_own_extractor: bool


def seen(chat: ChatSession) -> Seen:
    compaction = next(h for h in chat.hooks if type(h).__name__ == "CompactionHook")
    extraction = next(h for h in chat.hooks if isinstance(h, MemoryExtractionHook))
    hand_over = compaction._extract  # the callable compaction was built with
    return Seen(
        hooks=tuple(type(hook).__name__ for hook in chat.hooks),
        tools=tuple(schema["function"]["name"] for schema in chat.tools.schemas()),
        system_prompt=chat.system_prompt,
        handed_to_own_extractor=getattr(hand_over, "__self__", None) is extraction,
    )


async def tui_session(
    settings: Settings, paths: Paths, project: Path, defaults: LocalChatDefaults | None
) -> Seen:
    app = create_app(settings, paths, cwd=project, model_defaults=defaults)
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot)
        return seen(app.session)


def daemon_session(
    settings: Settings, paths: Paths, project: Path, defaults: LocalChatDefaults | None
) -> Seen:
    daemon = create_daemon(settings, paths, project_root=project, model_defaults=defaults)
    with TestClient(daemon) as client:
        session_id = client.post("/session", json={}).json()["sessionId"]
        reply = client.post(f"/session/{session_id}/prompt", json={"text": "hello"})
        assert reply.status_code == 200, reply.text
        chat = daemon.state.backend.chat(session_id)
        assert chat is not None
        return seen(chat)


@pytest.mark.parametrize("defaults", [None, LOCAL], ids=["endpoint", "local-model-without-tools"])
def test_tui_and_daemon_get_identical_features(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI, defaults: LocalChatDefaults | None
) -> None:
    settings.compaction.enabled = True
    settings.memory.enabled = True
    settings.memory.extraction = False  # no background model calls racing the test

    tui = asyncio.run(tui_session(settings, paths, project, defaults))
    daemon = daemon_session(settings, paths, project, defaults)

    assert tui == daemon
    # Compaction first (it rebuilds the request memory's reminder then lands in).
    assert tui.hooks == (
        "CompactionHook", "MemoryPrefetchHook", "MemoryReceiptHook", "MemoryExtractionHook"
    )
    assert tui.handed_to_own_extractor
    if defaults is None:
        assert set(tui.tools) == {"read_file", "list_directory", "save_memory"}
        assert tui.system_prompt != LOCAL.system_prompt
    else:  # a model that cannot call tools is offered none, by either face
        assert tui.tools == ()
        assert tui.system_prompt == LOCAL.system_prompt


def test_settings_decide_the_features_of_both_faces(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    settings.compaction.enabled = False
    settings.memory.enabled = False

    async def tui_hooks() -> tuple[str, ...]:
        app = create_app(settings, paths, cwd=project)
        async with app.run_test(size=(100, 30)) as pilot:
            await started(pilot)
            return tuple(type(h).__name__ for h in app.session.hooks)

    daemon = create_daemon(settings, paths, project_root=project)
    with TestClient(daemon) as client:
        session_id = client.post("/session", json={}).json()["sessionId"]
        client.post(f"/session/{session_id}/prompt", json={"text": "hello"})
        chat = daemon.state.backend.chat(session_id)
        assert chat is not None
        daemon_hooks = tuple(type(h).__name__ for h in chat.hooks)
        daemon_tools = {s["function"]["name"] for s in chat.tools.schemas()}

    assert asyncio.run(tui_hooks()) == daemon_hooks == ()
    assert daemon_tools == {"read_file", "list_directory"}
