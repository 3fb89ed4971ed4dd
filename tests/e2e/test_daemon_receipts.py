"""The daemon tells what a reply used (issue 29): `memories` in the prompt answer and in
the SSE done event, from the real `qwenmem serve` over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_daemon_serve import serve_process

from qwenmem_tui.daemon import DaemonClient
from qwenmem_tui.features.memory.extract import EXTRACTION_SYSTEM_PROMPT
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply


def remember(project: Path, *rows: dict) -> None:
    """Seed memories as a user would: `qwenmem memory import` of JSON lines."""
    source = project.parent / "seed.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = subprocess.run(
        [sys.executable, "-m", "qwenmem_tui", "memory", "import", "--trust", str(source)],
        cwd=project, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_the_prompt_answer_and_the_done_event_list_the_memories_used(
    home: Path, project: Path, fake: FakeOpenAI
) -> None:
    with (home / "config.toml").open("a") as config:
        config.write("\n[memory]\ninitial_wait_ms = 30000\n")  # delivery at the UserQuery
    remember(project, {"category": "user", "key": "home_city", "value": "I live in Lisbon"})

    def respond(body: dict) -> Reply:
        if body["messages"][0]["content"] == EXTRACTION_SYSTEM_PROMPT:
            return Reply('{"memories": []}')
        return Reply("You live in Lisbon.")

    fake.responder = respond
    with serve_process(project, env=dict(os.environ)) as (url, _), DaemonClient(url, timeout=30) as client:
        session_id = client.create_session("receipts")
        answer = client.prompt(session_id, "where do I live?")
        assert answer.reply == "You live in Lisbon."
        [used] = answer.memories
        assert (used["key"], used["value"]) == ("home_city", "I live in Lisbon")
        assert isinstance(used["id"], int)
        assert any("I live in Lisbon" in json.dumps(r["messages"]) for r in fake.chat_requests)
        other = client.create_session("fresh")
        events = list(client.stream_prompt(other, "where do I live?"))
        assert events[-1].event == "done"
        assert [m["key"] for m in events[-1].data["memories"]] == ["home_city"]
        # A reply that used no memory says so with an empty list, never a missing field.
        silent = client.create_session("silent")
        assert client.prompt(silent, "hi").memories == ()
