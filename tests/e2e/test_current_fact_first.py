"""The current fact first, as every face shows it (issue 39 item 3), through real
`qwenmem` processes: a newer memory linked as possibly restating an older one (the fast
model's judgement unusable, so the link stays undecided and both stay active) ranks
before it, and the older one is marked as earlier, with both dates, in `memory search`
(text and JSON), the daemon's `POST /memory/search` and MCP's `recall` prompt. The
memories are written in this process (`cli_run`: the same `qwenmem memory` entry, a
dozen fresh interpreters fewer); the faces that show them are real processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from cli_support import CliRunner

from qwenmem_tui.memory.render import day
from qwenmem_tui.testing.fake_openai import FakeOpenAI
from tests.e2e.test_daemon_serve import serve_process
from tests.e2e.test_mcp_server import mcp_session
from tests.process_support import checkout_env

TOKEN = "e2e-token-current"


def qwenmem(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    ran = subprocess.run(
        [sys.executable, "-m", "qwenmem_tui", *args],
        cwd=project, capture_output=True, text=True, timeout=120, env=checkout_env(os.environ),
    )
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    return ran


def seoul_then_busan(
    cli_run: CliRunner, home: Path, project: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Seoul, an unrelated fact, then Busan under a key no rule ties to a city (under
    "residence" the rule now supersedes: the key says what the fact is): the fake model's answer
    to the identity question is no judgement, so Busan is linked as restating Seoul."""
    with (home / "config.toml").open("a", encoding="utf-8") as config:
        config.write('\n[memory]\nembedding = "hash"\n')

    def memory(*args: str) -> str:
        ran = cli_run("memory", *args, home=home, cwd=project)
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
        return ran.stdout

    memory("add", "I live in Seoul")
    memory("add", "My editor is Helix")
    memory("add", "Busan is my city now", "--key", "whereabouts", "--category", "user")
    rows = {m["value"]: m for m in json.loads(memory("list", "--json"))}
    seoul, busan = rows["I live in Seoul"], rows["Busan is my city now"]
    assert busan["restates"] == seoul["id"] and seoul["status"] == busan["status"] == "active"
    return seoul, busan


def assert_marked(hits: list[dict[str, Any]], seoul: dict[str, Any], busan: dict[str, Any]) -> None:
    ids = [h["id"] for h in hits]
    assert ids.index(busan["id"]) < ids.index(seoul["id"]), ids
    by_id = {h["id"]: h for h in hits}
    assert by_id[busan["id"]]["version"] == "current"
    older = by_id[seoul["id"]]
    assert older["version"] == "earlier" and older["stated"] == day(seoul["stated_at"])
    assert older["newer_version"]["id"] == busan["id"]
    assert older["newer_version"]["stated"] == day(busan["stated_at"])


def test_cli_search_ranks_the_newer_first_and_marks_the_older(
    cli_run: CliRunner, home: Path, project: Path, fake: FakeOpenAI
) -> None:
    seoul, busan = seoul_then_busan(cli_run, home, project)
    # "Seoul" holds the older one's very word: on its own it scores above Busan.
    hits = json.loads(qwenmem(project, "memory", "search", "Seoul city", "--json").stdout)
    assert {h["id"]: h["score"] for h in hits}[seoul["id"]] > {h["id"]: h["score"] for h in hits}[busan["id"]]
    assert_marked(hits, seoul, busan)
    text = qwenmem(project, "memory", "search", "Seoul city").stdout.splitlines()
    [busan_at] = [i for i, line in enumerate(text) if "Busan is my city now" in line]
    [seoul_at] = [i for i, line in enumerate(text) if "I live in Seoul" in line]
    assert busan_at < seoul_at and " active " in text[busan_at]
    assert " earlier " in text[seoul_at] and " active " not in text[seoul_at]
    note = text[seoul_at + 1]
    assert f"#{busan['id']} whereabouts" in note and day(busan["stated_at"]) in note
    assert f"stated {day(seoul['stated_at'])}" in note


def test_daemon_search_and_mcp_recall_mark_the_older(
    cli_run: CliRunner, home: Path, project: Path, fake: FakeOpenAI
) -> None:
    seoul, busan = seoul_then_busan(cli_run, home, project)
    env = checkout_env({**os.environ, "QWENMEM_SERVER_TOKEN": TOKEN})
    with serve_process(project, env=env) as (url, _):
        answer = httpx.post(
            f"{url}/memory/search", json={"query": "Seoul city"},
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60,
        )
    assert answer.status_code == 200, answer.text
    assert_marked(answer.json()["memories"], seoul, busan)


def test_mcp_recall_prompt_marks_the_older(
    cli_run: CliRunner, home: Path, project: Path, fake: FakeOpenAI
) -> None:
    seoul_then_busan(cli_run, home, project)  # before the loop: `qwenmem` runs its own

    async def recall() -> Any:
        async with mcp_session(project) as session:
            return await session.get_prompt("recall", {"question": "Seoul city"})

    prompt = asyncio.run(recall())
    [message] = prompt.messages
    lines = message.content.text.splitlines()
    [busan] = [i for i, line in enumerate(lines) if "Busan is my city now" in line]
    [seoul] = [i for i, line in enumerate(lines) if "I live in Seoul" in line]
    assert busan < seoul and "an earlier version: whereabouts, stated" in lines[seoul]
