"""The daemon's routes to read and delete a session and to list / search / forget memory,
through the SDK against a live daemon, with the ownership rules of the other routes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon import DaemonClient, DaemonError
from qwenmem_tui.daemon.server import create_app
from qwenmem_tui.memory.model import Origin, WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec


def seed(settings: Settings, paths: Paths, project: Path, key: str, value: str) -> int:
    async def save() -> int:
        service = await MemoryService.open(settings, paths)
        try:
            result = await service.save(
                WriteRequest("project", key, value, origin=Origin.USER, project=project_id(project))
            )
        finally:
            await service.close()
        return result.memory.id

    return asyncio.run(save())


def test_read_and_delete_a_session(live_url: str, fake: FakeOpenAI, paths: Paths) -> None:
    fake.script(
        Reply("Looking.", tool_calls=[ToolCallSpec("read_file", {"path": "README.md"}, id="c1")]),
        Reply("It is a demo."),
    )
    with DaemonClient(live_url) as client:
        session_id = client.create_session("to read")
        assert client.prompt(session_id, "what is this?").reply == "Looking.\n\nIt is a demo."
        messages = client.messages(session_id)
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[0]["content"] == "what is this?"
        assert messages[1]["tool_calls"][0]["id"] == "c1"
        assert messages[2]["tool_call_id"] == "c1" and "Demo project" in messages[2]["content"]
        assert all(isinstance(m["createdAt"], float) for m in messages)
        copy = Path(client.delete_session(session_id))
        kept = json.loads(copy.read_text(encoding="utf-8"))
        assert kept["session"]["id"] == session_id and len(kept["items"]) >= 4
        assert copy.parent == paths.home / "trash" and (copy.stat().st_mode & 0o077) == 0
        for call in (lambda: client.messages(session_id), lambda: client.delete_session(session_id)):
            with pytest.raises(DaemonError) as gone:
                call()
            assert (gone.value.status, gone.value.code) == (404, "session_not_found")
        assert client.list_sessions() == []


def test_memory_routes_see_only_this_projects_memory(
    live_url: str, settings: Settings, paths: Paths, project: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    mine = seed(settings, paths, project, "deploy_script", "The deploy script is tools/ship.sh")
    theirs = seed(settings, paths, other, "deploy_target", "The other project deploys to fly.io")
    with DaemonClient(live_url) as client:
        assert [m["id"] for m in client.list_memories()] == [mine]
        assert client.list_memories(category="user") == []
        (hit,) = client.search_memory("where is the deploy script", k=3)
        assert hit["id"] == mine and hit["score"] > 0 and hit["origin"] == "user"
        assert theirs not in [m["id"] for m in client.search_memory("fly.io deploys", k=10)]
        assert client.forget_memory(theirs) is False
        assert client.forget_memory(mine) is True
        assert client.forget_memory(mine) is False
        assert client.list_memories() == []
        with pytest.raises(DaemonError) as bad:
            client.search_memory("x", k=0)
        assert (bad.value.status, bad.value.code) == (400, "invalid_request")
        with pytest.raises(DaemonError) as bad_category:
            client.list_memories(category="gossip")
        assert bad_category.value.status == 400
    for body in (b"{oops", b"[]", b'{"query": 3}'):
        response = httpx.post(f"{live_url}/memory/search", content=body)
        assert response.status_code == 400 and response.json()["code"] in ("invalid_json", "invalid_request")
    assert httpx.delete(f"{live_url}/memory/abc").status_code == 404


def test_memory_routes_need_the_token_and_memory(
    make_daemon, serve_live, token: str, settings: Settings, paths: Paths, project: Path
) -> None:
    with serve_live(make_daemon(token=token)) as url:
        assert httpx.get(f"{url}/memory").status_code == 401
        assert httpx.delete(f"{url}/session/abc").status_code == 401
    app = create_app(settings, paths, project_root=project, features={"compaction"})
    with serve_live(app) as url:
        response = httpx.get(f"{url}/memory")
    assert (response.status_code, response.json()["code"]) == (404, "memory_disabled")


def test_one_key_under_two_categories_is_two_memories_over_the_daemon(
    live_url: str, fake: FakeOpenAI
) -> None:
    """Issue 24: the model saves "ana" as a preference and as a fact about the person
    over HTTP; both stay, the routes list and forget each on its own, and a restated
    value replaces only its own category's."""
    saves = [
        ("feedback", "rita", "Rita wants answers with the code first"),
        ("user", "rita", "Rita is my climbing partner"),
        ("user", "rita", "Rita is my climbing partner and neighbour"),
    ]
    script = []
    for category, key, value in saves:
        script += [Reply(tool_calls=[ToolCallSpec("save_memory", {"category": category, "key": key, "value": value})]), Reply("Saved.")]
    fake.script(*script)
    with DaemonClient(live_url) as client:
        session_id = client.create_session("rita")
        for _, _, value in saves:
            assert client.prompt(session_id, f"remember: {value}").reply == "Saved."
        listed = {(m["category"], m["key"], m["value"]) for m in client.list_memories()}
        assert listed == {("feedback", "rita", saves[0][2]), ("user", "rita", saves[2][2])}
        (feedback,) = client.list_memories(category="feedback")
        assert client.forget_memory(feedback["id"]) is True
        assert [(m["category"], m["value"]) for m in client.list_memories()] == [("user", saves[2][2])]
