"""Memory through the daemon: the same hooks and tool as the TUI, per session."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from qwenmem_tui.config import Settings
from qwenmem_tui.features.memory.extract import EXTRACTION_SYSTEM_PROMPT
from qwenmem_tui.memory.model import Status
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec


def prompt(client: TestClient, session_id: str, text: str) -> str:
    response = client.post(f"/session/{session_id}/prompt", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()["reply"]


@pytest.mark.usefixtures("embedder")
def test_saved_memory_is_recalled_in_another_session(
    make_daemon, fake: FakeOpenAI, settings: Settings
) -> None:
    settings.memory.initial_wait_ms = 5000  # deterministic: wait for recall (it is fast)
    saved = {"category": "user", "key": "preferred_language", "value": "The user prefers Rust for CLIs."}
    fake.script(
        Reply(tool_calls=[ToolCallSpec("save_memory", saved, id="m1")]),
        Reply("Noted."),
        Reply("You like Rust."),
    )
    with TestClient(make_daemon()) as client:
        first = client.post("/session").json()["sessionId"]
        assert prompt(client, first, "Remember that I prefer Rust for CLIs.") == "Noted."
        tool_result = fake.chat_requests[-1]["messages"][-1]
        assert tool_result["role"] == "tool" and "error" not in tool_result["content"].lower()

        second = client.post("/session").json()["sessionId"]
        assert prompt(client, second, "Which language do I like for CLIs?") == "You like Rust."
    user_message = fake.chat_requests[-1]["messages"][-1]
    assert user_message["role"] == "user"
    assert "<system-reminder>" in user_message["content"]
    assert "The user prefers Rust for CLIs." in user_message["content"]


async def test_extraction_runs_and_is_drained_at_shutdown(
    make_daemon, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path
) -> None:
    settings.memory.extraction = True
    proposal = {"memories": [{"category": "user", "key": "editor", "value": "The user uses Helix."}]}

    def respond(body: dict) -> Reply:
        if body["messages"][0]["content"] == EXTRACTION_SYSTEM_PROMPT:
            return Reply(json.dumps(proposal))
        return Reply("Helix is a fine editor.")

    fake.responder = respond

    def run_daemon() -> None:
        with TestClient(make_daemon()) as client:
            session_id = client.post("/session").json()["sessionId"]
            assert prompt(client, session_id, "I use Helix as my editor.") == "Helix is a fine editor."

    await asyncio.to_thread(run_daemon)  # leaving the block shuts the daemon down
    service = await MemoryService.open(settings, paths)
    try:
        memories = await service.list(project=project_id(project))
    finally:
        await service.close()
    assert [(m.key, m.value) for m in memories] == [("editor", "The user uses Helix.")]


def reminders(body: dict) -> list[str]:
    """The system-reminder blocks of one request, wherever they sit."""
    text = json.dumps(body["messages"], ensure_ascii=False)
    return re.findall(r"<system-reminder>.*?</system-reminder>", text)


def test_one_truth_per_fact_in_a_running_daemon_session_over_http(
    make_daemon, serve_live, fake: FakeOpenAI, settings: Settings, paths: Paths
) -> None:
    """Issue 14 end to end: a restated fact supersedes the old one, and the running
    session's very next request carries only the current value — also after another
    process forgets it."""
    settings.memory.initial_wait_ms = 30_000  # deterministic: wait for recall (it is fast)

    def save(value: str) -> Reply:
        args = {"category": "project", "key": "deploy_target", "value": value}
        return Reply(tool_calls=[ToolCallSpec("save_memory", args)])

    fake.script(
        save("Deploys go to staging"), Reply("Saved."),
        Reply("Noted."),
        save("Deploys go to prod"), Reply("Updated."),
        Reply("Noted."),
        Reply("Noted."),
    )
    with serve_live(make_daemon()) as url, httpx.Client(base_url=url, timeout=60) as http:
        session = http.post("/session").json()["sessionId"]

        def ask(text: str) -> None:
            response = http.post(f"/session/{session}/prompt", json={"text": text})
            assert response.status_code == 200, response.text

        ask("remember that we deploy to staging")
        ask("where do we deploy?")
        assert any("Deploys go to staging" in r for r in reminders(fake.chat_requests[-1]))
        ask("we deploy to prod from now on, save it")
        # Already in the request after the tool result: the block now says prod.
        after_tool = reminders(fake.chat_requests[-1])
        assert after_tool and not any("staging" in r for r in after_tool)
        ask("so where do we deploy?")
        blocks = reminders(fake.chat_requests[-1])
        assert sum("Deploys go to prod" in r for r in blocks) == 1
        assert not any("staging" in r for r in blocks)

        async def forget_elsewhere() -> None:
            other = await MemoryService.open(settings, paths)
            try:
                [prod] = await other.list(statuses=[Status.ACTIVE])
                assert prod.value == "Deploys go to prod"
                assert await other.forget(prod.id) is not None
            finally:
                await other.close()

        asyncio.run(forget_elsewhere())
        ask("and now?")
        assert not any("Deploys go to" in r for r in reminders(fake.chat_requests[-1]))


def test_the_daemon_keeps_explicit_keys_and_every_distinct_fact(
    make_daemon, fake: FakeOpenAI, settings: Settings, paths: Paths
) -> None:
    """Issue 24: three facts about one person saved by the model over HTTP stay three,
    each under the key the model gave; a restated one still replaces its old value."""
    facts = [
        ("project", "ana_role", "Ana leads the backend team"),
        ("project", "ana_meetings", "Ana: prefers short meetings before noon"),
        ("project", "ana_remote", "Ana: works remotely on Fridays"),
        ("project", "ana_city", "Ana lives in Porto"),
        ("project", "ana_home", "Ana moved to Lisbon"),
    ]
    script = []
    for category, key, value in facts:
        args = {"category": category, "key": key, "value": value}
        script += [Reply(tool_calls=[ToolCallSpec("save_memory", args)]), Reply("Saved.")]
    fake.script(*script)
    with TestClient(make_daemon()) as client:
        session_id = client.post("/session").json()["sessionId"]
        for _, _, value in facts:
            assert prompt(client, session_id, f"remember: {value}") == "Saved."

    async def active() -> list[tuple[str, str]]:
        service = await MemoryService.open(settings, paths)
        try:
            return [(m.key, m.value) for m in await service.list(statuses=[Status.ACTIVE])]
        finally:
            await service.close()

    assert asyncio.run(active()) == [(k, v) for _, k, v in facts[:3]] + [("ana_home", "Ana moved to Lisbon")]
