"""The daemon backend: the local model profile, and the bound on open chats."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.server import create_app
from qwenmem_tui.llm.local_server import LOCAL_SYSTEM_PROMPT, LocalChatDefaults
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply


def test_prompt_with_the_local_profile_offers_no_tools(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    defaults = LocalChatDefaults(LOCAL_SYSTEM_PROMPT, 256, 4096, supports_tools=False)
    app = create_app(settings, paths, project_root=project, model_defaults=defaults)
    fake.script(Reply("hi"))
    with TestClient(app, raise_server_exceptions=False) as client:
        session_id = client.post("/session", json={}).json()["sessionId"]
        reply = client.post(f"/session/{session_id}/prompt", json={"text": "hello"})
    assert reply.json()["reply"] == "hi"
    body = fake.chat_requests[-1]
    assert body["messages"][0] == {"role": "system", "content": LOCAL_SYSTEM_PROMPT}
    assert "tools" not in body


def test_idle_chats_beyond_the_cap_are_closed(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI, monkeypatch
) -> None:
    """A long-running daemon keeps at most MAX_OPEN_CHATS chats open, newest kept."""
    from qwenmem_tui.daemon import server

    monkeypatch.setattr(server, "MAX_OPEN_CHATS", 2)
    app = create_app(settings, paths, project_root=project)
    with TestClient(app, raise_server_exceptions=False) as client:
        ids = [client.post("/session", json={}).json()["sessionId"] for _ in range(3)]
        for session_id in ids:
            assert client.post(f"/session/{session_id}/prompt", json={"text": "hi"}).status_code == 200
        backend = app.state.backend
        assert list(backend._chats) == ids[1:]
        # The closed one reopens from the database when it is prompted again.
        again = client.post(f"/session/{ids[0]}/prompt", json={"text": "back"})
        assert again.status_code == 200
        assert list(backend._chats) == [ids[2], ids[0]]
        history = [m["content"] for m in fake.chat_requests[-1]["messages"][1:]]
        assert history[0] == "hi" and history[-1] == "back"
