"""The daemon serves the bundled local model with its profile: short prompt, no tools."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.server import create_app
from qwenmem_tui.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.llm.local_server import LOCAL_SYSTEM_PROMPT, LocalChatDefaults
from qwenmem_tui.paths import Paths


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
