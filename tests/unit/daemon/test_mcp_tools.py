"""The daemon runs MCP tools of trusted servers only (nobody there could answer a
permission prompt); their servers start in the background with the daemon."""

from __future__ import annotations

import time
from pathlib import Path

from mcp_support import PYTHON, write_servers
from starlette.testclient import TestClient

from qwenmem_tui.config import Settings
from qwenmem_tui.features.mcp.settings import McpServerSettings, McpSettings
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec

from .conftest import MakeApp


def _offered(fake: FakeOpenAI) -> set[str]:
    return {tool["function"]["name"] for tool in fake.chat_requests[-1].get("tools", ())}


def test_daemon_offers_and_runs_trusted_mcp_tools_only(
    settings: Settings, make_daemon: MakeApp, fake: FakeOpenAI, tmp_path: Path
) -> None:
    script, _ = write_servers(tmp_path)
    notes = tmp_path / "notes.txt"
    args = [str(script), str(notes)]
    settings.mcp = McpSettings(
        servers={
            "trusted": McpServerSettings(command=PYTHON, args=args, trust=True),
            "other": McpServerSettings(command=PYTHON, args=args),
        }
    )
    with TestClient(make_daemon(), raise_server_exceptions=False) as client:
        session = client.post("/session", json={}).json()["sessionId"]
        # The servers start in the background: ask until the trusted one's tools are offered.
        deadline = time.monotonic() + 30
        while True:
            fake.script(Reply("waiting"))
            assert client.post(f"/session/{session}/prompt", json={"text": "ping"}).status_code == 200
            if "mcp__trusted__add_note" in _offered(fake) or time.monotonic() > deadline:
                break
        offered = _offered(fake)
        assert "mcp__trusted__add_note" in offered
        assert not any(name.startswith("mcp__other__") for name in offered)
        fake.script(
            Reply(tool_calls=[ToolCallSpec("mcp__trusted__add_note", {"text": "from the daemon"})]),
            Reply("Noted."),
        )
        answer = client.post(f"/session/{session}/prompt", json={"text": "note it"})
        assert answer.status_code == 200 and answer.json()["reply"].endswith("Noted.")
        assert notes.read_text() == "from the daemon\n"
