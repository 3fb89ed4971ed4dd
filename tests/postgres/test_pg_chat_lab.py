"""The seed's overwrite lab through the real chat loop, on PostgreSQL.

Turns 1 and 2 run on one machine, turn 3 in a new session on another machine (its
own home, its own index) sharing only the database; the request captured at the
fake server must carry Beta and not Alpha.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_support import CHAT_MODEL, TEST_API_KEY, chat_llm, collect
from pgtest_support import Backend

from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.chat.tools import builtin_tools
from qwenmem_tui.config import Settings
from qwenmem_tui.memory.model import Origin, Status
from qwenmem_tui.features.memory.prefetch import MemoryPrefetchHook, ProjectRecall
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.features.memory.tool import SAVE_MEMORY, save_memory_tool
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import project_id
from qwenmem_tui.storage import Database, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec

pytestmark = pytest.mark.postgres

def save_call(value: str) -> Reply:
    args = {"category": "project", "key": "current_project", "value": value}
    return Reply(tool_calls=[ToolCallSpec(SAVE_MEMORY, args)])


async def chat_session(
    svc: MemoryService, sessions: SessionStore, llm: LLMClient, fake: FakeOpenAI, root: Path
) -> ChatSession:
    tools = builtin_tools(root)
    tools.register(save_memory_tool(svc))
    info = await sessions.create_session(project_id(root))
    recall = ProjectRecall.of(svc, project_id(root)).recall
    prefetch = MemoryPrefetchHook(recall, initial_wait_ms=10_000)
    return ChatSession(
        info=info, store=sessions, llm=llm, tools=tools,
        settings=Settings(llm=chat_llm(fake.base_url)),
        project_root=root, hooks=[prefetch],
    )


async def test_overwrite_lab_through_the_chat_loop_on_postgres(fake: FakeOpenAI, pg_dsn: str, tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    backend = Backend("postgres", tmp_path, pg_dsn)
    llm = LLMClient(base_url=fake.base_url, api_key=TEST_API_KEY, model=CHAT_MODEL)
    laptop, server = await backend.open(machine="laptop"), await backend.open(machine="server")
    laptop_db = await Database.open(backend.paths("laptop").db_file)
    server_db = await Database.open(backend.paths("server").db_file)
    try:
        first = await chat_session(laptop, SessionStore(laptop_db), llm, fake, root)
        fake.script(save_call("Alpha, stack TypeScript"), Reply("Noted: Alpha."))
        await collect(first, "my project is Alpha, stack TypeScript")
        active = await laptop.list(statuses=[Status.ACTIVE])
        assert [(m.category, m.key, m.origin) for m in active] == [("project", "current_project", Origin.TOOL)]

        fake.script(save_call("Beta, stack Python"), Reply("Updated to Beta."))
        await collect(first, "actually I moved to Beta, stack Python")
        active = await server.list(statuses=[Status.ACTIVE])
        assert len(active) == 1 and "Beta" in active[0].value and "Alpha" not in active[0].value
        await first.close()

        third = await chat_session(server, SessionStore(server_db), llm, fake, root)
        fake.script(Reply("You are on Beta."))
        before = len(fake.chat_requests)
        await collect(third, "what is my current project?")
        prompt = json.dumps(fake.chat_requests[before]["messages"])
        assert "Beta" in prompt and "<system-reminder>" in prompt
        assert "Alpha" not in prompt
        await third.close()
    finally:
        await laptop.close()
        await server.close()
        await laptop_db.close()
        await server_db.close()
        await llm.aclose()
