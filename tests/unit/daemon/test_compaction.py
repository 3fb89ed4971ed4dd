"""Compaction through the daemon: like the TUI, a block goes to memory extraction first."""

from __future__ import annotations

import json

from starlette.testclient import TestClient

from qwenmem_tui.config import Settings
from qwenmem_tui.features.compaction.summariser import SUMMARY_SYSTEM_PROMPT
from qwenmem_tui.features.memory.extract import EXTRACTION_SYSTEM_PROMPT
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

SUMMARY = json.dumps({"summary": "Talked about the upload retries.", "decisions": []})


def question(n: int) -> str:
    return f"Question {n:02d}: how does the upload retry loop behave in this project?"


def is_summary(body: dict) -> bool:
    return body["messages"][0]["content"] == SUMMARY_SYSTEM_PROMPT


def test_compaction_hands_the_block_to_the_sessions_extraction(
    make_daemon, fake: FakeOpenAI, settings: Settings
) -> None:
    settings.memory.extraction = True
    settings.llm.context_window = 600
    settings.compaction.keep_recent_turns = 1

    def respond(body: dict) -> Reply:
        system = body["messages"][0]["content"]
        if system == SUMMARY_SYSTEM_PROMPT:
            return Reply(SUMMARY)
        if system == EXTRACTION_SYSTEM_PROMPT:
            return Reply('{"memories": []}')
        return Reply("It retries three times, then gives up quietly.", usage=False)

    fake.responder = respond
    with TestClient(make_daemon()) as client:
        session_id = client.post("/session").json()["sessionId"]
        turn = 0
        while not any(is_summary(body) for body in fake.chat_requests):
            turn += 1
            assert turn <= 12, "the session never crossed the threshold"
            response = client.post(f"/session/{session_id}/prompt", json={"text": question(turn)})
            assert response.status_code == 200, response.text
    systems = [b["messages"][0]["content"] for b in fake.chat_requests]
    summary_at = systems.index(SUMMARY_SYSTEM_PROMPT)
    # A per-turn extraction sees one exchange; the hand-over sees the whole block.
    handover = [
        i
        for i, body in enumerate(fake.chat_requests)
        if systems[i] == EXTRACTION_SYSTEM_PROMPT
        and question(1) in body["messages"][1]["content"]
        and question(2) in body["messages"][1]["content"]
    ]
    assert handover and handover[0] < summary_at
